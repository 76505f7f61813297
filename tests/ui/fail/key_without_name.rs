use distlock::{LockError, distributed_lock};

#[distributed_lock("order:{id}")]
async fn settle(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
