use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "jobs", on_busy = error, wait = "5s")]
async fn settle() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
