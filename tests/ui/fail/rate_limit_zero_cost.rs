use distlock::{RateLimitError, rate_limit};

#[rate_limit(policy = "api: 10/s", cost = 0)]
async fn fetch() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
