use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "jobs", on_busy = fail)]
async fn settle() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
