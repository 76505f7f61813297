use distlock::{RateLimitError, rate_limit};

#[rate_limit(policy = ["api: 10/s", "api: fixed-window 1000/h"])]
async fn fetch() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
