//! What a fenced resource promises, the same on memory, a single primary and a Cluster.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use distlock::FencedError;
use distlock::fenced::{MAX_CHANGES, MAX_TTL};

use crate::stores::{Store, on_every_store};

on_every_store!(
    lower_fences_are_refused_equal_and_higher_accepted,
    fences_compare_exactly_across_the_whole_u64_range,
    an_update_is_all_or_nothing,
    advance_refuses_older_writers_without_writing,
    reads_show_the_values_and_the_fence_they_were_written_under,
    any_text_names_a_resource_or_a_key,
    a_ttl_expires_the_values_and_the_fence_together,
    invalid_input_is_refused_before_anything_is_written,
    concurrent_writers_leave_the_highest_fences_write,
    real_leases_fence_their_writes,
);

fn stale(result: Result<(), FencedError>) -> (u64, u64) {
    match result {
        Err(FencedError::Stale {
            last,
            offered,
            resource: _,
        }) => (last, offered),
        other => panic!("expected Stale, got {other:?}"),
    }
}

async fn lower_fences_are_refused_equal_and_higher_accepted(store: Store, name: &str) {
    let doc = store.client.fenced(name).expect("fenced");
    assert_eq!(doc.last_fence().await.expect("read"), None);
    doc.set("owner", "a", 10).await.expect("first write");
    // The same holder again (equal fence): accepted.
    doc.set("owner", "a2", 10).await.expect("equal fence");
    assert_eq!(stale(doc.set("owner", "old", 9).await), (10, 9));
    assert_eq!(stale(doc.delete("owner", 1).await), (10, 1));
    assert_eq!(
        doc.get("owner").await.expect("get").as_deref(),
        Some(&b"a2"[..])
    );
    doc.set("owner", "b", 11).await.expect("higher fence");
    assert_eq!(stale(doc.set("owner", "a", 10).await), (11, 10));
    assert_eq!(doc.last_fence().await.expect("read"), Some(11));
    assert_eq!(
        doc.get("owner").await.expect("get").as_deref(),
        Some(&b"b"[..])
    );
    // The error says which resource, which fence won and which was offered.
    let err = doc.set("owner", "x", 3).await.unwrap_err();
    assert!(err.is_stale());
    let text = err.to_string();
    assert!(
        text.contains(name) && text.contains("11") && text.contains(" 3 "),
        "{text}"
    );
    // Another client of the store sees the same resource.
    let other = store.another_client().await.fenced(name).expect("fenced");
    assert_eq!(stale(other.set("owner", "c", 10).await), (11, 10));
    other.set("owner", "c", 12).await.expect("write");
    assert_eq!(
        doc.get("owner").await.expect("get").as_deref(),
        Some(&b"c"[..])
    );
}

async fn fences_compare_exactly_across_the_whole_u64_range(store: Store, name: &str) {
    // Neighbours that a double cannot tell apart (above 2^53), the 10-digit split of the
    // script's comparison, lengths that differ, and the ends of the range.
    let cases: [(u64, u64); 7] = [
        ((1 << 53) + 1, 1 << 53),
        (9_007_199_254_740_993, 9_007_199_254_740_992),
        (10_000_000_000, 9_999_999_999),
        (12_345_678_901_234_567_891, 12_345_678_901_234_567_890),
        (12_345_678_911_234_567_890, 12_345_678_901_234_567_899),
        (u64::MAX, u64::MAX - 1),
        (1, 0),
    ];
    for (i, (high, low)) in cases.into_iter().enumerate() {
        let doc = store.client.fenced(format!("{name}:{i}")).expect("fenced");
        doc.set("v", "high", high).await.expect("write");
        assert_eq!(
            stale(doc.set("v", "low", low).await),
            (high, low),
            "case {i}"
        );
        doc.set("v", "again", high).await.expect("equal");
        assert_eq!(doc.last_fence().await.expect("read"), Some(high));
    }
    // Starting from 0: any fence is accepted by a new resource, 0 included.
    let zero = store.client.fenced(format!("{name}:zero")).expect("fenced");
    zero.set("v", "x", 0).await.expect("fence 0");
    assert_eq!(zero.last_fence().await.expect("read"), Some(0));
}

