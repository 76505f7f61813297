//! What a locked function guarantees, each on Redis and in memory (and the killed-server case
//! on Redis only).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock::{Client, LockError, LossReason, distributed_lock, safety_margin};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::app_error::AppError;
use crate::support::RedisServer;
use crate::support::fixture::{Fixture, connect, on_both_stores};
use crate::support::lateness::LatenessProbe;
use crate::support::theft::{lost_at_a_renewal, steal_once_entered};

on_both_stores!(
    spawned_task_does_not_inherit_the_lease,
    finished_body_keeps_its_value_when_the_key_is_gone,
    fence_is_visible_in_the_body_and_increases,
    separators_in_values_do_not_make_keys_collide,
    return_and_question_mark_work_and_release,
    mut_self_method_runs_under_the_lock,
);

// Bodies that time something: on Redis they check what holds however late anything runs;
// on tokio's paused clock (memory), where nothing runs late, the exact bounds as well.
on_both_stores!(
    paused_memory: reentrant_nested_call_joins_the_held_lease,
    non_reentrant_nested_call_waits_for_the_outer_one,
    deleted_key_ends_the_body_with_lease_lost,
    on_busy_error_fails_at_once,
    min_hold_keeps_the_lock_after_the_function_returns,
    max_hold_ends_a_function_that_runs_too_long,
);

// --- min_hold / max_hold ------------------------------------------------------------------------

#[distributed_lock(key = "nightly", client = client, ttl = "100ms", min_hold = "600ms")]
async fn nightly(client: &Client) -> Result<u64, LockError> {
    Ok(distlock::current_lease()
        .expect("held")
        .fence()
        .await
        .expect("fence"))
}

async fn min_hold_keeps_the_lock_after_the_function_returns(store: Fixture) {
    const MIN_HOLD: Duration = Duration::from_millis(600);
    let started = Instant::now();
    nightly(&store.client).await.expect("runs");
    // Kept after the return, and busy within min_hold: each counted against the library only
    // if the answer came before min_hold had passed (a busy machine may get there later).
    let held = store.is_held("nightly").await;
    assert!(
        held || Instant::now() >= started + MIN_HOLD,
        "freed at the return"
    );
    let again = nightly(&store.client).await;
    assert!(
        matches!(again, Err(LockError::Busy { .. })) || Instant::now() >= started + MIN_HOLD,
        "ran again within min_hold: {again:?}"
    );
    // The wait only outlasts a busy machine.
    assert!(
        store.wait_free("nightly", Duration::from_secs(10)).await,
        "free once min_hold has passed"
    );
    let held_for = started.elapsed();
    assert!(
        held_for >= Duration::from_millis(600),
        "freed after {held_for:?}"
    );
    nightly(&store.client).await.expect("runs again");
}

#[distributed_lock(key = "stuck", client = client, ttl = "150ms", max_hold = "400ms")]
async fn stuck(client: &Client) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(())
}

async fn max_hold_ends_a_function_that_runs_too_long(store: Fixture) {
    let started = Instant::now();
    let err = stuck(&store.client).await.expect_err("dropped at max_hold");
    assert!(matches!(err, LockError::LeaseLost { .. }), "{err}");
    if store.paused() {
        // Where nothing runs late: at max_hold (400 ms) less at most the margin of the
        // 150 ms ttl. On the real clock the loss (a timer, and renewals that a starved
        // watchdog sends late) comes whenever the runtime gets to it; the body's 10 s did not
        // run out either way (`LeaseLost`).
        let took = started.elapsed();
        let max_hold = Duration::from_millis(400);
        assert!(
            took >= max_hold - safety_margin(Duration::from_millis(150)) && took <= max_hold,
            "dropped after {took:?}"
        );
    }
}

// --- reentrancy -------------------------------------------------------------------------------

