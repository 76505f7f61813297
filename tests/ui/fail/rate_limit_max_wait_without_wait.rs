use distlock::{RateLimitError, rate_limit};

#[rate_limit(policy = "api: 10/s", max_wait = "5s")]
async fn fetch() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
