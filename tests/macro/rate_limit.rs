//! What a `#[rate_limit]` function guarantees, each on Redis and in memory (and the limiter's
//! reuse across calls, shown by its circuit breaker, on Redis only): a denied call fails with
//! `Limited` and does not run, costs and subjects are counted as written, `on_limit = wait`
//! paces calls and gives up at `max_wait`, several policies are all or nothing, and functions
//! with one policy name share its budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use distlock::{
    Client, InvalidName, LockError, RateLimitError, StoreError, distributed_lock, rate_limit,
};

use distlock::ratelimit::{Lockout, Policy, Rate};
use tokio::time::Instant;

use crate::app_error::AppError;
use crate::support::RedisServer;
use crate::support::fixture::{Fixture, connect, on_both_stores};
use crate::support::lateness::LatenessProbe;

on_both_stores!(
    a_denied_call_fails_with_limited_and_does_not_run,
    subjects_are_rendered_from_the_parameters_and_escaped,
    costs_are_counted_as_written,
    functions_with_one_policy_name_share_its_budget,
    the_rate_limit_written_lower_runs_before_the_lock,
    a_lockout_blocks_a_subject_that_breaches_and_escalates,
);

// Bodies that time something: on Redis they check what holds however late anything runs;
// on tokio's paused clock (memory), where nothing runs late, the exact figures as well.
on_both_stores!(
    paused_memory: several_policies_are_all_or_nothing,
    waiting_calls_keep_to_the_rate_and_give_up_at_max_wait,
    a_dropped_waiting_call_gives_its_turn_back,
);

// --- lockout -------------------------------------------------------------------------------------

#[rate_limit(
    policy = "logins: 2/h",
    key = "user:{user}",
    lockout = ["10min", "1h"],
    lockout_memory = "1d",
    client = client
)]
async fn login(client: &Client, user: u32, runs: &AtomicU32) -> Result<(), RateLimitError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// `lockout`: the breach after the policy's two calls blocks the user for the first block
/// and the body does not run; another user is not blocked; the store holds the block (a
/// limiter with the same policy and lockout reads it as `locked_out`).
async fn a_lockout_blocks_a_subject_that_breaches_and_escalates(store: Fixture) {
    let runs = AtomicU32::new(0);
    for _ in 0..2 {
        login(&store.client, 1, &runs)
            .await
            .expect("within the limit");
    }
    for attempt in 0..3 {
        match login(&store.client, 1, &runs).await {
            Err(RateLimitError::Limited {
                policy,
                retry_after,
            }) => {
                assert_eq!(policy, "logins");
                // The block is 10 min; the policy alone would pass again after 30 min
                // (2/h), so the answer is the later of the two, at most 30 min, and at
                // least what is left of the block.
                assert!(
                    retry_after > Duration::from_secs(9 * 60)
                        && retry_after <= Duration::from_secs(30 * 60),
                    "attempt {attempt}: {retry_after:?}"
                );
            }
            other => panic!("attempt {attempt}: expected Limited, got {other:?}"),
        }
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "a blocked call does not run"
    );
    login(&store.client, 2, &runs)
        .await
        .expect("another user is not blocked");
    // The same policy and lockout as the attribute's, built by hand: it reads the same keys.
    let lockout = Lockout::after_breach([Duration::from_secs(600), Duration::from_secs(3600)])
        .remember_for(Duration::from_secs(24 * 3600));
    let policy = Policy::gcra("logins", Rate::per_hour(2).expect("rate"))
        .and_then(|p| p.with_lockout(lockout))
        .expect("policy");
    let limiter = store.client.rate_limiter(policy).build().expect("limiter");
    let seen = limiter.peek("user:1").await.expect("peek");
    assert!(
        seen.locked_out && !seen.allowed,
        "the store holds the block under the policy's key: {seen:?}"
    );
}

// --- denial --------------------------------------------------------------------------------------

#[rate_limit(policy = "reports: 3/min", key = "user:{user}", client = client)]
async fn report(client: &Client, user: u32, runs: &AtomicU32) -> Result<u32, RateLimitError> {
    Ok(runs.fetch_add(1, Ordering::SeqCst) + 1)
}

