use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "")]
async fn settle() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
