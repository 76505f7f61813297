use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "order:order_id}")]
async fn settle(order_id: u64) -> Result<(), LockError> {
    let _ = order_id;
    Ok(())
}

fn main() {}
