use distlock::{RateLimitError, rate_limit};

#[rate_limit(policy = "api: 10/s", burst = 20)]
async fn fetch() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