#[distributed_lock(key = "account:{id}", client = client)]
async fn transfer(client: &Client, id: u64) -> Result<(u64, u64), LockError> {
    let outer = distlock::current_lease()
        .expect("held")
        .fence()
        .await
        .expect("fence");
    // Same key, same task: joins the held lease instead of waiting for itself.
    let inner = audit(client, id).await?;
    Ok((outer, inner))
}

#[distributed_lock(key = "account:{id}", client = client)]
async fn audit(client: &Client, id: u64) -> Result<u64, LockError> {
    Ok(distlock::current_lease()
        .expect("held")
        .fence()
        .await
        .expect("fence"))
}

async fn reentrant_nested_call_joins_the_held_lease(store: Fixture) {
    let started = Instant::now();
    let (outer, inner) = transfer(&store.client, 1).await.expect("transfer");
    // Joined (a call that did not join would be `Busy`: the macro's wait is zero).
    assert_eq!(outer, inner, "the nested call ran under the outer lease");
    if store.paused() {
        // Where nothing runs late, nothing in it takes any time: it did not wait.
        assert_eq!(started.elapsed(), Duration::ZERO, "the nested call waited");
    }
    assert!(distlock::current_lease().is_none());
    assert!(
        !store.is_held("account:1").await,
        "released once, on the way out"
    );
}

#[distributed_lock(key = "ledger:{id}", client = client, reentrant = false)]
async fn strict_outer(
    client: &Client,
    id: u64,
) -> Result<(Result<(), LockError>, Result<(), LockError>), LockError> {
    let waiting = strict_inner_waits(client, id).await;
    let failing = strict_inner_fails(client, id).await;
    Ok((waiting, failing))
}

#[distributed_lock(key = "ledger:{id}", client = client, reentrant = false, wait = "300ms")]
async fn strict_inner_waits(client: &Client, id: u64) -> Result<(), LockError> {
    unreachable!("the lock is held by the caller");
}

#[distributed_lock(key = "ledger:{id}", client = client, reentrant = false, on_busy = error)]
async fn strict_inner_fails(client: &Client, id: u64) -> Result<(), LockError> {
    unreachable!("the lock is held by the caller");
}

async fn non_reentrant_nested_call_waits_for_the_outer_one(store: Fixture) {
    let probe = (!store.paused()).then(LatenessProbe::start);
    let mark = probe.as_ref().map(LatenessProbe::mark);
    let started = Instant::now();
    let (waiting, failing) = strict_outer(&store.client, 2).await.expect("outer");
    // After its wait, one more try reads the holder's remaining ttl: `Busy`, not `Timeout`.
    match waiting {
        Err(LockError::Busy { retry_after, .. }) => {
            assert!(
                retry_after > Duration::ZERO && retry_after <= Duration::from_secs(30),
                "the outer lease's remaining ttl: {retry_after:?}"
            );
        }
        other => panic!("expected Busy after the wait, got {other:?}"),
    }
    assert!(
        matches!(failing, Err(LockError::Busy { .. })),
        "expected Busy, got {failing:?}"
    );
    // The inner calls gave up after their wait instead of waiting for the outer lease's 30 s
    // ttl: exactly the 300 ms wait where nothing runs late; on the real clock, that plus the
    // round trips and how late the runtime ran its timers meanwhile.
    let promise = Duration::from_millis(300);
    let bound = match (&probe, mark) {
        (Some(probe), Some(mark)) => probe.bound(mark, promise),
        _ => promise,
    };
    assert!(started.elapsed() <= bound, "took {:?}", started.elapsed());
    assert!(!store.is_held("ledger:2").await);
}

#[distributed_lock(key = "report:{day}", client = client)]
async fn report(client: &Client, day: u32) -> Result<Result<(), LockError>, LockError> {
    // The task is the scope of reentrancy: a task spawned here is another caller.
    let client = client.clone();
    let spawned = tokio::spawn(async move { try_report(&client, day).await });
    Ok(spawned.await.expect("task"))
}

