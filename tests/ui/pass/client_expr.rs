//! `client = <expr>` with the accepted forms: any expression of type `&Client`, including
//! ones that deref to it (`&Arc<Client>`, a field of a borrowed struct), evaluated when the
//! function is called.
#![deny(warnings)]

use std::sync::{Arc, OnceLock};

use distlock::{Client, LockError, distributed_lock};

static LOCKS: OnceLock<Client> = OnceLock::new();

fn locks() -> &'static Client {
    LOCKS.get_or_init(Client::in_memory)
}

#[distributed_lock(key = "a", client = locks())]
async fn from_a_function() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "b", client = &shared)]
async fn from_an_arc(shared: Arc<Client>) -> Result<usize, LockError> {
    Ok(Arc::strong_count(&shared))
}

struct Config {
    client: Client,
}

#[distributed_lock(key = "c", client = &config.client)]
async fn from_a_field(config: &Config) -> Result<(), LockError> {
    let _ = &config.client;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    from_a_function().await.expect("static");
    from_an_arc(Arc::new(Client::in_memory())).await.expect("arc");
    from_a_field(&Config {
        client: Client::in_memory(),
    })
    .await
    .expect("field");
    // None of these touched the default client, which is not installed.
    assert!(distlock::default_client().is_none());
}
