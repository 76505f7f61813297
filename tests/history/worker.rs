//! A worker process: a seeded random mix of operations on one backend, every invocation and
//! completion recorded (see `record.rs`).
//!
//! Each worker runs `tasks` concurrent tasks on one client. A task picks, at random: a lock
//! acquire (without waiting, or waiting, sometimes dropped mid-wait; eager or lazy about its
//! fence), semaphore permits, a read or write lock, or a rate-limit check under one of five
//! algorithms; off a quorum, a quarter of the lock acquires are of a fair lock (`F0`, always
//! fair). A grant is held for a random time, asked every 10 ms how long it is still
//! valid (a `claim`), sometimes extended, then released or dropped; its lost signal is
//! recorded when it fires. A lazy lock lease mints its fence at a random moment of its hold,
//! or late (after the worker stopped trusting it), or never.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use distlock::ratelimit::{Algorithm, Policy, Rate, RateLimiter};
use distlock::{Client, Lease, LeaseHandle, LockError, LossReason, ReleaseOutcome, StoreError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::record::{Recorder, stamp};

/// Environment variable carrying a worker's [`Plan`].
pub const PLAN_VAR: &str = "DISTLOCK_HISTORY_PLAN";

/// Lock names (few, so that workers contend).
pub const LOCKS: &[&str] = &["L0", "L1", "L2"];
/// A fair lock's name: every acquire of it is fair (off a quorum, which has no fair locks).
pub const FAIR_LOCK: &str = "F0";
/// Semaphores and their sizes.
pub const SEMAPHORES: &[(&str, u32)] = &[("S0", 2), ("S1", 3)];
/// Read-write locks.
pub const RW_LOCKS: &[&str] = &["R0"];
/// Rate-limit subjects.
pub const SUBJECTS: &[&str] = &["u0", "u1"];
/// Lease ttls (ms).
const TTLS: &[u64] = &[500, 800, 1000];
/// The longest a task holds a grant (ms).
pub const MAX_HOLD_MS: u64 = 1200;
/// The longest ttl (ms).
pub const MAX_TTL_MS: u64 = 1000;

/// How a worker reaches its backend, and what it does.
#[derive(Debug, Clone)]
pub struct Plan {
    pub worker: u32,
    pub seed: u64,
    pub backend: String,
    /// Server URLs (the sentinels' for Sentinel, seeds for a cluster).
    pub urls: Vec<String>,
    /// Sentinel's master name.
    pub master: String,
    pub secs: f64,
    pub tasks: usize,
    pub out: PathBuf,
    /// `mix` (the random mix), `probe:<blocked nodes>` (TESTPLAN 13), `hot:<waiters>` (16).
    pub role: String,
    /// The rate of the worker's clock (recorded; 1 unless run under libfaketime).
    pub clock_rate: f64,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "worker={};seed={};backend={};urls={};master={};secs={};tasks={};out={};role={};rate={}",
            self.worker,
            self.seed,
            self.backend,
            self.urls.join(","),
            self.master,
            self.secs,
            self.tasks,
            self.out.display(),
            self.role,
            self.clock_rate
        )
    }
}

impl Plan {
    /// The file whose appearance ends the mix (the nemesis is done).
    pub fn stop_file(&self) -> PathBuf {
        self.out.with_file_name("stop")
    }

    pub fn parse(text: &str) -> Self {
        let get = |key: &str| -> String {
            text.split(';')
                .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("plan without {key}: {text}"))
                .to_owned()
        };
        Self {
            worker: get("worker").parse().expect("worker"),
            seed: get("seed").parse().expect("seed"),
            backend: get("backend"),
            urls: get("urls").split(',').map(str::to_owned).collect(),
            master: get("master"),
            secs: get("secs").parse().expect("secs"),
            tasks: get("tasks").parse().expect("tasks"),
            out: PathBuf::from(get("out")),
            role: get("role"),
            clock_rate: get("rate").parse().expect("rate"),
        }
    }
}

