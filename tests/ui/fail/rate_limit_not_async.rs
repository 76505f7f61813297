use distlock::{RateLimitError, rate_limit};

#[rate_limit(policy = "api: 10/s")]
fn not_async() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
