use distlock::distributed_lock;

#[distributed_lock(key = "jobs")]
async fn no_return_type(id: u64) {
    let _ = id;
}

fn main() {}