async fn a_denied_call_fails_with_limited_and_does_not_run(store: Fixture) {
    let runs = AtomicU32::new(0);
    for n in 1..=3 {
        assert_eq!(
            report(&store.client, 1, &runs)
                .await
                .expect("within the burst"),
            n
        );
    }
    match report(&store.client, 1, &runs).await {
        Err(RateLimitError::Limited {
            policy,
            retry_after,
        }) => {
            assert_eq!(policy, "reports");
            // GCRA at 3/min: one more every 20 s.
            assert!(
                retry_after > Duration::from_secs(15) && retry_after <= Duration::from_secs(20),
                "{retry_after:?}"
            );
        }
        other => panic!("expected Limited, got {other:?}"),
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "the denied call did not run"
    );
    // Another user has a budget of their own.
    assert_eq!(report(&store.client, 2, &runs).await.expect("user 2"), 4);
}

#[rate_limit(policy = "pairs: fixed-window 1/h", key = "{a}:{b}", client = client)]
async fn pair(client: &Client, a: &str, b: &str) -> Result<(), RateLimitError> {
    Ok(())
}

async fn subjects_are_rendered_from_the_parameters_and_escaped(store: Fixture) {
    pair(&store.client, "x:y", "z").await.expect("first");
    // ("x", "y:z") would render "x:y:z" too without escaping: it has a budget of its own.
    pair(&store.client, "x", "y:z")
        .await
        .expect("a different subject");
    let again = pair(&store.client, "x:y", "z").await;
    assert!(
        matches!(again, Err(RateLimitError::Limited { .. })),
        "{again:?}"
    );
    // A subject that cannot be a key fails the call without running it.
    match named(&store.client, "").await {
        Err(RateLimitError::InvalidSubject(InvalidName::Empty)) => {}
        other => panic!("expected InvalidSubject, got {other:?}"),
    }
}

#[rate_limit(policy = "names: 1/s", key = "{name}", client = client)]
async fn named(client: &Client, name: &str) -> Result<(), RateLimitError> {
    unreachable!("{name:?} is not a subject")
}

#[rate_limit(policy = "uploads: 10/min", client = client, cost = 4)]
async fn upload_fixed(client: &Client) -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limit(policy = "bytes: 10/min", client = client, cost = files.len())]
async fn upload_files(client: &Client, files: Vec<&str>) -> Result<usize, RateLimitError> {
    Ok(files.len())
}

async fn costs_are_counted_as_written(store: Fixture) {
    upload_fixed(&store.client).await.expect("4 of 10");
    upload_fixed(&store.client).await.expect("8 of 10");
    let third = upload_fixed(&store.client).await;
    assert!(
        matches!(third, Err(RateLimitError::Limited { .. })),
        "{third:?}"
    );

    assert_eq!(
        upload_files(&store.client, vec!["a"; 7]).await.expect("7"),
        7
    );
    assert_eq!(
        upload_files(&store.client, vec!["b"; 3]).await.expect("10"),
        3
    );
    let over = upload_files(&store.client, vec!["c"]).await;
    assert!(
        matches!(over, Err(RateLimitError::Limited { .. })),
        "{over:?}"
    );
    // Nothing to send costs nothing, and is not checked.
    assert_eq!(upload_files(&store.client, vec![]).await.expect("free"), 0);
    // A cost above the limit can never pass.
    match upload_files(&store.client, vec!["d"; 11]).await {
        Err(RateLimitError::CostTooLarge {
            cost: 11,
            policy,
            capacity: 10,
        }) => assert_eq!(policy, "bytes"),
        other => panic!("expected CostTooLarge, got {other:?}"),
    }
}

#[rate_limit(
    policy = ["burst: 5/s burst 2", "hourly: 3/h"],
    key = "user:{user}",
    client = client,
)]
async fn both(client: &Client, user: u32) -> Result<(), RateLimitError> {
    Ok(())
}

