use distlock::{RateLimitError, rate_limit};

#[rate_limit(policy = 100)]
async fn fetch() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
