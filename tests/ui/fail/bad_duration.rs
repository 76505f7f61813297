use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "jobs", ttl = "30 parsecs")]
async fn settle() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