async fn several_policies_are_all_or_nothing(store: Fixture) {
    // The burst refills one call every 200 ms: the third call is the burst policy's to deny
    // only if it comes within 200 ms of the first. A busy machine may take longer; the case
    // is then tried again for another user (and a third call let through sooner fails).
    const REFILL: Duration = Duration::from_millis(200);
    let mut user = 0;
    loop {
        user += 1;
        assert!(
            user <= 10,
            "10 tries too slow to exercise the case: the machine never made 3 calls in {REFILL:?}"
        );
        let asked = Instant::now();
        both(&store.client, user).await.expect("1");
        both(&store.client, user).await.expect("2");
        match both(&store.client, user).await {
            Err(RateLimitError::Limited { policy, .. }) => {
                assert_eq!(policy, "burst");
                break;
            }
            Ok(()) => assert!(
                !store.paused() && asked.elapsed() >= REFILL,
                "a third call passed {:?} after the first, before the burst refilled",
                asked.elapsed()
            ),
            other => panic!("expected the burst policy to deny, got {other:?}"),
        }
    }
    // The denied call consumed nothing from `hourly`: after the burst refills, one more
    // passes and the fourth is the hourly policy's to deny.
    tokio::time::sleep(Duration::from_millis(450)).await;
    both(&store.client, user).await.expect("3 of the hour");
    tokio::time::sleep(Duration::from_millis(250)).await;
    match both(&store.client, user).await {
        Err(RateLimitError::Limited {
            policy,
            retry_after,
        }) => {
            assert_eq!(policy, "hourly");
            // GCRA at 3/h: one more every 20 minutes.
            assert!(retry_after > Duration::from_secs(600), "{retry_after:?}");
        }
        other => panic!("expected the hourly policy to deny, got {other:?}"),
    }
}

// --- waiting -------------------------------------------------------------------------------------

#[rate_limit(
    policy = "paced: 20/s burst 1",
    client = client,
    on_limit = wait,
    max_wait = "400ms"
)]
async fn paced(client: &Client) -> Result<Instant, RateLimitError> {
    Ok(Instant::now())
}

async fn waiting_calls_keep_to_the_rate_and_give_up_at_max_wait(store: Fixture) {
    const TURN: Duration = Duration::from_millis(50);
    // Sequential calls: one every 50 ms (with the burst of 1, each after the first would be
    // refused if it did not wait).
    let first_sent = Instant::now();
    let mut ran = Vec::new();
    for _ in 0..5 {
        ran.push(paced(&store.client).await.expect("waits for its turn"));
    }
    let span = ran[4].duration_since(ran[0]);
    assert!(span >= Duration::from_millis(150), "5 calls in {span:?}");

    // Concurrent calls: turns are handed out 50 ms apart; those past 400 ms are refused at
    // once instead of waiting.
    let started = Instant::now();
    let calls: Vec<_> = (0..12)
        .map(|_| {
            let client = store.client.clone();
            tokio::spawn(async move {
                let result = paced(&client).await;
                (result, Instant::now())
            })
        })
        .collect();
    let (mut passed, mut refused) = (0, 0);
    for call in calls {
        match call.await.expect("task") {
            (Ok(at), _) => {
                passed += 1;
                ran.push(at);
            }
            (Err(RateLimitError::Limited { retry_after, .. }), at) => {
                refused += 1;
                // Refused because its turn was past max_wait (400 ms).
                assert!(retry_after > Duration::from_millis(350), "{retry_after:?}");
                if store.paused() {
                    // Where nothing runs late: at once, without waiting.
                    assert_eq!(at, started, "a refused call waited");
                }
            }
            (Err(err), _) => panic!("unexpected error: {err}"),
        }
    }
    assert_eq!(passed + refused, 12);
    // No faster than the rate, however late anything ran: the k-th call to pass ran no
    // sooner than its turn, k turns after the first call was sent (less 1 ms: the store's
    // clock counts whole milliseconds).
    ran.sort();
    for (k, at) in ran.iter().enumerate() {
        let turn = first_sent + TURN * u32::try_from(k).expect("fits");
        assert!(
            *at + Duration::from_millis(1) >= turn,
            "call {k} passed {:?} before its turn",
            turn - *at
        );
    }
    if store.paused() {
        // Where nothing runs late: the turns 50 ms apart after the last sequential call's,
        // up to max_wait (400 ms) from when the calls asked, all at once.
        assert_eq!(
            (passed, refused),
            (8, 4),
            "{passed} passed, {refused} refused"
        );
    }
}