/// Connects to the plan's backend, retrying for up to 20 s (a fault may be under way).
pub async fn connect(plan: &Plan) -> Client {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let result = match plan.backend.as_str() {
            "primary" => Client::connect(&plan.urls[0]).await,
            "sentinel" => Client::connect_sentinel(&plan.master, &plan.urls).await,
            "cluster" => Client::connect_cluster(&plan.urls).await,
            "quorum" => {
                let mut builder =
                    Client::builder().restart_quarantine(Duration::from_millis(3 * MAX_TTL_MS));
                if plan.role.starts_with("probe:") {
                    // TESTPLAN 13 is about which subsets can grant, not about speed: a node
                    // that answers slowly on a loaded machine must not count as blocked.
                    builder = builder.quorum_node_timeout(Duration::from_millis(250));
                }
                builder.connect_quorum(&plan.urls).await
            }
            other => panic!("unknown backend {other}"),
        };
        match result {
            Ok(client) => return client,
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("worker {}: connect: {e}; retrying", plan.worker);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("worker {}: cannot connect: {e}", plan.worker),
        }
    }
}

/// The rate limiters every worker uses: one policy each, five algorithms.
pub fn policies() -> Vec<Policy> {
    let per = |n, ms| Rate::per(n, Duration::from_millis(ms)).expect("rate");
    // Tight, so that the workers together ask for more than they get.
    vec![
        Policy::gcra("hg", per(4, 1000).burst(3).expect("burst")).expect("policy"),
        Policy::token_bucket("ht", per(3, 1000).burst(2).expect("burst")).expect("policy"),
        Policy::fixed_window("hf", per(3, 1000)).expect("policy"),
        Policy::sliding_window("hw", per(3, 1000)).expect("policy"),
        Policy::sliding_log("hl", per(2, 1000)).expect("policy"),
    ]
}

/// The checker's name of an algorithm.
pub fn algorithm_name(a: Algorithm) -> &'static str {
    match a {
        Algorithm::Gcra => "gcra",
        Algorithm::TokenBucket => "token-bucket",
        Algorithm::FixedWindow => "fixed-window",
        Algorithm::SlidingWindow => "sliding-window",
        Algorithm::SlidingLog => "sliding-log",
        _ => "other",
    }
}

/// The unit the checker counts in: the emission interval (GCRA family) or the period.
pub fn unit_us(policy: &Policy) -> u64 {
    let rate = policy.rate();
    let unit = match policy.algorithm() {
        Algorithm::Gcra | Algorithm::TokenBucket => rate.emission_interval(),
        _ => rate.period(),
    };
    u64::try_from(unit.as_micros()).expect("fits")
}

pub fn lock_err(e: &LockError) -> String {
    match e {
        LockError::Busy { .. } => "busy".into(),
        LockError::Timeout { .. } => "timeout".into(),
        LockError::LeaseLost { .. } => "lost".into(),
        LockError::Store(s) => format!("store-{}", store_err(s)),
        other => format!("{other:?}")
            .split([' ', '{', '('])
            .next()
            .unwrap_or("other")
            .to_lowercase(),
    }
}

fn store_err(e: &StoreError) -> &'static str {
    match e {
        StoreError::Unreachable { .. } => "unreachable",
        StoreError::Timeout { .. } => "timeout",
        StoreError::Refused { .. } => "refused",
        StoreError::NoQuorum { .. } => "no-quorum",
        StoreError::Protocol { .. } => "protocol",
        _ => "other",
    }
}

fn reason(r: Option<LossReason>) -> &'static str {
    match r {
        Some(LossReason::Released) => "released",
        Some(LossReason::NotHeld) => "not-held",
        Some(LossReason::Expired) => "expired",
        _ => "other",
    }
}