#[distributed_lock(key = "report:{day}", client = client, on_busy = error)]
async fn try_report(client: &Client, day: u32) -> Result<(), LockError> {
    Ok(())
}

async fn spawned_task_does_not_inherit_the_lease(store: Fixture) {
    let spawned = report(&store.client, 3).await.expect("report");
    assert!(
        matches!(spawned, Err(LockError::Busy { .. })),
        "the spawned task joined the lease: {spawned:?}"
    );
    try_report(&store.client, 3)
        .await
        .expect("free once the outer call returned");
}

// --- lease loss -------------------------------------------------------------------------------

/// The body of [`long_job`] and [`job_while_server_dies`]: says it is in, works 10 s (far
/// longer than the tests let it), then marks itself finished.
async fn ten_seconds_of_work(
    entered: oneshot::Sender<()>,
    finished: Arc<AtomicBool>,
) -> Result<(), LockError> {
    let _ = entered.send(());
    tokio::time::sleep(Duration::from_secs(10)).await;
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

// Renewed every second; the lease's deadline is ~1.9 s past a renewal, so only a renewal can
// end it early (`NotHeld`) unless a busy machine starves the watchdog that long.
#[distributed_lock(key = "stolen", client = client, ttl = "3s")]
async fn long_job(
    client: &Client,
    entered: oneshot::Sender<()>,
    finished: Arc<AtomicBool>,
) -> Result<(), LockError> {
    ten_seconds_of_work(entered, finished).await
}

#[distributed_lock(key = "settled:{id}", client = client)]
async fn settle_then_lose_the_key(client: &Client, id: u64) -> Result<&'static str, LockError> {
    // The work is committed; then the key vanishes behind the holder's back.
    let key = client
        .__inspect()
        .lock_key(&format!("settled:{id}"))
        .expect("name");
    assert!(client.__inspect().delete(&key).await.expect("delete"));
    Ok("committed")
}

/// TESTPLAN 28 through the macro: a body that ran to completion returns its value even if
/// the release then finds the key gone (a caller retrying on `LeaseLost` would settle twice).
async fn finished_body_keeps_its_value_when_the_key_is_gone(store: Fixture) {
    let value = settle_then_lose_the_key(&store.client, 1).await;
    assert_eq!(value.expect("the body finished"), "committed");
}

async fn deleted_key_ends_the_body_with_lease_lost(store: Fixture) {
    let key = store.lock_key("stolen");
    let thief = store.another_client().await;
    let probe = (!store.paused()).then(LatenessProbe::start);
    let (entered_tx, steal) = steal_once_entered(thief, key);
    let finished = Arc::new(AtomicBool::new(false));
    let mark = probe.as_ref().map(LatenessProbe::mark);
    let result = long_job(&store.client, entered_tx, finished.clone()).await;
    let ended = Instant::now();
    let stolen_at = steal.await.expect("thief");
    // `NotHeld`: a renewal found the key gone (the deadline would say `Expired`).
    assert!(lost_at_a_renewal(&result), "{result:?}\n{}", store.log());
    assert!(!finished.load(Ordering::SeqCst), "the body ran to the end");
    // `NotHeld` says a renewal found it: at the next renewal, within ttl/3 of the theft (1 ms:
    // tokio's timer resolution). On the real clock, that plus the renewal's round trip and how
    // late the runtime ran its timers since the body started.
    let noticed = ended.saturating_duration_since(stolen_at);
    let promise = Duration::from_millis(1000 + 1);
    let bound = match (&probe, mark) {
        (Some(probe), Some(mark)) => probe.bound(mark, promise),
        _ => promise,
    };
    assert!(
        noticed <= bound,
        "noticed after {noticed:?} (bound {bound:?})"
    );
}

#[distributed_lock(key = "server-dies", client = client, ttl = "900ms")]
async fn job_while_server_dies(
    client: &Client,
    entered: oneshot::Sender<()>,
    finished: Arc<AtomicBool>,
) -> Result<(), LockError> {
    ten_seconds_of_work(entered, finished).await
}

