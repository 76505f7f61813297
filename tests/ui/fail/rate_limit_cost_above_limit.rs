use distlock::{RateLimitError, rate_limit};

// A call costing 25 can never pass a policy that allows 20 at once.
#[rate_limit(policy = ["api: 100/s burst 20", "daily: fixed-window 10000/d"], cost = 25)]
async fn upload() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