#[rate_limit(
    policy = "turns: 2/s burst 1",
    client = client,
    on_limit = wait,
    max_wait = "5s"
)]
async fn turn(client: &Client) -> Result<Instant, RateLimitError> {
    Ok(Instant::now())
}

async fn a_dropped_waiting_call_gives_its_turn_back(store: Fixture) {
    // Allowed on top of the 350 ms wait for the work around it (the reservation's round
    // trip, the call), besides how late this runtime ran its timers meanwhile.
    const SLACK: Duration = Duration::from_millis(150);
    let probe = LatenessProbe::start();
    turn(&store.client).await.expect("the burst");
    // This call's turn is 500 ms away; it is dropped after 100 ms.
    let dropped = tokio::time::timeout(Duration::from_millis(100), turn(&store.client)).await;
    assert!(dropped.is_err(), "dropped while waiting");
    // The turn is given back in the background.
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The returned turn goes to the next caller: 350 ms from now, not 850 ms.
    let mark = probe.mark();
    let asked = Instant::now();
    let ran = turn(&store.client).await.expect("the returned turn");
    let waited = ran.duration_since(asked);
    let late = probe.since(mark);
    // A kept turn would make it wait 850 ms: past 350 ms + SLACK, unless the timers ran more
    // than 350 ms late, when the two cannot be told apart.
    assert!(
        waited <= Duration::from_millis(350) + SLACK + late,
        "waited {waited:?} (timers {late:?} late meanwhile): the dropped call kept its turn"
    );
    if store.paused() {
        assert_eq!(
            waited,
            Duration::from_millis(350),
            "the returned turn exactly"
        );
    }
}

// --- one budget for several functions -----------------------------------------------------------

#[rate_limit(policy = "partner: 4/min", client = client)]
async fn partner_read(client: &Client) -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limit(policy = "partner: 4/min", client = client, cost = 2)]
async fn partner_write(client: &Client) -> Result<(), RateLimitError> {
    Ok(())
}

async fn functions_with_one_policy_name_share_its_budget(store: Fixture) {
    partner_read(&store.client).await.expect("1 of 4");
    partner_write(&store.client).await.expect("3 of 4");
    partner_read(&store.client).await.expect("4 of 4");
    assert!(matches!(
        partner_write(&store.client).await,
        Err(RateLimitError::Limited { .. })
    ));
    assert!(matches!(
        partner_read(&store.client).await,
        Err(RateLimitError::Limited { .. })
    ));
}

// --- with #[distributed_lock] --------------------------------------------------------------------

#[distributed_lock(key = "checkout:{id}", client = client, on_busy = error)]
#[rate_limit(policy = "checkout: 2/min", key = "{id}", client = client)]
async fn checkout(client: &Client, id: u32) -> Result<u64, AppError> {
    Ok(distlock::current_lease()
        .expect("under the lock")
        .fence()
        .await
        .expect("fence"))
}

async fn the_rate_limit_written_lower_runs_before_the_lock(store: Fixture) {
    checkout(&store.client, 1)
        .await
        .expect("free and within the limit");
    let other = store.another_client().await;
    let held = other
        .lock("checkout:1")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .expect("hold");
    // Within the limit, the lock is busy.
    assert!(matches!(
        checkout(&store.client, 1).await,
        Err(AppError::Lock(LockError::Busy { .. }))
    ));
    // That call was counted: the limit is reached, and it answers before the lock is tried.
    assert!(matches!(
        checkout(&store.client, 1).await,
        Err(AppError::Limited(RateLimitError::Limited { .. }))
    ));
    held.release().await.expect("release");
}

