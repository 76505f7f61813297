use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "jobs", reentrant = "no")]
async fn settle() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
