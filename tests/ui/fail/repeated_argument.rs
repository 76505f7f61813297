use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "jobs", ttl = "5s", ttl = "10s")]
async fn settle() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
