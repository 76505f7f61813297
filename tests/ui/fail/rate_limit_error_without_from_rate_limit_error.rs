use distlock::{LockError, rate_limit};

// `LockError` is the lock's error: a rate-limited function's error type needs
// `From<RateLimitError>`.
#[rate_limit(policy = "api: 10/s")]
async fn fetch() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
