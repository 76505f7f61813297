use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "jobs", ttl = "9ms")]
async fn settle() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
