use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "jobs")]
fn not_async() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
