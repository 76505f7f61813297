use distlock::distributed_lock;

#[distributed_lock(key = "jobs")]
struct Jobs;

fn main() {}