async fn an_update_is_all_or_nothing(store: Store, name: &str) {
    let seat = store.client.fenced(name).expect("fenced");
    seat.update(5)
        .set("hold", "ada")
        .set("price", "10")
        .apply()
        .await
        .expect("first update");

    // A condition that fails: nothing changes, the fence is not raised either.
    let err = seat
        .update(7)
        .set("buyer", "bob")
        .delete("hold")
        .require_absent("buyer")
        .require_value("price", "11")
        .apply()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FencedError::Conflict { key, resource } if key == "price" && resource == name),
        "{err:?}"
    );
    let snapshot = seat.read().await.expect("read");
    assert_eq!(snapshot.fence, Some(5));
    assert_eq!(snapshot.text("hold"), Some("ada"));
    assert_eq!(snapshot.get("buyer"), None);

    // A stale fence is reported as stale whatever the conditions say.
    assert_eq!(
        stale(seat.update(4).require_value("price", "nope").apply().await),
        (5, 4)
    );

    // Conditions hold: every change, in order, and the fence.
    seat.update(7)
        .require_absent("buyer")
        .require_value("price", "10")
        .set("buyer", "bob")
        .delete("hold")
        .set("tmp", "1")
        .delete("tmp")
        .set("price", "12")
        .apply()
        .await
        .expect("update");
    let snapshot = seat.read().await.expect("read");
    assert_eq!(snapshot.fence, Some(7));
    let expected: BTreeMap<String, Vec<u8>> = [("buyer", "bob"), ("price", "12")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
        .collect();
    assert_eq!(snapshot.values, expected);

    // Conditions see the values before the update, not its own changes.
    let err = seat
        .update(7)
        .set("note", "x")
        .require_absent("note")
        .require_absent("buyer")
        .apply()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FencedError::Conflict { key, .. } if key == "buyer"),
        "{err:?}"
    );
    assert_eq!(seat.get("note").await.expect("get"), None);

    // `clear` deletes every value but keeps the fence; changes after it apply.
    seat.update(8)
        .clear()
        .set("after", "yes")
        .apply()
        .await
        .expect("clear");
    let snapshot = seat.read().await.expect("read");
    assert_eq!(snapshot.fence, Some(8));
    assert_eq!(snapshot.values.len(), 1);
    assert_eq!(snapshot.text("after"), Some("yes"));
    seat.update(8).clear().apply().await.expect("clear all");
    assert_eq!(stale(seat.set("after", "stale", 7).await), (8, 7));
    assert!(seat.read().await.expect("read").values.is_empty());

    // A `require_value` on a key that has no value fails, on a resource never written too.
    let fresh = store
        .client
        .fenced(format!("{name}:fresh"))
        .expect("fenced");
    let err = fresh
        .update(1)
        .require_value("k", "v")
        .set("k", "v")
        .apply()
        .await
        .unwrap_err();
    assert!(matches!(err, FencedError::Conflict { .. }), "{err:?}");
    assert_eq!(fresh.last_fence().await.expect("read"), None);
    fresh
        .update(1)
        .require_absent("k")
        .set("k", "v")
        .apply()
        .await
        .expect("absent on a new resource");
}

async fn advance_refuses_older_writers_without_writing(store: Store, name: &str) {
    let doc = store.client.fenced(name).expect("fenced");
    doc.set("v", "old", 3).await.expect("write");
    doc.advance(9).await.expect("advance");
    assert_eq!(
        doc.get("v").await.expect("get").as_deref(),
        Some(&b"old"[..])
    );
    assert_eq!(doc.last_fence().await.expect("read"), Some(9));
    assert_eq!(stale(doc.set("v", "late", 8).await), (9, 8));
    assert_eq!(stale(doc.advance(8).await), (9, 8));
    doc.advance(9).await.expect("equal advance");
    doc.set("v", "new", 9)
        .await
        .expect("the advancing holder writes");
    assert_eq!(
        doc.get("v").await.expect("get").as_deref(),
        Some(&b"new"[..])
    );
}

async fn reads_show_the_values_and_the_fence_they_were_written_under(store: Store, name: &str) {
    let doc = store.client.fenced(name).expect("fenced");
    let empty = doc.read().await.expect("read");
    assert_eq!(empty.fence, None);
    assert!(empty.values.is_empty());
    assert_eq!(doc.get("missing").await.expect("get"), None);

    let binary: Vec<u8> = (0..=255).collect();
    doc.update(42)
        .set("b", binary.as_slice())
        .set("a", "")
        .set("c", "text")
        .apply()
        .await
        .expect("write");
    let snapshot = doc.read().await.expect("read");
    assert_eq!(snapshot.fence, Some(42));
    assert_eq!(
        snapshot.values.keys().collect::<Vec<_>>(),
        ["a", "b", "c"],
        "every value, in key order"
    );
    assert_eq!(snapshot.get("b"), Some(binary.as_slice()));
    assert_eq!(snapshot.text("b"), None, "not UTF-8");
    assert_eq!(snapshot.text("a"), Some(""), "an empty value is a value");
    assert_eq!(doc.get("b").await.expect("get"), Some(binary));
    assert_eq!(doc.get("missing").await.expect("get"), None);
}

