use distlock::{Client, LockError, distributed_lock};

#[distributed_lock(key = "jobs", client = client)]
async fn settle(client: Client) -> Result<(), LockError> {
    let _ = client;
    Ok(())
}

fn main() {}
