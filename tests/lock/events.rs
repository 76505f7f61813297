//! Lock events on the target `distlock::events` (the guide's operations page): a subscriber
//! sees `acquired`, `released`, `lost`, `expired`, `forced` and `drained`, each with the lock and the
//! holder's identity, the lease's events with its fence, and never a token.
//!
//! Captured on a current-thread runtime, where every task of the client (the watchdog, the
//! lease's deadline, the revocation listener) runs on the test's thread and its subscriber.

use std::time::Duration;

use distlock::{Client, LossReason};

use crate::support::RedisServer;
use crate::support::fixture::Fixture;
use crate::traces::Capture;

#[tokio::test(flavor = "current_thread")]
async fn redis() {
    let server = RedisServer::start();
    let client = Client::builder()
        .identity("events-holder")
        .response_timeout(Duration::from_secs(15))
        .connect(&server.url())
        .await
        .expect("connect");
    lock_events_are_traced(Fixture::with_client(client, server)).await;
}

#[tokio::test(flavor = "current_thread")]
async fn memory() {
    let client = Client::builder().identity("events-holder").in_memory();
    lock_events_are_traced(Fixture::on_client(client)).await;
}

/// The event lines of `text`: (event, the whole line).
fn events(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|line| line.contains("distlock::events"))
        .filter_map(|line| {
            let event = line.split("event=\"").nth(1)?.split('"').next()?;
            Some((event.to_owned(), line.to_owned()))
        })
        .collect()
}

/// The one line of `event` about `lock`.
#[track_caller]
fn line_of(text: &str, event: &str, lock: &str) -> String {
    let found: Vec<String> = events(text)
        .into_iter()
        .filter(|(e, line)| e == event && line.contains(&format!("lock={lock} ")))
        .map(|(_, line)| line)
        .collect();
    assert_eq!(found.len(), 1, "one `{event}` event for {lock} in:\n{text}");
    found.into_iter().next().unwrap_or_default()
}

/// The number after `fence=` in an event line.
#[track_caller]
fn fence_of(line: &str) -> u64 {
    line.split("fence=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no fence in {line}"))
}

/// Whether the event `line` names the holder `identity` (a text field, quoted or not as the
/// subscriber's format has it).
fn names_holder(line: &str, identity: &str) -> bool {
    line.contains(&format!("holder=\"{identity}\""))
        || line.contains(&format!("holder={identity} "))
        || line.ends_with(&format!("holder={identity}"))
}

/// Whether `line` holds a run of 32 hex digits, the length of a token's secret.
fn has_secret(line: &str) -> bool {
    let mut run = 0;
    for c in line.chars() {
        if c.is_ascii_hexdigit() {
            run += 1;
            if run >= 32 {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

async fn lock_events_are_traced(fx: Fixture) {
    let capture = Capture::start(tracing::Level::DEBUG);
    let client = &fx.client;

    // acquired, then released, with the lease's own fence (eager leases: a lazy one has no
    // fence to name when it is granted).
    let lease = client
        .lock("ev-released")
        .fenced()
        .acquire()
        .await
        .expect("acquire");
    let fence = lease.minted_fence().expect("an eager lease's fence");
    lease.release().await.expect("release");
    let text = capture.text();
    for event in ["acquired", "released"] {
        let line = line_of(&text, event, "ev-released");
        assert!(line.contains("DEBUG"), "{line}");
        assert!(names_holder(&line, "events-holder"), "{line}");
        assert_eq!(fence_of(&line), fence, "{line}");
    }

    // expired: no watchdog, and the ttl runs out while held.
    let lease = client
        .lock("ev-expired")
        .fenced()
        .ttl(Duration::from_millis(200))
        .watchdog(false)
        .acquire()
        .await
        .expect("acquire");
    let fence = lease.minted_fence().expect("an eager lease's fence");
    tokio::time::timeout(Duration::from_secs(10), lease.lost())
        .await
        .expect("the lost signal fires by the lease's deadline");
    assert_eq!(lease.lost_reason(), Some(LossReason::Expired));
    let line = line_of(&capture.text(), "expired", "ev-expired");
    assert!(names_holder(&line, "events-holder"), "{line}");
    assert_eq!(fence_of(&line), fence, "{line}");
    drop(lease);

    // forced by an operator (on the forcing side: the lock and its holder), and lost (on the
    // holder's side, told at once: its own fence).
    let lease = client
        .lock("ev-forced")
        .fenced()
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    let fence = lease.minted_fence().expect("an eager lease's fence");
    fx.until_listening_for_forces(1).await;
    let operator = fx.another_client().await;
    assert!(operator.force_unlock("ev-forced").await.expect("force"));
    tokio::time::timeout(Duration::from_secs(10), lease.lost())
        .await
        .expect("the holder is told");
    assert_eq!(lease.lost_reason(), Some(LossReason::NotHeld));
    let text = capture.text();
    let forced = line_of(&text, "forced", "ev-forced");
    assert!(names_holder(&forced, "events-holder"), "{forced}");
    let lost = line_of(&text, "lost", "ev-forced");
    assert!(names_holder(&lost, "events-holder"), "{lost}");
    assert_eq!(fence_of(&lost), fence, "{lost}");
    drop(lease);

    // drained: the client's shutdown gave the lease back for its holder (last: it closes the
    // client).
    let lease = client
        .lock("ev-drained")
        .fenced()
        .acquire()
        .await
        .expect("acquire");
    let fence = lease.minted_fence().expect("an eager lease's fence");
    let report = client.shutdown(Duration::from_secs(10)).await;
    assert_eq!(report.released.len(), 1, "{report:?}");
    assert_eq!(lease.lost_reason(), Some(LossReason::Shutdown));
    let line = line_of(&capture.text(), "drained", "ev-drained");
    assert!(names_holder(&line, "events-holder"), "{line}");
    assert_eq!(fence_of(&line), fence, "{line}");
    drop(lease);

    // Never a token, in any event.
    let all = events(&capture.text());
    assert!(all.len() >= 7, "{all:?}");
    for (event, line) in &all {
        assert!(!has_secret(line), "`{event}` shows a token: {line}");
        assert!(!line.contains("token"), "`{event}` names a token: {line}");
    }
}
