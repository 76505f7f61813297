use distlock::{LockError, distributed_lock};

struct Path<T>(T);

#[distributed_lock(key = "order:{ordr_id}")]
async fn settle(order_id: u64, Path(shop): Path<String>) -> Result<(), LockError> {
    let _ = (order_id, shop);
    Ok(())
}

fn main() {}
