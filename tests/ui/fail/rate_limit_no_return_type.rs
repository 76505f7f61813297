use distlock::rate_limit;

#[rate_limit(policy = "api: 10/s", key = "user:{user}")]
async fn no_return_type(user: u64) {
    let _ = user;
}

fn main() {}
