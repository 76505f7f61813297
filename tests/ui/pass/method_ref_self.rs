//! A method taking `&self`, with the client and a key part read from `self`.
#![deny(warnings)]

use distlock::{Client, LockError, distributed_lock};

struct Jobs {
    locks: Client,
    shard: u16,
}

impl Jobs {
    #[distributed_lock(key = "job:{self.shard}:{name}", client = &self.locks)]
    pub(crate) async fn run(&self, name: &str) -> Result<u64, LockError> {
        let lease = distlock::current_lease().expect("inside the lock");
        assert_eq!(lease.name(), format!("job:{}:{name}", self.shard));
        lease.fence().await
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let jobs = Jobs {
        locks: Client::in_memory(),
        shard: 4,
    };
    let first = jobs.run("nightly").await.expect("first");
    let second = jobs.run("nightly").await.expect("second");
    assert!(second > first);
}