async fn any_text_names_a_resource_or_a_key(store: Store, name: &str) {
    // Resources whose names only differ in characters the key encoding escapes never share
    // a fence.
    let names = [
        format!("{name}:{{evil}}"),
        format!("{name}:%7Bevil%7D"),
        format!("{name}:}}"),
        format!("{name}:\n"),
        format!("{name}:é"),
    ];
    for (i, resource) in names.iter().enumerate() {
        let doc = store.client.fenced(resource.as_str()).expect("fenced");
        assert_eq!(doc.name(), resource);
        doc.set("{key}:\u{1}é", format!("{i}"), 100 + i as u64)
            .await
            .expect("write");
    }
    for (i, resource) in names.iter().enumerate() {
        let doc = store.client.fenced(resource.as_str()).expect("fenced");
        assert_eq!(doc.last_fence().await.expect("read"), Some(100 + i as u64));
        let snapshot = doc.read().await.expect("read");
        assert_eq!(snapshot.values.len(), 1, "{resource:?}");
        assert_eq!(snapshot.text("{key}:\u{1}é"), Some(format!("{i}").as_str()));
    }
    // The longest name and key accepted work; one byte more is refused.
    let long = "x".repeat(distlock::MAX_NAME_LEN);
    let doc = store.client.fenced(long.clone()).expect("longest name");
    doc.set(long.clone(), "v", 1).await.expect("longest key");
    assert_eq!(
        doc.get(&long).await.expect("get").as_deref(),
        Some(&b"v"[..])
    );
}

async fn a_ttl_expires_the_values_and_the_fence_together(store: Store, name: &str) {
    let doc = store
        .client
        .fenced(name)
        .expect("fenced")
        .expire_after(Duration::from_millis(400))
        .expect("ttl");
    assert_eq!(doc.ttl(), Some(Duration::from_millis(400)));
    doc.set("v", "x", 50).await.expect("write");
    // Every accepted write sets the ttl again.
    tokio::time::sleep(Duration::from_millis(250)).await;
    doc.advance(50).await.expect("advance");
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(
        doc.last_fence().await.expect("read"),
        Some(50),
        "renewed by the write"
    );
    assert_eq!(doc.get("v").await.expect("get").as_deref(), Some(&b"x"[..]));
    // A refused write does not.
    assert_eq!(stale(doc.set("v", "stale", 1).await), (50, 1));
    tokio::time::sleep(Duration::from_millis(600)).await;
    let gone = doc.read().await.expect("read");
    assert_eq!(gone.fence, None, "the fence expired with the values");
    assert!(gone.values.is_empty());
    // Expired, the resource starts afresh: any fence is accepted.
    doc.set("v", "again", 1).await.expect("fresh");

    // Without a ttl, a write makes the resource permanent again.
    let forever = store.client.fenced(name).expect("fenced");
    assert_eq!(forever.ttl(), None);
    forever.set("v", "kept", 2).await.expect("write");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(forever.last_fence().await.expect("read"), Some(2));
    assert_eq!(
        forever.get("v").await.expect("get").as_deref(),
        Some(&b"kept"[..])
    );
}

