//! A runtime starved of CPU (a busy machine that does not schedule this process for a while):
//! what the lease still promises when it runs again. Simulated deterministically by blocking
//! the only thread of a `current_thread` runtime, which is what starvation looks like from
//! inside: time passes, and no task, timer or I/O is processed meanwhile.
//!
//! The runtime is on the real clock (a paused clock does not move while the thread blocks).
//! The lease logic does not depend on the store; memory suffices.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock::{LockError, LossReason};

/// Long enough past the 100 ms ttl that no drift allowance covers it.
const STARVED: Duration = Duration::from_millis(250);

/// After the starvation, the deadline's timer has not fired yet (the runtime has not processed
/// its timers), but `is_lost()` reads the clock: it says lost at once, before any await.
#[tokio::test]
async fn is_lost_is_right_at_once_after_a_starvation() {
    let client = distlock::Client::in_memory();
    let lease = client
        .lock("starved-check")
        .ttl(Duration::from_millis(100))
        .watchdog(false)
        .acquire()
        .await
        .expect("acquire");
    assert!(!lease.is_lost());
    std::thread::sleep(STARVED);
    assert!(
        lease.is_lost(),
        "a lease past its deadline looked valid after a starvation"
    );
    assert_eq!(lease.lost_reason(), Some(LossReason::Expired));
}

/// `run` races its body against the lost signal, loss first. After a starvation past the
/// deadline, the body's own work is ready before the runtime has fired the deadline's timer
/// (the lost signal's, and the watchdog's, which also watches the deadline): the body must
/// still not be polled again, since the lease can no longer be trusted. The run is a spawned
/// task, woken through the run queue by a message from another task, so the runtime polls it
/// before it next processes its timers: without a clock check on each poll, the body would
/// take its step.
#[tokio::test]
async fn run_never_polls_its_body_past_the_deadline() {
    let client = distlock::Client::in_memory();
    let stepped = Arc::new(AtomicBool::new(false));
    let run = tokio::spawn({
        let stepped = stepped.clone();
        async move {
            client
                .lock("starved-run")
                .ttl(Duration::from_millis(100))
                .watchdog(false)
                .run(|_lease| async move {
                    // The client's watchdog task, woken by the new lease, looks at it and
                    // sleeps until its deadline: from then on only timers watch it.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    // Runs as soon as this task yields, and wakes it with its message.
                    tokio::spawn(async move {
                        let _ = tx.send(());
                    });
                    std::thread::sleep(STARVED);
                    let _ = rx.await;
                    // A step that needs the lock.
                    stepped.store(true, Ordering::SeqCst);
                })
                .await
        }
    });
    let result = run.await.expect("no panic");
    assert!(
        matches!(
            result,
            Err(LockError::LeaseLost {
                reason: LossReason::Expired,
                ..
            })
        ),
        "{result:?}"
    );
    assert!(
        !stepped.load(Ordering::SeqCst),
        "the body took a step past the lease's deadline"
    );
}
