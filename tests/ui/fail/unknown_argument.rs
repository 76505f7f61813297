use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "jobs", timeout = "5s")]
async fn settle() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