async fn invalid_input_is_refused_before_anything_is_written(store: Store, name: &str) {
    assert!(matches!(
        store.client.fenced(""),
        Err(FencedError::InvalidName(_))
    ));
    assert!(matches!(
        store.client.fenced("x".repeat(distlock::MAX_NAME_LEN + 1)),
        Err(FencedError::InvalidName(_))
    ));
    let doc = store.client.fenced(name).expect("fenced");
    for ttl in [
        Duration::ZERO,
        Duration::from_micros(999),
        MAX_TTL + Duration::from_millis(1),
        Duration::MAX,
    ] {
        assert!(
            matches!(
                doc.clone().expire_after(ttl),
                Err(FencedError::InvalidInput { .. })
            ),
            "{ttl:?}"
        );
    }
    assert!(doc.clone().expire_after(MAX_TTL).is_ok());

    // A bad key anywhere in an update: nothing is written, the fence is not raised.
    let err = doc
        .update(5)
        .set("ok", "1")
        .set("", "2")
        .apply()
        .await
        .unwrap_err();
    assert!(matches!(err, FencedError::InvalidName(_)), "{err:?}");
    let err = doc.update(5).require_absent("").apply().await.unwrap_err();
    assert!(matches!(err, FencedError::InvalidName(_)), "{err:?}");
    let err = doc.get("").await.unwrap_err();
    assert!(matches!(err, FencedError::InvalidName(_)), "{err:?}");
    assert_eq!(doc.last_fence().await.expect("read"), None);

    // At most MAX_CHANGES conditions and changes.
    let mut full = doc.update(6).require_absent("c0");
    for i in 1..MAX_CHANGES {
        full = full.set(format!("k{i}"), "v");
    }
    full.apply().await.expect("MAX_CHANGES in one update");
    let mut over = doc.update(7).require_absent("c0");
    for i in 0..MAX_CHANGES {
        over = over.set(format!("k{i}"), "v");
    }
    let err = over.apply().await.unwrap_err();
    assert!(matches!(err, FencedError::InvalidInput { .. }), "{err:?}");
    let snapshot = doc.read().await.expect("read");
    assert_eq!(snapshot.fence, Some(6));
    assert_eq!(snapshot.values.len(), MAX_CHANGES - 1);
}

/// Many writers at once, each with its own fence: whatever the interleaving, a write is
/// refused only for a higher fence already accepted, and the resource ends with the highest
/// fence and its writer's value.
async fn concurrent_writers_leave_the_highest_fences_write(store: Store, name: &str) {
    let client = store.another_client().await;
    let doc = Arc::new(client.fenced(name).expect("fenced"));
    let mut fences: Vec<u64> = (1..=200).map(|i| i * 7 % 211 + 1).collect();
    fences.dedup();
    let writers: Vec<_> = fences
        .iter()
        .map(|&fence| {
            let doc = Arc::clone(&doc);
            tokio::spawn(async move {
                let result = doc
                    .update(fence)
                    .set("writer", fence.to_string())
                    .set("check", fence.to_string())
                    .apply()
                    .await;
                (fence, result)
            })
        })
        .collect();
    let mut accepted = 0;
    for writer in writers {
        let (fence, result) = writer.await.expect("task");
        match result {
            Ok(()) => accepted += 1,
            Err(FencedError::Stale { last, offered, .. }) => {
                assert_eq!(offered, fence);
                assert!(last > offered, "refused {offered} for {last}");
            }
            Err(other) => panic!("fence {fence}: {other}\n{}", store.log()),
        }
    }
    assert!(accepted >= 1);
    let max = *fences.iter().max().expect("fences");
    let snapshot = doc.read().await.expect("read");
    assert_eq!(snapshot.fence, Some(max));
    assert_eq!(snapshot.text("writer"), Some(max.to_string().as_str()));
    // Both values of one update always come from the same writer.
    assert_eq!(snapshot.text("check"), snapshot.text("writer"));
}

/// With real leases: each holder of the lock writes under its fence; a holder that lost its
/// lease to the next one is refused.
async fn real_leases_fence_their_writes(store: Store, name: &str) {
    let doc = store.client.fenced(name).expect("fenced");
    let first = store
        .client
        .lock(name)
        .ttl(Duration::from_millis(200))
        .watchdog(false)
        .acquire()
        .await
        .expect("lock");
    doc.advance(first.fence().await.expect("fence"))
        .await
        .expect("advance");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = store
        .another_client()
        .await
        .lock(name)
        .wait(Duration::from_secs(2))
        .acquire()
        .await
        .expect("the expired lock is taken");
    assert!(second.fence().await.expect("fence") > first.fence().await.expect("fence"));
    doc.set("owner", "second", second.fence().await.expect("fence"))
        .await
        .expect("write");
    assert_eq!(
        stale(
            doc.set("owner", "first", first.fence().await.expect("fence"))
                .await
        ),
        (
            second.fence().await.expect("fence"),
            first.fence().await.expect("fence")
        )
    );
    assert_eq!(
        doc.get("owner").await.expect("get").as_deref(),
        Some(&b"second"[..])
    );
    second.release().await.expect("release");
    drop(first);
}
