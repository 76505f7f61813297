//! The process-wide default client. It is global, so every behaviour that depends on it is in
//! this one test; no other test of this binary installs it.

use std::time::Duration;

use distlock::{Client, LockError, RateLimitError, distributed_lock, rate_limit};
use tokio::time::Instant;

use crate::support::fixture::Fixture;

/// The lease's name, and its key's pttl with the instant the read was answered. Eager: its
/// grant mints the fence.
#[distributed_lock(key = "nightly:{job}", ttl = "2s", fenced = true)]
async fn nightly(job: &str) -> Result<(String, Option<Duration>, Instant), LockError> {
    let lease = distlock::current_lease().expect("held");
    let client = distlock::default_client().expect("installed");
    let key = client.__inspect().lock_key(lease.name()).expect("key");
    let pttl = client.__inspect().pttl(&key).await.expect("pttl");
    Ok((lease.name().to_owned(), pttl, Instant::now()))
}

#[rate_limit(policy = "default-client: 2/h", key = "{user}")]
async fn limited(user: u32) -> Result<u32, RateLimitError> {
    Ok(user)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_client_is_used_and_its_absence_is_an_error() {
    assert!(distlock::default_client().is_none());
    match nightly("backup").await {
        Err(LockError::NoDefaultClient) => {}
        other => panic!("expected NoDefaultClient, got {other:?}"),
    }
    match limited(1).await {
        Err(RateLimitError::NoDefaultClient) => {}
        other => panic!("expected NoDefaultClient, got {other:?}"),
    }

    let store = Fixture::redis().await;
    distlock::set_default_client(store.client.clone());
    let called = Instant::now();
    let (name, pttl, answered) = nightly("backup").await.expect("runs on the default client");
    assert_eq!(name, "nightly:backup");
    // The key lives in the default client's Redis, with the macro's ttl: at most 2 s, and
    // (granted after `called`) lasting until 2 s after that at least (1 ms: PTTL's whole
    // milliseconds). A busy machine only makes the read later, never the bound wrong.
    let pttl = pttl.expect("the lock key exists in the default client's store");
    assert!(
        pttl <= Duration::from_secs(2)
            && answered + pttl + Duration::from_millis(1) >= called + Duration::from_secs(2),
        "{pttl:?}"
    );
    assert!(!store.is_held("nightly:backup").await, "released");
    // The rate limit counts in the default client's Redis.
    limited(1).await.expect("1 of 2");
    limited(1).await.expect("2 of 2");
    assert!(matches!(
        limited(1).await,
        Err(RateLimitError::Limited { .. })
    ));
    let keys = store.client.__inspect().keys().await.expect("keys");
    assert!(
        keys.iter().any(|k| k.contains("default-client")),
        "the budget lives in the default client's store: {keys:?}"
    );

    // A later call picks up a replaced default.
    let memory = Client::in_memory();
    distlock::set_default_client(memory.clone());
    let (_, pttl, _) = nightly("backup").await.expect("runs on the new default");
    // The new default's store has a budget of its own.
    assert_eq!(limited(1).await.expect("a fresh budget"), 1);
    assert!(pttl.is_some());
    // Its grant (eager: `fenced = true`) minted a fence in the new default's store.
    let fence_key = memory
        .__inspect()
        .fence_key("nightly:backup")
        .expect("valid name");
    assert!(
        memory
            .__inspect()
            .keys()
            .await
            .expect("keys")
            .contains(&fence_key)
    );
}
