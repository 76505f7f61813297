use distlock::{RateLimitError, rate_limit};

#[rate_limit(policy = "api: 10/s", key = "user:{user_id}")]
async fn fetch(user: u64) -> Result<u64, RateLimitError> {
    Ok(user)
}

fn main() {}
