use distlock::{LockError, distributed_lock};

// A skipped call has to return something: `()` or `None`. A `u64` has no "did not run" value
// that a caller could not mistake for a result.
#[distributed_lock(key = "reports", on_busy = skip)]
async fn count_reports() -> Result<u64, LockError> {
    Ok(7)
}

fn main() {}
