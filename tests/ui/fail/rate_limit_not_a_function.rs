use distlock::rate_limit;

#[rate_limit(policy = "api: 10/s")]
struct Api;

fn main() {}
