use distlock::{LockError, distributed_lock};

struct Order {
    id: u64,
}

#[distributed_lock(key = "order:{order}")]
async fn settle(order: Order) -> Result<u64, LockError> {
    Ok(order.id)
}

fn main() {}