/// TESTPLAN 7 through the macro: the server is killed mid-hold; the body is dropped at the
/// lease's safety deadline (`Expired`), long before it could finish.
///
/// No bound on when: the lost signal is a timer, which a busy machine fires late. That the
/// lease is lost exactly at its deadline is tested on the paused clock
/// (`lock::semantics::watchdog_off_lease_is_lost_at_its_deadline`), and that a body is never
/// polled past the deadline however late the timers are, in `lock::starved`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_ends_the_body_with_lease_lost() {
    let mut server = RedisServer::start();
    let client = connect(&server.url()).await;
    let finished = Arc::new(AtomicBool::new(false));
    let (entered_tx, entered) = oneshot::channel();
    let call = tokio::spawn({
        let finished = finished.clone();
        async move { job_while_server_dies(&client, entered_tx, finished).await }
    });
    entered.await.expect("the body started");
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.kill();
    let result = call.await.expect("call");
    assert!(
        matches!(
            result,
            Err(LockError::LeaseLost {
                reason: LossReason::Expired,
                ..
            })
        ),
        "{result:?}\n{}",
        server.log()
    );
    assert!(!finished.load(Ordering::SeqCst), "the body ran to the end");
}

// --- fence, busy locks, keys --------------------------------------------------------------------

#[distributed_lock(key = "fenced:{resource}", client = client)]
async fn fenced_write(client: &Client, resource: &str) -> Result<(u64, String), LockError> {
    let lease = distlock::current_lease().expect("the body runs under the lease");
    lease.ensure_held()?;
    Ok((lease.fence().await.expect("fence"), lease.name().to_owned()))
}

async fn fence_is_visible_in_the_body_and_increases(store: Fixture) {
    let mut last = 0;
    for _ in 0..5 {
        let (fence, name) = fenced_write(&store.client, "disk").await.expect("write");
        assert_eq!(name, "fenced:disk");
        assert!(fence > last, "fence {fence} after {last}");
        last = fence;
    }
    assert!(distlock::current_lease().is_none(), "only inside the body");
    let lease = store
        .client
        .lock("fenced:disk")
        .acquire()
        .await
        .expect("free");
    assert!(
        lease.fence().await.expect("fence") > last,
        "the macro's leases share the fence"
    );
    lease.release().await.expect("release");
}

#[distributed_lock(key = "busy:{id}", client = client, on_busy = error)]
async fn fail_if_busy(client: &Client, id: u32) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "busy:{id}", client = client, wait = "400ms")]
async fn wait_if_busy(client: &Client, id: u32) -> Result<(), LockError> {
    Ok(())
}

