//! The runtime side (`client.idempotency`) where the layer cannot show it: a claim that was
//! lost stores nothing, and the record shares its claim's hash tag.

use std::time::Duration;

use distlock::Client;
use distlock::idempotency::{Begin, Record};

use crate::support::RedisServer;
use crate::support::fixture::connect;

const DAY: Duration = Duration::from_secs(24 * 3600);

async fn lost_claims_store_nothing(client: Client) {
    let keys = client.idempotency("runtime").expect("namespace");
    let Begin::Run(claim) = keys.begin("k", b"fp").await.expect("begin") else {
        panic!("a new key runs");
    };
    // The claim's lock is lost (an operator deleted it, or it expired and was taken).
    let lock = client
        .__inspect()
        .lock_key("idempotency/runtime/k")
        .expect("name");
    assert!(client.__inspect().delete(&lock).await.expect("delete"));
    let record = Record::new(200, vec![], b"late".to_vec());
    assert!(!keys.complete(claim, &record, DAY).await.expect("complete"));
    // Nothing was stored: the next request runs.
    let Begin::Run(claim) = keys.begin("k", b"fp").await.expect("begin") else {
        panic!("nothing was stored, so the key runs again");
    };
    assert!(keys.complete(claim, &record, DAY).await.expect("complete"));
    assert!(
        matches!(keys.begin("k", b"fp").await.expect("begin"), Begin::Replay(r) if r == record)
    );
    assert!(matches!(
        keys.begin("k", b"other").await.expect("begin"),
        Begin::Mismatch
    ));

    // The record is `<prefix>:idem:{tag}` with the lock's tag: one slot for both.
    let tag = |key: &str| {
        let open = key.find('{').expect("tagged");
        key[open..].to_owned()
    };
    let stored: Vec<String> = client
        .__inspect()
        .keys()
        .await
        .expect("keys")
        .into_iter()
        .filter(|k| k.contains(":idem:"))
        .collect();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(tag(&stored[0]), tag(&lock));

    // A running request with the key: in flight, at once without a wait.
    let Begin::Run(running) = keys.begin("busy", b"fp").await.expect("begin") else {
        panic!("a new key runs");
    };
    assert!(matches!(
        keys.begin("busy", b"fp").await.expect("begin"),
        Begin::InFlight
    ));
    running.release().await.expect("release");
    assert!(matches!(
        keys.begin("busy", b"fp").await.expect("begin"),
        Begin::Run(_)
    ));

    // Bad input is a typed error.
    assert!(keys.begin("", b"fp").await.is_err());
    assert!(keys.begin("k", &[0; 65]).await.is_err());
    assert!(client.idempotency("bad namespace").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_memory() {
    lost_claims_store_nothing(Client::in_memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis() {
    let server = RedisServer::start();
    lost_claims_store_nothing(connect(&server.url()).await).await;
}
