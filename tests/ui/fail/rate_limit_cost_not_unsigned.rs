use distlock::{RateLimitError, rate_limit};

#[rate_limit(policy = "api: 100/s", cost = delta)]
async fn adjust(delta: i64) -> Result<i64, RateLimitError> {
    Ok(delta)
}

fn main() {}