async fn on_busy_error_fails_at_once(store: Fixture) {
    let other = store.another_client().await;
    let held = other
        .lock("busy:1")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .expect("hold");
    let started = Instant::now();
    match fail_if_busy(&store.client, 1).await {
        // `Busy`, not `Timeout`: it did not wait.
        Err(LockError::Busy { name, retry_after }) => {
            assert_eq!(name, "busy:1");
            assert!(retry_after <= Duration::from_secs(5));
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    if store.paused() {
        // Where nothing runs late, one attempt takes no time at all.
        assert_eq!(started.elapsed(), Duration::ZERO, "it waited");
    }
    // For contrast: the waiting flavour waits out its `wait`, then says how long the holder
    // has left, so that a handler returning the error answers as the lock layer does: `423`
    // with `Retry-After` (the layers page promises the macro matches the layer).
    let started = Instant::now();
    let waited = wait_if_busy(&store.client, 1).await;
    assert!(started.elapsed() >= Duration::from_millis(400));
    match &waited {
        Err(err @ LockError::Busy { retry_after, .. }) => {
            assert!(*retry_after <= Duration::from_secs(5), "{retry_after:?}");
            let status = err.http_status();
            assert_eq!(status.code, 423);
            let secs = status.retry_after_secs().expect("a Retry-After");
            assert!((1..=5).contains(&secs), "Retry-After: {secs}");
        }
        other => panic!("expected Busy after the wait, got {other:?}"),
    }
    held.release().await.expect("release");
    fail_if_busy(&store.client, 1).await.expect("free now");
}

#[distributed_lock(key = "{a}:{b}", client = client, on_busy = error)]
async fn pair(
    client: &Client,
    a: &str,
    b: &str,
    hold: Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>,
) -> Result<String, LockError> {
    if let Some((entered, release)) = hold {
        let _ = entered.send(());
        let _ = release.await;
    }
    Ok(distlock::current_lease().expect("held").name().to_owned())
}

async fn separators_in_values_do_not_make_keys_collide(store: Fixture) {
    let (entered_tx, entered) = oneshot::channel();
    let (release, release_rx) = oneshot::channel();
    let client = store.client.clone();
    let holder =
        tokio::spawn(
            async move { pair(&client, "x:y", "z", Some((entered_tx, release_rx))).await },
        );
    entered.await.expect("holder entered");
    // ("x", "y:z") would render "x:y:z" too without escaping.
    let name = pair(&store.client, "x", "y:z", None)
        .await
        .expect("a different lock");
    assert_eq!(name, "x:y%3Az");
    let same = pair(&store.client, "x:y", "z", None).await;
    assert!(matches!(same, Err(LockError::Busy { .. })), "{same:?}");
    release.send(()).expect("holder waiting");
    assert_eq!(holder.await.expect("task").expect("holder"), "x%3Ay:z");
    let percent = pair(&store.client, "100%", "", None)
        .await
        .expect("percent");
    assert_eq!(percent, "100%25:");
}

// --- the body's own control flow ----------------------------------------------------------------

#[distributed_lock(key = "parse", client = client, on_busy = error)]
async fn parse(client: &Client, text: &str) -> Result<u32, AppError> {
    if text.is_empty() {
        return Ok(0);
    }
    let value: u32 = text.parse()?;
    Ok(value * 2)
}

async fn return_and_question_mark_work_and_release(store: Fixture) {
    assert_eq!(parse(&store.client, "").await.expect("early return"), 0);
    assert!(!store.is_held("parse").await);
    match parse(&store.client, "x").await {
        Err(AppError::Parse(err)) => assert_eq!(err.to_string(), "invalid digit found in string"),
        other => panic!("expected the body's own error, got {other:?}"),
    }
    assert!(!store.is_held("parse").await, "released after an error");
    assert_eq!(parse(&store.client, "21").await.expect("parsed"), 42);
    // A lock error arrives converted into the function's error type.
    let held = store.client.lock("parse").acquire().await.expect("hold");
    match parse(&store.client, "1").await {
        Err(AppError::Lock(LockError::Busy { .. })) => {}
        other => panic!("expected a converted Busy, got {other:?}"),
    }
    held.release().await.expect("release");
}

struct Ledger {
    locks: Client,
    id: u32,
    entries: Vec<u64>,
}

impl Ledger {
    #[distributed_lock(key = "ledger-book:{self.id}", client = &self.locks, wait = "10s")]
    async fn append(&mut self) -> Result<usize, LockError> {
        let fence = distlock::current_lease()
            .expect("held")
            .fence()
            .await
            .expect("fence");
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.entries.push(fence);
        Ok(self.entries.len())
    }
}

async fn mut_self_method_runs_under_the_lock(store: Fixture) {
    // Two ledgers with the same id in two tasks: they take turns.
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let mut ledger = Ledger {
            locks: store.another_client().await,
            id: 5,
            entries: Vec::new(),
        };
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                ledger.append().await.expect("append");
            }
            ledger.entries
        }));
    }
    let mut fences = Vec::new();
    for task in tasks {
        let entries = task.await.expect("task");
        assert_eq!(entries.len(), 10);
        fences.extend(entries);
    }
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 20, "every append had its own lease");
}
