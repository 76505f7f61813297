use distlock::{RateLimitError, rate_limit};

#[rate_limit(policy = "api: leaky-bucket 100/s")]
async fn fetch() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
