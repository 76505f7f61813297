use distlock::{RateLimitError, rate_limit};

// Several policies go in one array, not in several `policy` arguments.
#[rate_limit(policy = "per-second: 10/s", policy = "per-hour: 1000/h")]
async fn fetch() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
