use distlock::distributed_lock;

// Every problem is reported in one compile, and the function itself is still emitted (so
// `main` can call it and no "cannot find function" error is added).
#[distributed_lock(key = "order:{id", ttl = "soon", retries = 3)]
fn settle(id: u64) -> u64 {
    id
}

fn main() {
    let _ = settle(1);
}
