use distlock::{RateLimitError, rate_limit};

#[rate_limit(policy = "api: 100/x burst 20")]
async fn fetch() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
