use distlock::{RateLimitError, rate_limit};

// The name is part of the policy's keys: it is not optional.
#[rate_limit(policy = "100/s")]
async fn fetch() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
