//! The runtime side (`client.idempotency`) where the layer cannot show it: a claim that was
//! lost stores nothing and leaves "outcome unknown"; a discarded claim lets its key run
//! again; scopes keep callers apart; a record expires after its ttl and the key runs again;
//! the record shares its claim's hash tag.

use std::time::Duration;

use distlock::Client;
use distlock::idempotency::{Begin, Record, Scope};

use crate::support::RedisServer;
use crate::support::fixture::connect;

const ME: Scope<'static> = Scope::Caller("acct-1");

async fn behaves(client: Client) {
    let keys = client.idempotency("runtime").expect("namespace");
    let record = Record::new(200, vec![], b"done".to_vec());

    // A claim that is lost (an operator deleted it, or it expired and was taken) stores
    // nothing, and its key's outcome is unknown from then on: not run again.
    let Begin::Run(claim) = keys.begin(ME, "k", b"fp").await.expect("begin") else {
        panic!("a new key runs");
    };
    let lock = client
        .__inspect()
        .lock_key(claim.lease().name())
        .expect("name");
    assert!(client.__inspect().delete(&lock).await.expect("delete"));
    assert!(!keys.complete(claim, &record).await.expect("complete"));
    assert!(matches!(
        keys.begin(ME, "k", b"fp").await.expect("begin"),
        Begin::Interrupted
    ));
    // Another request with the key is still a mismatch, not an "outcome unknown".
    assert!(matches!(
        keys.begin(ME, "k", b"other").await.expect("begin"),
        Begin::Mismatch
    ));

    // A dropped claim (a handler that panicked) leaves the same answer.
    let Begin::Run(claim) = keys.begin(ME, "dropped", b"fp").await.expect("begin") else {
        panic!("a new key runs");
    };
    claim.release().await.expect("release");
    assert!(matches!(
        keys.begin(ME, "dropped", b"fp").await.expect("begin"),
        Begin::Interrupted
    ));

    // A discarded claim (the request did nothing) lets its key run again; then it completes.
    let Begin::Run(claim) = keys.begin(ME, "again", b"fp").await.expect("begin") else {
        panic!("a new key runs");
    };
    assert!(keys.discard(claim).await.expect("discard"));
    let Begin::Run(claim) = keys.begin(ME, "again", b"fp").await.expect("begin") else {
        panic!("a discarded key runs again");
    };
    assert!(keys.complete(claim, &record).await.expect("complete"));
    assert!(matches!(
        keys.begin(ME, "again", b"fp").await.expect("begin"),
        Begin::Replay(r) if r == record
    ));

    // Another caller's key of the same name is another key; so is the global one.
    for other in [Scope::caller("acct-2"), Scope::Global] {
        let Begin::Run(claim) = keys.begin(other, "again", b"fp").await.expect("begin") else {
            panic!("another scope's key is new");
        };
        assert!(keys.discard(claim).await.expect("discard"));
    }

    // The record is `<prefix>:idem:{tag}` with the lock's tag: one slot for both, and the
    // caller's id appears nowhere in the store's keys.
    let tag = |key: &str| {
        let open = key.find('{').expect("tagged");
        key[open..].to_owned()
    };
    let all = client.__inspect().keys().await.expect("keys");
    assert!(!all.iter().any(|k| k.contains("acct-")), "{all:?}");
    let stored: Vec<&String> = all.iter().filter(|k| k.contains(":idem:")).collect();
    assert_eq!(stored.len(), 3, "{stored:?}");
    assert!(stored.iter().any(|k| tag(k) == tag(&lock)), "{stored:?}");

    // A running request with the key: in flight, at once without a wait.
    let Begin::Run(running) = keys.begin(ME, "busy", b"fp").await.expect("begin") else {
        panic!("a new key runs");
    };
    assert!(matches!(
        keys.begin(ME, "busy", b"fp").await.expect("begin"),
        Begin::InFlight
    ));
    assert!(keys.discard(running).await.expect("discard"));
    assert!(matches!(
        keys.begin(ME, "busy", b"fp").await.expect("begin"),
        Begin::Run(_)
    ));

    // With `rerun_interrupted`, a dropped claim leaves nothing: the key runs again.
    let rerun = keys.clone().rerun_interrupted(true);
    let Begin::Run(claim) = rerun.begin(ME, "rerun", b"fp").await.expect("begin") else {
        panic!("a new key runs");
    };
    claim.release().await.expect("release");
    assert!(matches!(
        rerun.begin(ME, "rerun", b"fp").await.expect("begin"),
        Begin::Run(_)
    ));

    // Bad input is a typed error.
    assert!(keys.begin(ME, "", b"fp").await.is_err());
    assert!(keys.begin(ME, "k", &[0; 65]).await.is_err());
    assert!(keys.begin(Scope::caller(""), "k", b"fp").await.is_err());
    assert!(client.idempotency("bad namespace").is_err());
    assert!(keys.clone().record_ttl(Duration::ZERO).is_err());
    assert!(keys.clone().max_run(Duration::ZERO).is_err());
}

/// A record is kept for its ttl and no longer: then the key's next request runs again.
async fn records_expire(client: Client) {
    let ttl = Duration::from_millis(400);
    let keys = client
        .idempotency("expiry")
        .expect("namespace")
        .record_ttl(ttl)
        .expect("ttl");
    let Begin::Run(claim) = keys.begin(ME, "k", b"fp").await.expect("begin") else {
        panic!("a new key runs");
    };
    let record = Record::new(201, vec![], b"kept".to_vec());
    assert!(keys.complete(claim, &record).await.expect("complete"));
    assert!(matches!(
        keys.begin(ME, "k", b"fp").await.expect("begin"),
        Begin::Replay(r) if r == record
    ));
    // Well past the ttl (the store's own expiry, with room for a slow machine).
    tokio::time::sleep(ttl * 3).await;
    assert!(
        matches!(
            keys.begin(ME, "k", b"fp").await.expect("begin"),
            Begin::Run(_)
        ),
        "the record outlived its ttl"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_memory() {
    behaves(Client::in_memory()).await;
    records_expire(Client::in_memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis() {
    let server = RedisServer::start();
    behaves(connect(&server.url()).await).await;
    records_expire(connect(&server.url()).await).await;
}
