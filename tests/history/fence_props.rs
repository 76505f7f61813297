//! Lazy fences against a model (TESTPLAN 58, issue 41), property-tested on the in-memory store
//! and on a real `redis-server`: random sequences of grants (eager or lazy), mints, releases,
//! keys taken away behind a holder's back (as a failover or an operator would) and lost fence
//! keys (as a flush would), on one lock name. After every step, the model says:
//!
//! * a mint by a lease the store no longer holds (released, key taken away, another holder)
//!   fails with `LeaseLost`, and mints nothing;
//! * a mint by the current holder succeeds, and its fence is above every fence minted under an
//!   earlier grant, whenever that was minted (the checker's rule, `checker.rs`);
//! * a minted fence is kept: asked again, the lease answers it, whatever happened since;
//! * no two leases share a fence.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock::{Client, Lease, LeaseHandle, LockError};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::support::RedisServer;

/// One step of a sequence.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Take the lock without waiting (eager: the grant mints).
    Acquire { eager: bool },
    /// Ask lease `i` (modulo the leases so far) for its fence.
    Mint(usize),
    /// Release the current holder, if any.
    Release,
    /// Delete the lock key behind its holder's back.
    TakeAway,
    /// Delete the fence key (the next fence is re-seeded from the server's clock).
    LoseFenceKey,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => any::<bool>().prop_map(|eager| Step::Acquire { eager }),
        4 => (0usize..16).prop_map(Step::Mint),
        2 => Just(Step::Release),
        1 => Just(Step::TakeAway),
        1 => Just(Step::LoseFenceKey),
    ]
}

/// A lease as the model knows it.
struct Known {
    /// Until it is released.
    lease: Option<Lease>,
    /// To ask for its fence, released or not.
    handle: LeaseHandle,
    /// Its fence, once minted (with the grant or later).
    fence: Option<u64>,
}

async fn one_case(
    client: &Client,
    case: u64,
    steps: &[Step],
    counts: &Counts,
) -> Result<(), TestCaseError> {
    let name = format!("fence-prop:{case}");
    let inspect = client.__inspect();
    let key = inspect.lock_key(&name).expect("key");
    let fence_key = inspect.fence_key(&name).expect("key");
    let mut leases: Vec<Known> = Vec::new();
    // Which lease the store holds the lock for, as the model sees it.
    let mut holder: Option<usize> = None;
    for (i, &step) in steps.iter().enumerate() {
        match step {
            Step::Acquire { eager } => {
                let lock = client.lock(&name).ttl(Duration::from_secs(30));
                let lock = if eager { lock.fenced() } else { lock };
                match (lock.acquire().await, holder) {
                    (Ok(lease), None) => {
                        let fence = lease.minted_fence();
                        prop_assert_eq!(fence.is_some(), eager, "step {}: fence at grant", i);
                        leases.push(Known {
                            handle: lease.handle(),
                            lease: Some(lease),
                            fence: None,
                        });
                        holder = Some(leases.len() - 1);
                        if let Some(fence) = fence {
                            record(&mut leases, holder.unwrap_or(0), fence, i)?;
                        }
                    }
                    (Err(LockError::Busy { .. }), Some(_)) => {}
                    (got, held) => {
                        return Err(TestCaseError::fail(format!(
                            "step {i}: acquire with holder {held:?} answered {:?}",
                            got.map(|l| l.minted_fence())
                        )));
                    }
                }
            }
            Step::Mint(which) if !leases.is_empty() => {
                let which = which % leases.len();
                let got = leases[which].handle.fence().await;
                match (got, leases[which].fence, holder == Some(which)) {
                    // Kept: the same fence, whatever happened since.
                    (Ok(fence), Some(kept), _) => prop_assert_eq!(fence, kept, "step {}", i),
                    (Ok(fence), None, true) => {
                        counts.minted.fetch_add(1, Ordering::Relaxed);
                        record(&mut leases, which, fence, i)?;
                    }
                    (Ok(fence), None, false) => {
                        return Err(TestCaseError::fail(format!(
                            "step {i}: lease {which}, no longer held, got fence {fence}"
                        )));
                    }
                    (Err(LockError::LeaseLost { .. }), None, false) => {
                        counts.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    (Err(err), _, _) => {
                        return Err(TestCaseError::fail(format!(
                            "step {i}: lease {which} (held: {}): {err}",
                            holder == Some(which)
                        )));
                    }
                }
            }
            Step::Mint(_) => {}
            Step::Release => {
                if let Some(lease) = holder.take().and_then(|h| leases[h].lease.take()) {
                    lease.release().await.expect("release");
                }
            }
            Step::TakeAway => {
                inspect.delete(&key).await.expect("delete");
                holder = None;
            }
            Step::LoseFenceKey => {
                inspect.delete(&fence_key).await.expect("delete");
            }
        }
    }
    for known in leases {
        if let Some(lease) = known.lease {
            let _ = lease.release().await;
        }
    }
    Ok(())
}

/// Records lease `which`'s fence: above every fence of the leases granted before it, and no
/// other lease's.
fn record(
    leases: &mut [Known],
    which: usize,
    fence: u64,
    step: usize,
) -> Result<(), TestCaseError> {
    for (j, other) in leases.iter().enumerate() {
        if let Some(f) = other.fence {
            prop_assert_ne!(
                f,
                fence,
                "step {}: leases {} and {} share a fence",
                step,
                j,
                which
            );
            if j < which {
                prop_assert!(
                    f < fence,
                    "step {}: lease {} minted {} below lease {}'s {} (granted earlier)",
                    step,
                    which,
                    fence,
                    j,
                    f
                );
            }
        }
    }
    leases[which].fence = Some(fence);
    Ok(())
}

/// Lazy mints that succeeded, and mints refused to a lease no longer held, over a run (so
/// that a run is known to have exercised both).
#[derive(Default)]
struct Counts {
    minted: AtomicU64,
    refused: AtomicU64,
}

fn run_cases(client: &Client, cases: u32) {
    let counts = Counts::default();
    let counted = &counts;
    crate::props::run_numbered_cases(
        cases,
        &prop::collection::vec(step(), 1..40),
        |n, steps| async move { one_case(client, n, &steps, counted).await },
    );
    let (minted, refused) = (
        counts.minted.load(Ordering::Relaxed),
        counts.refused.load(Ordering::Relaxed),
    );
    eprintln!("{cases} cases: {minted} lazy mints, {refused} refused to leases no longer held");
    assert!(minted > 0 && refused > 0, "the cases exercised too little");
}

/// The in-memory store's lazy and eager fences against the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn memory_fences_match_the_model() {
    let client = Client::in_memory();
    run_cases(&client, 256);
}

/// The scripts (and the plain `SET NX PX` of a lazy grant) on a real server.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn redis_fences_match_the_model() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.expect("connect");
    run_cases(&client, 64);
}
