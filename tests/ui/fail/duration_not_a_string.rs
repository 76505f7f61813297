use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "jobs", wait = 5)]
async fn settle() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
