use distlock::distributed_lock;

#[derive(Debug)]
struct AppError;

#[distributed_lock(key = "jobs")]
async fn settle() -> Result<(), AppError> {
    Ok(())
}

fn main() {}
