use distlock::distributed_lock;

#[distributed_lock(key = "jobs")]
async fn not_a_result() -> Option<u64> {
    Some(1)
}

fn main() {}
