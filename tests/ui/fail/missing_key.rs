use distlock::{LockError, distributed_lock};

#[distributed_lock(ttl = "10s")]
async fn settle() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
