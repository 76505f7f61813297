use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "jobs", min_hold = "2m", max_hold = "1m")]
async fn settle() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