// --- the limiter is built once per client ------------------------------------------------------

#[rate_limit(policy = "breaker: 1000/s", client = client)]
async fn guarded(client: &Client) -> Result<(), RateLimitError> {
    Ok(())
}

/// The limiter's circuit breaker opens after 3 failures in a row: a limiter built per call
/// would start closed every time and never say `CircuitOpen`. The site keeps one limiter per
/// client, so another client's calls are not affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limiter_is_kept_across_calls_per_client() {
    let mut server = RedisServer::start();
    let client = connect(&server.url()).await;
    guarded(&client).await.expect("the store answers");
    server.kill();
    for n in 1..=3 {
        match guarded(&client).await {
            Err(RateLimitError::Store(err)) => {
                assert!(
                    matches!(
                        err,
                        StoreError::Unreachable { .. } | StoreError::Timeout { .. }
                    ),
                    "failure {n}: {err}"
                );
            }
            other => panic!("failure {n}: expected a store error, got {other:?}"),
        }
    }
    match guarded(&client).await {
        Err(RateLimitError::CircuitOpen { .. }) => {}
        other => panic!("expected the breaker to be open, got {other:?}"),
    }
    let memory = Client::in_memory();
    guarded(&memory)
        .await
        .expect("another client's limiter has a breaker of its own");
}

/// Calls through a function's site from many tasks at once share its limiter and its
/// budget: exactly the burst passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_pass_exactly_the_budget() {
    let store = Fixture::redis().await;
    let runs = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let client = store.client.clone();
            let runs = runs.clone();
            tokio::spawn(async move {
                let mut limited = 0;
                for _ in 0..25 {
                    match counted(&client, &runs).await {
                        Ok(()) => {}
                        Err(RateLimitError::Limited { .. }) => limited += 1,
                        Err(err) => panic!("{err}"),
                    }
                }
                limited
            })
        })
        .collect();
    let mut limited = 0;
    for task in tasks {
        limited += task.await.expect("task");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 50, "{}", store.log());
    assert_eq!(limited, 150);
}

#[rate_limit(policy = "counted: 50/h", client = client)]
async fn counted(client: &Client, runs: &AtomicU32) -> Result<(), RateLimitError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

// --- on a client that cannot count ---------------------------------------------------------------

#[rate_limit(policy = "quorum-api: 5/s", key = "user:{user}", client = client)]
async fn on_the_quorum(client: &Client, user: u32) -> Result<u32, RateLimitError> {
    Ok(user)
}

/// On a Redlock quorum client every call fails the same way, naming the fix
/// (`counting_on`), and the reason is logged at ERROR once per function, not per call; a
/// quorum client that counts on a primary serves the same function.
#[tokio::test(flavor = "current_thread")]
async fn on_a_quorum_the_refusal_names_counting_on_and_is_logged_once() {
    let capture = crate::traces::Capture::start(tracing::Level::INFO);
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let quorum = Client::builder()
        .response_timeout(Duration::from_secs(5))
        .connect_quorum(&urls)
        .await
        .expect("connect_quorum");
    for _ in 0..3 {
        match on_the_quorum(&quorum, 7).await {
            Err(err @ RateLimitError::UnsupportedStore { .. }) => {
                assert!(err.to_string().contains("counting_on"), "{err}");
            }
            other => panic!("expected UnsupportedStore, got {other:?}"),
        }
    }
    let logged = capture.text();
    let errors: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("cannot count on this client"))
        .collect();
    assert_eq!(errors.len(), 1, "{logged}");
    assert!(
        errors[0].contains("ERROR") && errors[0].contains("counting_on"),
        "{}",
        errors[0]
    );

    let counts = RedisServer::start();
    let counting = Client::builder()
        .response_timeout(Duration::from_secs(5))
        .counting_on(connect(&counts.url()).await)
        .connect_quorum(&urls)
        .await
        .expect("a quorum counting on a primary");
    assert_eq!(on_the_quorum(&counting, 7).await.expect("counted"), 7);
}
