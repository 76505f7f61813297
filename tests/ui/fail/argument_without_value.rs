use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "jobs", watchdog)]
async fn settle() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
