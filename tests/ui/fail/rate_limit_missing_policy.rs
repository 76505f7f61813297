use distlock::{RateLimitError, rate_limit};

#[rate_limit(key = "user:{user}")]
async fn fetch(user: u64) -> Result<u64, RateLimitError> {
    Ok(user)
}

fn main() {}
