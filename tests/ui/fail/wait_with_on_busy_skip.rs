use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "reports", on_busy = skip, wait = "5s")]
async fn send_reports() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
