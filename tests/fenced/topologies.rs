//! Where a fenced resource lives on each topology: its two keys in one slot (a primary, a
//! Cluster), its fence through a Sentinel failover, and no resource on a Redlock quorum.

use std::time::Duration;

use distlock::{Client, FencedError};
use redis::AsyncCommands as _;

use crate::stores::Store;
use crate::support::cluster::slot_of;
use crate::support::sentinel::SentinelSetup;
use crate::support::server::RedisServer;

/// The documented layout: `<prefix>:fenced-guard:{<name>}` holds the fence,
/// `<prefix>:fenced:{<name>}` the values (a plain hash), both without expiry unless asked for,
/// on the node that owns the name's slot.
async fn layout(store: Store, name: &str) {
    let resource = format!("{name}:{{tag}}");
    let doc = store.client.fenced(resource.as_str()).expect("fenced");
    doc.update(77)
        .set("buyer", "ada")
        .set("{k}", "v")
        .apply()
        .await
        .expect("write");
    let encoded = resource.replace('{', "%7B").replace('}', "%7D");
    let guard = format!("distlock:fenced-guard:{{{encoded}}}");
    let values = format!("distlock:fenced:{{{encoded}}}");
    assert_eq!(slot_of(&guard), slot_of(&values));
    assert_eq!(slot_of(&guard), slot_of(encoded.as_bytes()));
    let mut conn = store.raw(&guard).await.expect("a Redis store");
    let fence: Option<String> = conn.get(&guard).await.expect("GET");
    assert_eq!(fence.as_deref(), Some("77"), "{}", store.log());
    let mut hash: Vec<(String, String)> = conn.hgetall(&values).await.expect("HGETALL");
    hash.sort();
    assert_eq!(
        hash,
        [
            ("buyer".to_owned(), "ada".to_owned()),
            ("{k}".to_owned(), "v".to_owned())
        ]
    );
    for key in [&guard, &values] {
        let pttl: i64 = conn.pttl(key).await.expect("PTTL");
        assert_eq!(pttl, -1, "{key} has no expiry");
    }

    // With a ttl, both keys get it; deleting every value keeps the fence.
    let temporary = doc
        .clone()
        .expire_after(Duration::from_secs(60))
        .expect("ttl");
    temporary.update(78).clear().apply().await.expect("clear");
    let exists: bool = conn.exists(&values).await.expect("EXISTS");
    assert!(!exists, "an empty hash is no key");
    let pttl: i64 = conn.pttl(&guard).await.expect("PTTL");
    assert!((1..=60_000).contains(&pttl), "{pttl}");
    temporary.set("v", "1", 78).await.expect("write");
    let pttl: i64 = conn.pttl(&values).await.expect("PTTL");
    assert!((1..=60_000).contains(&pttl), "{pttl}");
    // A write without a ttl makes both permanent again.
    doc.set("v", "2", 78).await.expect("write");
    for key in [&guard, &values] {
        let pttl: i64 = conn.pttl(key).await.expect("PTTL");
        assert_eq!(pttl, -1, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layout_on_a_single_primary() {
    layout(Store::redis().await, "layout:r").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layout_on_a_cluster() {
    layout(Store::cluster().await, "layout:c").await;
}

/// On a Cluster, resources spread over the masters, each write a single-slot script there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_spread_over_a_clusters_masters() {
    let store = Store::cluster().await;
    let crate::stores::Backing::Cluster(cluster) = &store.backing else {
        unreachable!()
    };
    let mut owners = std::collections::BTreeSet::new();
    for i in 0..60 {
        let name = format!("spread:{i}");
        let doc = store.client.fenced(name.as_str()).expect("fenced");
        doc.set("v", i.to_string(), 1000 + i).await.expect("write");
        assert_eq!(stale_last(doc.set("v", "old", 999).await), 1000 + i);
        let guard = format!("distlock:fenced-guard:{{{name}}}");
        let master = cluster.master_of_key(&guard).await;
        let fence: Option<String> = master.conn().await.get(&guard).await.expect("GET");
        assert_eq!(fence, Some((1000 + i).to_string()));
        owners.insert(master.port());
    }
    assert_eq!(owners.len(), 3, "60 names over the 3 masters");
}

fn stale_last(result: Result<(), FencedError>) -> u64 {
    match result {
        Err(FencedError::Stale { last, .. }) => last,
        other => panic!("expected Stale, got {other:?}"),
    }
}

/// Behind Sentinel: the fence is replicated with the values, so after a failover the
/// promoted primary still refuses the older writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_survives_a_sentinel_failover() {
    let setup = SentinelSetup::start();
    let client = Client::builder()
        .response_timeout(Duration::from_secs(3))
        .connect_sentinel(setup.master_name(), setup.sentinel_urls())
        .await
        .expect("connect through sentinel");
    let doc = client.fenced("sentinel:doc").expect("fenced");
    doc.set("owner", "b", 20).await.expect("write");
    assert_eq!(stale_last(doc.set("owner", "a", 19).await), 20);
    setup.wait_replication_synced().await;
    let before = setup.primary_addr().await;
    let promotion = setup.failover().await;
    assert_eq!(promotion.old_primary.addr(), before);
    assert_ne!(setup.primary_addr().await, before, "the roles swapped");

    // The first write after the failover may meet the demoted primary (READONLY) until the
    // client has moved: bounded retries.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let last = loop {
        match doc.set("owner", "a", 19).await {
            Err(FencedError::Stale { last, .. }) => break last,
            Err(FencedError::Store(err)) if err.is_transient() => {
                assert!(tokio::time::Instant::now() < deadline, "{err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("expected Stale after the failover, got {other:?}"),
        }
    };
    assert_eq!(last, 20);
    doc.set("owner", "c", 21)
        .await
        .expect("a newer holder writes");
    let snapshot = doc.read().await.expect("read");
    assert_eq!(snapshot.fence, Some(21));
    assert_eq!(snapshot.text("owner"), Some("c"));
}

/// A Redlock quorum has no single store to hold a resource: refused when the handle is made,
/// never per write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_client_is_refused_at_fenced() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let client = Client::connect_quorum(servers.iter().map(RedisServer::url))
        .await
        .expect("connect the quorum");
    let err = client.fenced("quorum:doc").unwrap_err();
    assert!(
        matches!(err, FencedError::UnsupportedStore { .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("single primary") && text.contains("Cluster"),
        "{text}"
    );
    // Locks still work there, and their fences can guard a resource on another store.
    let lease = client.lock("quorum:doc").acquire().await.expect("lock");
    let elsewhere = Client::in_memory().fenced("quorum:doc").expect("fenced");
    elsewhere
        .set("v", "x", lease.fence().await.expect("fence"))
        .await
        .expect("a quorum's fence on another store");
    lease.release().await.expect("release");
}

/// The commands `fenced.lua` runs, as the module docs list them for an ACL user.
const FENCED_ACL_RULES: &[&str] = &[
    "+hset", "+hget", "+hdel", "+hexists", "+hmget", "+hgetall", "+persist",
];

/// An ACL user with the library's rules and the documented fenced ones uses a resource fully;
/// without the fenced ones, a write is refused as `NoPermission`, never half applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_rules_are_enough() {
    use crate::support::server::library_acl_rules;
    let mut rules = library_acl_rules("pw", "distlock");
    rules.extend(FENCED_ACL_RULES.iter().map(|r| (*r).to_owned()));
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    let bare = library_acl_rules("pw", "distlock");
    let bare: Vec<&str> = bare.iter().map(String::as_str).collect();
    let server = RedisServer::builder()
        .acl_user("app", &rules)
        .acl_user("bare", &bare)
        .start();

    let client = crate::stores::connect(&server.url_for_user("app", "pw")).await;
    let doc = client
        .fenced("acl:doc")
        .expect("fenced")
        .expire_after(Duration::from_secs(60))
        .expect("ttl");
    doc.update(5)
        .require_absent("v")
        .set("v", "1")
        .set("w", "2")
        .delete("w")
        .apply()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log()));
    assert_eq!(stale_last(doc.set("v", "old", 4).await), 5);
    doc.update(5)
        .require_value("v", "1")
        .clear()
        .apply()
        .await
        .expect("clear");
    client
        .fenced("acl:doc")
        .expect("fenced")
        .set("v", "3", 6)
        .await
        .expect("persist");
    let snapshot = doc.read().await.expect("read");
    assert_eq!(snapshot.fence, Some(6));
    assert_eq!(doc.get("v").await.expect("get").as_deref(), Some(&b"3"[..]));

    let bare = crate::stores::connect(&server.url_for_user("bare", "pw")).await;
    let err = bare
        .fenced("acl:other")
        .expect("fenced")
        .set("v", "1", 1)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            FencedError::Store(distlock::StoreError::Refused {
                kind: distlock::RefusedKind::NoPermission,
                ..
            })
        ),
        "{err:?}"
    );
    // Refused before anything was written: the fence was not raised either.
    let guard: Option<String> = server
        .conn()
        .await
        .get("distlock:fenced-guard:{acl:other}")
        .await
        .expect("GET");
    assert_eq!(guard, None);
}
