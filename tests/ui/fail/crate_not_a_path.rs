use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "jobs", crate = "dist lock")]
async fn settle() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