/// Runs the plan; returns when every task is done.
pub async fn run(plan: Plan) {
    let rec = Arc::new(Recorder::create(&plan.out, plan.worker));
    rec.record(
        0,
        "meta",
        &[
            ("backend", plan.backend.clone()),
            ("seed", plan.seed.to_string()),
            ("role", plan.role.clone()),
            ("clock_rate", plan.clock_rate.to_string()),
            ("stamps", "1".into()),
        ],
    );
    let client = connect(&plan).await;
    // A probe says it is connected, then waits for its partition to be in place.
    if let (Ok(ready), Ok(go)) = (
        std::env::var("DISTLOCK_HISTORY_READY"),
        std::env::var("DISTLOCK_HISTORY_GO"),
    ) {
        std::fs::write(ready, "ready").expect("ready file");
        while !std::path::Path::new(&go).exists() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    if let Some(blocked) = plan.role.strip_prefix("probe:") {
        probe(&plan, &client, &rec, blocked).await;
        return;
    }
    if let Some(waiters) = plan.role.strip_prefix("hot:") {
        hot(&plan, &client, &rec, waiters.parse().expect("waiters")).await;
        return;
    }
    let limiters: Vec<(Policy, Option<RateLimiter>)> = policies()
        .into_iter()
        .map(|p| {
            let limiter = (plan.backend != "quorum").then(|| {
                client
                    .rate_limiter(p.clone())
                    .build()
                    .expect("valid limiter")
            });
            (p, limiter)
        })
        .collect();
    let limiters = Arc::new(limiters);
    // At least `secs`, then until the nemesis is done (the stop file), at most 15 min more.
    let min_stop = tokio::time::Instant::now() + Duration::from_secs_f64(plan.secs);
    let max_stop = min_stop + Duration::from_secs(900);
    let stop_file = Arc::new(plan.stop_file());
    let mut tasks = Vec::new();
    for t in 0..plan.tasks {
        let (client, rec, limiters, backend, stop_file) = (
            client.clone(),
            Arc::clone(&rec),
            Arc::clone(&limiters),
            plan.backend.clone(),
            Arc::clone(&stop_file),
        );
        let mut rng = StdRng::seed_from_u64(
            plan.seed ^ (u64::from(plan.worker) << 32) ^ (t as u64 * 0x9E37_79B9),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let now = tokio::time::Instant::now();
                if now >= max_stop || (now >= min_stop && stop_file.exists()) {
                    break;
                }
                step(&client, &rec, &limiters, &backend, &mut rng).await;
                let pause = rng.random_range(0..30);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker task");
    }
    rec.record(0, "meta", &[("done", "1".into())]);
}

async fn step(
    client: &Client,
    rec: &Arc<Recorder>,
    limiters: &[(Policy, Option<RateLimiter>)],
    backend: &str,
    rng: &mut StdRng,
) {
    let roll = rng.random_range(0..100);
    let kind = if backend == "quorum" {
        "lock"
    } else {
        match roll {
            0..30 => "lock",
            30..42 => "sem",
            42..50 => "read",
            50..58 => "write",
            _ => "rl",
        }
    };
    if kind == "rl" {
        let (policy, limiter) = &limiters[rng.random_range(0..limiters.len())];
        let limiter = limiter.as_ref().expect("a limiter off the quorum");
        let subject = SUBJECTS[rng.random_range(0..SUBJECTS.len())];
        let cost = if rng.random_range(0..4) == 0 { 2 } else { 1 };
        let op = rec.next_op();
        rec.record(
            op,
            "inv",
            &[
                ("kind", "rl".into()),
                ("policy", policy.name().to_owned()),
                ("alg", algorithm_name(policy.algorithm()).into()),
                ("limit", policy.limit().to_string()),
                ("unit_us", unit_us(policy).to_string()),
                ("subject", subject.into()),
                ("cost", cost.to_string()),
            ],
        );
        match limiter.check_n(subject, cost).await {
            Ok(d) => rec.record(op, "ok", &[("allowed", u8::from(d.allowed).to_string())]),
            Err(e) => rec.record(
                op,
                "fail",
                &[(
                    "err",
                    format!("{e:?}")
                        .split([' ', '{', '('])
                        .next()
                        .unwrap_or("?")
                        .to_lowercase(),
                )],
            ),
        };
        return;
    }
    let ttl_ms = TTLS[rng.random_range(0..TTLS.len())];
    let ttl = Duration::from_millis(ttl_ms);
    let wait_ms = [0, 0, 300, 1000][rng.random_range(0..4)];
    let wait = Duration::from_millis(wait_ms);
    let watchdog = rng.random_range(0..10) < 8;
    let drop_after = (wait_ms > 0 && rng.random_range(0..6) == 0)
        .then(|| Duration::from_millis(rng.random_range(1..wait_ms)));
    // A lock's lease is eager (minted with the grant) a third of the time.
    let fenced = kind == "lock" && rng.random_range(0..3) == 0;
    let fair = kind == "lock" && backend != "quorum" && rng.random_range(0..4) == 0;
    let op = rec.next_op();
    let (name, mut pairs) = match kind {
        "lock" if fair => (FAIR_LOCK.to_owned(), vec![("fair", "1".to_owned())]),
        "lock" => (LOCKS[rng.random_range(0..LOCKS.len())].to_owned(), vec![]),
        "sem" => {
            let (name, size) = SEMAPHORES[rng.random_range(0..SEMAPHORES.len())];
            let n = rng.random_range(1..=size);
            (
                name.to_owned(),
                vec![("n", n.to_string()), ("size", size.to_string())],
            )
        }
        _ => (RW_LOCKS[0].to_owned(), vec![]),
    };
    pairs.extend([
        ("kind", kind.to_owned()),
        ("name", name.clone()),
        ("ttl", ttl_ms.to_string()),
        ("wait", wait_ms.to_string()),
        ("watchdog", u8::from(watchdog).to_string()),
        ("fenced", u8::from(fenced).to_string()),
    ]);
    rec.record(op, "inv", &pairs);
    let acquire = async {
        match kind {
            "lock" => {
                let lock = client.lock(&name).ttl(ttl).wait(wait).watchdog(watchdog);
                let lock = if fair { lock.fair() } else { lock };
                if fenced {
                    lock.fenced().acquire().await
                } else {
                    lock.acquire().await
                }
            }
            "sem" => {
                let n: u32 = pairs
                    .iter()
                    .find(|(k, _)| *k == "n")
                    .map(|(_, v)| v.parse().expect("n"))
                    .expect("n");
                let size = SEMAPHORES.iter().find(|(s, _)| *s == name).expect("size").1;
                client
                    .semaphore(&name, size)
                    .ttl(ttl)
                    .wait(wait)
                    .watchdog(watchdog)
                    .acquire_n(n)
                    .await
            }
            "read" => {
                client
                    .rw_lock(&name)
                    .ttl(ttl)
                    .wait(wait)
                    .watchdog(watchdog)
                    .read()
                    .await
            }
            _ => {
                client
                    .rw_lock(&name)
                    .ttl(ttl)
                    .wait(wait)
                    .watchdog(watchdog)
                    .write()
                    .await
            }
        }
    };
    let result = match drop_after {
        Some(after) => match tokio::time::timeout(after, acquire).await {
            Ok(result) => result,
            Err(_) => {
                rec.record(op, "fail", &[("err", "dropped".into())]);
                return;
            }
        },
        None => acquire.await,
    };
    match result {
        Ok(lease) => {
            record_grant(rec, op, &lease, &[]);
            hold(rec, lease, op, rng).await;
        }
        Err(e) => {
            rec.record(op, "fail", &[("err", lock_err(&e))]);
        }
    }
}

/// Holds a grant for a random time, claiming it every 10 ms, sometimes extending it; then
/// releases or drops it. Its lost signal is watched by a task of its own, so that it is
/// recorded when it fires even while this task waits on an `extend`.
async fn hold(rec: &Arc<Recorder>, lease: Lease, lease_op: u64, rng: &mut StdRng) {
    let hold_for = Duration::from_millis(rng.random_range(0..MAX_HOLD_MS));
    let started = tokio::time::Instant::now();
    let until = started + hold_for;
    let lid = lease_op.to_string();
    // A lazy lease mints its fence during its hold (half of them), late, after the worker
    // stopped trusting it (a tenth: the store may hold it still, or not), or never.
    let unminted = lease.minted_fence().is_none();
    let (mut mint_at, mint_late) = match rng.random_range(0..10) {
        _ if !unminted => (None, false),
        0..5 => (
            Some(started + hold_for.mul_f64(rng.random_range(0.0..1.0))),
            false,
        ),
        5 => (None, true),
        _ => (None, false),
    };
    // The watcher asks the lease every 10 ms how long it is valid (a claim) and records its
    // lost signal when it fires, on a task of its own: neither waits for an `extend` under way.
    let handle = lease.handle();
    let watcher_rec = Arc::clone(rec);
    let watcher = tokio::spawn(async move {
        loop {
            tokio::select! {
                () = handle.lost() => {
                    watcher_rec.record(
                        lease_op,
                        "lost",
                        &[("lease", lease_op.to_string()), ("reason", reason(handle.lost_reason()).into())],
                    );
                    return;
                }
                () = tokio::time::sleep(Duration::from_millis(10)) => claim(&watcher_rec, &handle, lease_op),
            }
        }
    });
    while tokio::time::Instant::now() < until && !lease.is_lost() {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if mint_at.is_some_and(|at| tokio::time::Instant::now() >= at) {
            mint_at = None;
            mint(rec, &lease, lease_op).await;
        }
        if rng.random_range(0..60) == 0 {
            let ttl_ms = TTLS[rng.random_range(0..TTLS.len())];
            let op = rec.next_op();
            rec.record(
                op,
                "inv",
                &[
                    ("kind", "extend".into()),
                    ("lease", lid.clone()),
                    ("ttl", ttl_ms.to_string()),
                ],
            );
            match lease.extend(Duration::from_millis(ttl_ms)).await {
                Ok(()) => rec.record(op, "ok", &[]),
                Err(e) => rec.record(op, "fail", &[("err", lock_err(&e))]),
            };
        }
    }
    rec.record(lease_op, "end", &[("lease", lid.clone())]);
    if mint_late {
        mint(rec, &lease, lease_op).await;
    }
    // No claims after the worker stops trusting the lease (they would be cut anyway); a lost
    // signal that fires later is still of interest, so the watcher keeps only that.
    if !watcher.is_finished() {
        watcher.abort();
        let handle = lease.handle();
        let watcher_rec = Arc::clone(rec);
        tokio::spawn(async move {
            handle.lost().await;
            watcher_rec.record(
                lease_op,
                "lost",
                &[
                    ("lease", lease_op.to_string()),
                    ("reason", reason(handle.lost_reason()).into()),
                ],
            );
        });
    }
    if !lease.is_lost() && rng.random_range(0..5) == 0 {
        // Dropped: released in the background.
        drop(lease);
        return;
    }
    let op = rec.next_op();
    rec.record(op, "inv", &[("kind", "release".into()), ("lease", lid)]);
    match lease.release().await {
        Ok(outcome) => {
            let outcome = match outcome {
                ReleaseOutcome::Released => "released",
                ReleaseOutcome::AlreadyExpired => "expired",
                ReleaseOutcome::HeldByOther => "held-by-other",
                _ => "other",
            };
            rec.record(op, "ok", &[("outcome", outcome.into())])
        }
        Err(e) => rec.record(op, "fail", &[("err", lock_err(&e))]),
    };
}

/// Asks a lazy lease for its fence (a mint in the store, the first time), recorded as a `mint`
/// operation of the lease: `ok` with the fence, or `fail` (`lost` when the lease was lost or
/// the store no longer held it).
async fn mint(rec: &Recorder, lease: &LeaseHandle, lease_op: u64) {
    let op = rec.next_op();
    rec.record(
        op,
        "inv",
        &[("kind", "mint".into()), ("lease", lease_op.to_string())],
    );
    match lease.fence().await {
        Ok(fence) => rec.record(op, "ok", &[("fence", fence.to_string())]),
        Err(e) => rec.record(op, "fail", &[("err", lock_err(&e))]),
    };
}

fn claim(rec: &Recorder, lease: &LeaseHandle, lease_op: u64) {
    let at = stamp();
    let valid = lease.valid_for();
    if !valid.is_zero() {
        rec.record_at(
            at,
            lease_op,
            "claim",
            &[
                ("lease", lease_op.to_string()),
                ("valid", valid.as_nanos().to_string()),
            ],
        );
    }
}

/// TESTPLAN 13 on a quorum: with the nodes in `blocked` (indexes, `-` for none) cut off from
/// this worker, every acquisition succeeds with validity in (0, ttl) if at least 3 of 5 are
/// free, and fails otherwise. Recorded as `probe` operations on fresh names.
async fn probe(plan: &Plan, client: &Client, rec: &Arc<Recorder>, blocked: &str) {
    const TRIES: usize = 5;
    let ttl = Duration::from_millis(1000);
    for i in 0..TRIES {
        let op = rec.next_op();
        let name = format!("probe-{}-{blocked}-{i}", plan.seed);
        rec.record(
            op,
            "inv",
            &[
                ("kind", "probe".into()),
                ("name", name.clone()),
                ("ttl", "1000".into()),
                ("blocked", blocked.into()),
            ],
        );
        match client
            .lock(&name)
            .ttl(ttl)
            .wait(Duration::ZERO)
            .acquire()
            .await
        {
            Ok(lease) => {
                record_grant(rec, op, &lease, &[("blocked", blocked.into())]);
                end_and_release(rec, lease, op).await;
            }
            Err(e) => {
                rec.record(
                    op,
                    "fail",
                    &[("err", lock_err(&e)), ("blocked", blocked.into())],
                );
            }
        }
    }
}

/// Records the grant of `op`, stamped when the acquire returned: the lease's fence (if the
/// grant minted it) and validity, then `extra`.
fn record_grant(rec: &Recorder, op: u64, lease: &Lease, extra: &[(&str, String)]) {
    let at = stamp();
    let valid = lease.valid_for();
    let mut pairs = vec![("valid", valid.as_nanos().to_string())];
    if let Some(fence) = lease.minted_fence() {
        pairs.push(("fence", fence.to_string()));
    }
    pairs.extend_from_slice(extra);
    rec.record_at(at, op, "ok", &pairs);
}

/// Records the end of lease `op`, then its release (`inv`, then `ok` or `fail`).
async fn end_and_release(rec: &Recorder, lease: Lease, op: u64) {
    rec.record(op, "end", &[("lease", op.to_string())]);
    let rel = rec.next_op();
    rec.record(
        rel,
        "inv",
        &[("kind", "release".into()), ("lease", op.to_string())],
    );
    match lease.release().await {
        Ok(_) => rec.record(rel, "ok", &[]),
        Err(e) => rec.record(rel, "fail", &[("err", lock_err(&e))]),
    };
}

/// TESTPLAN 16 at full scale: `waiters` tasks wait on the hot lock `HOT` (held by the parent)
/// until they get it, each then holds it briefly and releases it.
async fn hot(plan: &Plan, client: &Client, rec: &Arc<Recorder>, waiters: usize) {
    let mut tasks = Vec::new();
    for _ in 0..waiters {
        let client = client.clone();
        let wait = Duration::from_secs_f64(plan.secs + 60.0);
        let rec = Arc::clone(rec);
        tasks.push(tokio::spawn(async move {
            let op = rec.next_op();
            rec.record(
                op,
                "inv",
                &[
                    ("kind", "lock".into()),
                    ("name", HOT.into()),
                    ("ttl", "1000".into()),
                ],
            );
            match client
                .lock(HOT)
                .ttl(Duration::from_secs(1))
                .wait(wait)
                .acquire()
                .await
            {
                Ok(lease) => {
                    record_grant(&rec, op, &lease, &[]);
                    claim(&rec, &lease, op);
                    end_and_release(&rec, lease, op).await;
                }
                Err(e) => {
                    rec.record(op, "fail", &[("err", lock_err(&e))]);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("hot waiter");
    }
}

/// The hot lock of TESTPLAN 16.
pub const HOT: &str = "hot";
