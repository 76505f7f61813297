use distlock::{RateLimitError, rate_limit};

// Well formed, but a window allows `count` per window: a separate burst is refused, as
// `Policy::new` refuses it.
#[rate_limit(policy = "api: fixed-window 10/s burst 3")]
async fn fetch() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
