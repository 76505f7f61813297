use distlock::rate_limit;

// Every problem is reported in one compile, and the function itself is still emitted (so
// `main` can call it and no "cannot find function" error is added).
#[rate_limit(policy = "api: 0/s", key = "user:{id", retries = 3)]
fn fetch(id: u64) -> u64 {
    id
}

fn main() {
    let _ = fetch(1);
}
