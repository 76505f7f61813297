use distlock::rate_limit;

#[rate_limit(policy = "api: 10/s")]
async fn not_a_result() -> Option<u64> {
    Some(1)
}

fn main() {}
