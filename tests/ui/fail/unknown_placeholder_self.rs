use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "job:{self.id}")]
async fn free_function() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
