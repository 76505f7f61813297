use distlock::{RateLimitError, rate_limit};

#[rate_limit(policy = "api: 10/s", on_limit = wait)]
async fn fetch() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
