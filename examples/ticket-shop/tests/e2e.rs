//! End to end: one real `redis-server` (or one real Redis Cluster of three masters and three
//! replicas), two `ticket-shop` processes against it, and many buyers over real HTTP, spread
//! across both replicas and racing for the same seats.
//!
//! Checks: exactly as many seats sold as there are, none twice (in the responses and in the
//! store's records), the periodic job never ran on both replicas at once nor twice in one
//! period, 429s where the policies say (one client hammering an endpoint, across both
//! replicas), and a `Retry-After` of at least 1 s on every 429. On the cluster, the same, each
//! record read from the master that holds it, with the seats and distlock's keys spread over
//! every master.
//!
//! The app processes believe `X-Forwarded-For` from 127.0.0.1 (`TRUSTED_PROXIES`), as they
//! would from a load balancer, so each simulated buyer is a distinct client address. The
//! addresses (198.51.100.0/24, 203.0.113.0/24) are documentation ranges that only appear
//! in headers; every connection goes to 127.0.0.1.

// The workspace's real-server harness (tests/support). Only the modules this test uses:
// `tests/support/mod.rs` also brings in the library tests' fixture, which calls hooks behind
// distlock's `test-util` feature, and that feature is off when this package is built alone
// (`cargo test -p distlock-example-ticket-shop`).
// `unused_imports`: the module re-exports its parts (slots, views, migrations) for the
// library's tests.
#[allow(dead_code, unused_imports)]
#[path = "../../../tests/support/cluster.rs"]
mod cluster;
#[allow(dead_code)]
#[path = "../../../tests/support/files.rs"]
mod files;
#[allow(dead_code)]
#[path = "../../../tests/support/node.rs"]
mod node;
#[allow(dead_code)]
#[path = "../../../tests/support/process.rs"]
mod process;
#[allow(dead_code)]
#[path = "../../../tests/support/server.rs"]
mod server;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use cluster::RedisCluster;
use distlock_example_ticket_shop::store::{
    Fenced, JobRun, Log, PREFIX, SOLD_KEY, Sale, Store, seat_resource,
};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use reqwest::StatusCode;
use serde_json::{Value, json};
use server::RedisServer;

const SEATS: u32 = 50;
const BUYERS: usize = 300;
const JOB_PERIOD: Duration = Duration::from_secs(2);

/// Where the replicas keep their locks, limits and records: one primary or a cluster.
enum Target {
    Primary(RedisServer),
    Cluster(RedisCluster),
}

impl Target {
    /// The environment variable that points a replica at it.
    fn env(&self) -> (&'static str, String) {
        match self {
            Self::Primary(server) => ("REDIS_URL", server.url()),
            Self::Cluster(cluster) => ("REDIS_CLUSTER_URLS", cluster.seed_urls().join(",")),
        }
    }

    /// What `GET /health` says the store is.
    fn kind(&self) -> &'static str {
        match self {
            Self::Primary(_) => "redis",
            Self::Cluster(_) => "redis-cluster",
        }
    }

    /// A plain connection to the server that holds `key`: on a cluster, the master of its
    /// slot (any other would answer `MOVED`), and which master that is.
    async fn conn_for(&self, key: &str) -> (MultiplexedConnection, u16) {
        match self {
            Self::Primary(server) => (server.conn().await, server.port()),
            Self::Cluster(cluster) => {
                let master = cluster.master_of_key(key).await;
                (master.conn().await, master.port())
            }
        }
    }

    /// The shop's own store on it, as a replica connects it.
    async fn store(&self) -> Store {
        let store = match self {
            Self::Primary(server) => Store::connect(&server.url()).await,
            Self::Cluster(cluster) => Store::connect_cluster(&cluster.seed_urls()).await,
        };
        store.expect("connect")
    }
}

/// One `ticket-shop` process, killed on drop. Its log is kept for failure messages.
struct Replica {
    name: String,
    base: String,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Replica {
    /// Starts a replica against the store that `(var, value)` names (`REDIS_URL` or
    /// `REDIS_CLUSTER_URLS`).
    fn start(name: &str, store: (&str, String)) -> Self {
        Self::start_with(name, &[store])
    }

    /// [`start`](Self::start) with more environment variables.
    fn start_with(name: &str, vars: &[(&str, String)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ticket-shop"))
            .env_remove("REDIS_URL")
            .env_remove("REDIS_CLUSTER_URLS")
            .env_remove("LAZY_START")
            .env("PORT", "0")
            .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
            .env("REPLICA_ID", name)
            .env("SEATS", SEATS.to_string())
            .env("TRUSTED_PROXIES", "127.0.0.1/32")
            .env("JOB_PERIOD", "2s")
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ticket-shop");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        for stream in [
            Box::new(stdout) as Box<dyn std::io::Read + Send>,
            Box::new(stderr),
        ] {
            let log = Arc::clone(&log);
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if let Some(at) = line.find("listening on http://") {
                        let addr = line[at + "listening on ".len()..]
                            .split_whitespace()
                            .next()
                            .unwrap_or_default()
                            .to_owned();
                        let _ = tx.send(addr);
                    }
                    log.lock().expect("log").push(line);
                }
            });
        }
        let mut replica = Self {
            name: name.to_owned(),
            base: String::new(),
            child,
            log,
        };
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(base) => replica.base = base,
            Err(_) => panic!("{name} did not start:\n{}", replica.log_text()),
        }
        replica
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn log_text(&self) -> String {
        self.log.lock().expect("log").join("\n")
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- log of {} ---\n{}", self.name, self.log_text());
        }
    }
}

async fn wait_healthy(http: &reqwest::Client, replica: &Replica) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(response) = http.get(replica.url("/health")).send().await
            && response.status() == StatusCode::OK
        {
            return response.json().await.expect("health json");
        }
        assert!(
            Instant::now() < deadline,
            "{} never answered /health:\n{}",
            replica.name,
            replica.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Buyer `i`'s client address, as the load balancer would forward it.
fn buyer_ip(i: usize) -> String {
    if i < 250 {
        format!("198.51.100.{}", i + 1)
    } else {
        format!("203.0.113.{}", i - 249)
    }
}

/// `Retry-After` of a 429, checked to be whole seconds, at least 1.
fn retry_after(response: &reqwest::Response) -> u64 {
    let value = response
        .headers()
        .get("retry-after")
        .unwrap_or_else(|| panic!("a 429 without Retry-After: {:?}", response.headers()));
    let secs: u64 = value
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("Retry-After {value:?} is not whole seconds"));
    assert!(secs >= 1, "Retry-After {secs}");
    secs
}

#[derive(Default)]
struct BuyerOutcome {
    sale: Option<Sale>,
    too_many: usize,
    /// 409s: the seat was sold by the time this buyer's checkout got to it.
    lost_races: usize,
    /// 503s.
    unavailable: usize,
}

/// One buyer: tries their seat, then any seat still available, until they get one or none is
/// left. Honours `Retry-After` on 429 and 409-busy, as a polite client would.
async fn buy(http: reqwest::Client, i: usize, replica: String) -> BuyerOutcome {
    let ip = buyer_ip(i);
    let buyer = format!("buyer-{i}");
    // Six buyers per seat, three on each replica.
    let mut seat = (i % SEATS as usize) as u32 + 1;
    let mut outcome = BuyerOutcome::default();
    for _ in 0..30 {
        let response = http
            .post(format!("{replica}/api/seats/{seat}/checkout"))
            .header("x-forwarded-for", &ip)
            .json(&json!({ "buyer": buyer }))
            .send()
            .await
            .expect("checkout request");
        match response.status() {
            StatusCode::CREATED => {
                outcome.sale = Some(response.json().await.expect("sale json"));
                return outcome;
            }
            StatusCode::TOO_MANY_REQUESTS => {
                outcome.too_many += 1;
                let secs = retry_after(&response);
                tokio::time::sleep(Duration::from_secs(secs)).await;
            }
            StatusCode::CONFLICT => {
                let retry = response.headers().contains_key("retry-after");
                let body: Value = response.json().await.expect("error json");
                if retry {
                    // Busy or lost its lock: the seat may still be for sale.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                assert!(
                    body["error"]
                        .as_str()
                        .is_some_and(|e| e.contains("already sold")),
                    "{body}"
                );
                outcome.lost_races += 1;
                let seats = http
                    .get(format!("{replica}/api/seats"))
                    .header("x-forwarded-for", &ip)
                    .send()
                    .await
                    .expect("seats request");
                match seats.status() {
                    StatusCode::OK => {}
                    StatusCode::TOO_MANY_REQUESTS => {
                        outcome.too_many += 1;
                        tokio::time::sleep(Duration::from_secs(retry_after(&seats))).await;
                        continue;
                    }
                    // As for a checkout: Redis was too slow for the replica; ask again.
                    StatusCode::SERVICE_UNAVAILABLE => {
                        outcome.unavailable += 1;
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                    other => panic!("buyer {i}: unexpected {other} listing seats"),
                }
                let seats: Value = seats.json().await.expect("seats json");
                let available = seats["available"].as_array().expect("available");
                if available.is_empty() {
                    return outcome;
                }
                seat = available[i % available.len()].as_u64().expect("seat") as u32;
            }
            // Redis was too slow for the replica (a loaded machine): retry like a client would.
            StatusCode::SERVICE_UNAVAILABLE => {
                outcome.unavailable += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            other => panic!("buyer {i}: unexpected {other}: {:?}", response.text().await),
        }
    }
    panic!("buyer {i} neither bought nor saw the seats run out in 30 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_never_sell_a_seat_twice() {
    two_replicas_on(Target::Primary(RedisServer::start())).await;
}

/// The same run on a Redis Cluster: the seat locks, fences and rate limits spread over its
/// three masters, the shop's records on the master of their slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_never_sell_a_seat_twice_on_a_cluster() {
    two_replicas_on(Target::Cluster(RedisCluster::start())).await;
}

/// One run of two replicas at a time in this test binary: each run is four processes and
/// 300 buyers on what may be a 2-core machine, and checks timings (rate limits, the job's
/// minimum hold) that a second run beside it would only blur.
static ONE_RUN_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn two_replicas_on(target: Target) {
    let _one_at_a_time = ONE_RUN_AT_A_TIME.lock().await;
    let test_started = Instant::now();
    let replicas = [
        Replica::start("replica-a", target.env()),
        Replica::start("replica-b", target.env()),
    ];
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .expect("http client");
    for replica in &replicas {
        let health = wait_healthy(&http, replica).await;
        assert_eq!(health["store"], target.kind());
        assert_eq!(health["replica"], replica.name.as_str());
    }

    // --- 300 buyers for 50 seats, across both replicas ---------------------------------------
    let started = Instant::now();
    let buyers: Vec<_> = (0..BUYERS)
        .map(|i| {
            // Buyers i, i + 50, i + 100... want the same seat; they alternate replicas, and
            // so do the first buyers of neighbouring seats.
            let replica = replicas[(i + i / SEATS as usize) % 2].base.clone();
            tokio::spawn(buy(http.clone(), i, replica))
        })
        .collect();
    let mut sales = Vec::new();
    let mut buyer_429s = 0;
    let mut lost_races = 0;
    let mut unavailable = 0;
    for buyer in buyers {
        let outcome = buyer.await.expect("buyer task");
        buyer_429s += outcome.too_many;
        lost_races += outcome.lost_races;
        unavailable += outcome.unavailable;
        sales.extend(outcome.sale);
    }
    let buying_took = started.elapsed();

    let mut by_seat: BTreeMap<u32, Vec<&Sale>> = BTreeMap::new();
    for sale in &sales {
        by_seat.entry(sale.seat).or_default().push(sale);
    }
    let sold_twice: Vec<_> = by_seat.iter().filter(|(_, s)| s.len() > 1).collect();
    assert!(sold_twice.is_empty(), "seats sold twice: {sold_twice:?}");
    assert_eq!(sales.len(), SEATS as usize, "201 responses");
    assert_eq!(by_seat.len(), SEATS as usize);

    // The store agrees: every seat has exactly the buyer and fence its 201 response said...
    let store = target.store().await;
    assert_eq!(store.sold_count().await.expect("count"), u64::from(SEATS));
    let (mut conn, _) = target.conn_for(SOLD_KEY).await;
    let indexed: u64 = conn.scard(SOLD_KEY).await.expect("SCARD");
    assert_eq!(indexed, u64::from(SEATS), "the index of sold seats");
    let mut seat_masters = std::collections::BTreeSet::new();
    for seat in 1..=SEATS {
        let stored = store
            .sale(seat)
            .await
            .expect("readable")
            .unwrap_or_else(|| panic!("seat {seat} has no buyer in the store"));
        assert_eq!(&stored, by_seat[&seat][0], "seat {seat}");
        // ...and so does Redis itself: the seat's fenced resource holds the buyer, and its
        // guard the sale's fence (no later write was accepted).
        let resource = seat_resource(seat);
        let values = format!("{PREFIX}:fenced:{{{resource}}}");
        let guard = format!("{PREFIX}:fenced-guard:{{{resource}}}");
        let (mut conn, master) = target.conn_for(&values).await;
        seat_masters.insert(master);
        let buyer: Option<String> = conn.hget(&values, "buyer").await.expect("HGET");
        assert_eq!(buyer.as_deref(), Some(stored.buyer.as_str()), "seat {seat}");
        let fence: Option<u64> = conn.get(&guard).await.expect("GET");
        assert_eq!(fence, Some(stored.fence), "seat {seat}'s guard");
    }
    if let Target::Cluster(_) = &target {
        assert_eq!(seat_masters.len(), 3, "the seats spread over the masters");
    }
    let mut per_replica: HashMap<&str, usize> = HashMap::new();
    for sale in &sales {
        *per_replica.entry(sale.replica.as_str()).or_default() += 1;
    }
    for replica in &replicas {
        let health = wait_healthy(&http, replica).await;
        assert_eq!(health["seats_sold"], SEATS);
    }

    // --- one client hammering the API, alternating replicas: the budget is shared --------------
    let mut api_allowed = 0;
    let mut api_429s = 0;
    let hammer_started = Instant::now();
    for n in 0..60 {
        let response = http
            .get(replicas[n % 2].url("/api/seats"))
            .header("x-forwarded-for", "192.0.2.77")
            .send()
            .await
            .expect("request");
        assert!(response.headers().contains_key("ratelimit-policy"));
        match response.status() {
            StatusCode::OK => api_allowed += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                api_429s += 1;
                retry_after(&response);
                let fields = response.headers()["ratelimit"].to_str().expect("ascii");
                assert!(fields.contains("\"api\";r=0"), "{fields}");
            }
            other => panic!("unexpected {other}"),
        }
    }
    // GCRA: a burst of 20, then 10 per second.
    let hammer_secs = hammer_started.elapsed().as_secs_f64();
    let api_bound = 20 + (hammer_secs * 10.0).floor() as usize + 1;
    assert!(
        (20..=api_bound).contains(&api_allowed),
        "{api_allowed} allowed in {hammer_secs:.2}s"
    );
    assert!(api_429s > 0);

    // --- one client hammering checkout: `checkout`, then `checkout-per-minute` ----------------
    // Seat 1 is sold, so each checkout that the limits let through is a 409 and sells nothing.
    let mut checkout_passed = 0;
    let mut checkout_429s = 0;
    let mut per_minute_refusal = None;
    let checkout_started = Instant::now();
    while per_minute_refusal.is_none() {
        assert!(checkout_started.elapsed() < Duration::from_secs(30));
        let response = http
            .post(replicas[checkout_passed % 2].url("/api/seats/1/checkout"))
            .header("x-forwarded-for", "192.0.2.88")
            .json(&json!({ "buyer": "hammer" }))
            .send()
            .await
            .expect("request");
        match response.status() {
            StatusCode::CONFLICT => checkout_passed += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                checkout_429s += 1;
                let secs = retry_after(&response);
                let fields = response.headers()["ratelimit"].to_str().expect("ascii");
                if fields.contains("\"checkout-per-minute\";r=0") {
                    per_minute_refusal = Some(secs);
                } else {
                    assert!(fields.contains("\"checkout\";r=0"), "{fields}");
                    assert_eq!(secs, 1);
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                }
            }
            other => panic!("unexpected {other}"),
        }
    }
    // Exactly 10 in the minute (a sliding log is exact), and the 11th waits for the oldest.
    assert_eq!(checkout_passed, 10);
    let per_minute_retry = per_minute_refusal.expect("refused");
    assert!(per_minute_retry > 30, "Retry-After {per_minute_retry}");

    // --- the periodic job ------------------------------------------------------------------
    // At least three periods have passed by now; make sure of it.
    while test_started.elapsed() < JOB_PERIOD * 4 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut runs: Vec<JobRun> = store.records(Log::JobRuns).await.expect("job runs");
    // In Redis, one entry per run in the log's fenced resource.
    let log_values = format!("{PREFIX}:fenced:{{{}}}", Log::JobRuns.resource());
    let (mut conn, _) = target.conn_for(&log_values).await;
    let entries: usize = conn.hlen(&log_values).await.expect("HLEN");
    assert_eq!(entries, runs.len());
    runs.sort_by_key(|r| r.started_ms);
    assert!(runs.len() >= 3, "{} job runs", runs.len());
    let period_ms = JOB_PERIOD.as_millis() as u64;
    let min_hold_ms = period_ms * 3 / 4;
    for pair in runs.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            b.started_ms >= a.ended_ms,
            "job runs overlap: {a:?} and {b:?}"
        );
        assert!(b.fence > a.fence, "fences out of order: {a:?} and {b:?}");
        assert_ne!(
            a.started_ms / period_ms,
            b.started_ms / period_ms,
            "two runs in one period: {a:?} and {b:?}"
        );
        // The minimum hold keeps the next run out for ¾ of a period (less the time of one
        // store round trip before the start is read).
        assert!(
            b.started_ms + 100 >= a.started_ms + min_hold_ms,
            "the minimum hold was not kept: {a:?} and {b:?}"
        );
    }
    let mut job_runs_per_replica: BTreeMap<&str, usize> = BTreeMap::new();
    for run in &runs {
        *job_runs_per_replica
            .entry(run.replica.as_str())
            .or_default() += 1;
    }

    let spread = match &target {
        Target::Cluster(cluster) => format!(
            "; distlock keys per master {:?}",
            distlock_keys_per_master(cluster).await
        ),
        Target::Primary(_) => String::new(),
    };

    println!(
        "e2e ({}): {} buyers bought {} of {SEATS} seats in {buying_took:.2?} (per replica {per_replica:?}); \
         seats sold twice: 0; lost races (409): {lost_races}; 503s: {unavailable}; buyer 429s: {buyer_429s}; api hammer: {api_allowed} allowed, \
         {api_429s} x 429; checkout hammer: {checkout_passed} passed, {checkout_429s} x 429, \
         per-minute Retry-After {per_minute_retry}s; job runs {} by {job_runs_per_replica:?}, \
         none overlapping{spread}; total {:.2?}",
        target.kind(),
        BUYERS,
        sales.len(),
        runs.len(),
        test_started.elapsed()
    );
}

/// On a cluster, the library's keys (lock fences, rate-limit state) are on every master, not
/// only on the one that holds the shop's records: the run really used the whole cluster.
/// Returns how many each master holds.
async fn distlock_keys_per_master(cluster: &RedisCluster) -> Vec<usize> {
    let mut counts = Vec::new();
    for master in cluster.masters().await {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("distlock:*")
            .query_async(&mut master.conn().await)
            .await
            .expect("KEYS");
        assert!(
            !keys.is_empty(),
            "master {} holds none of distlock's keys",
            master.addr()
        );
        counts.push(keys.len());
    }
    counts
}

/// The Redis store's scripts refuse what the in-memory store refuses.
#[tokio::test]
async fn redis_store_refuses_stale_fences() {
    let target = Target::Primary(RedisServer::start());
    store_refuses_stale_fences(&target).await;
}

/// The same scripts, single-slot, on a cluster.
#[tokio::test]
async fn redis_store_refuses_stale_fences_on_a_cluster() {
    let target = Target::Cluster(RedisCluster::start());
    store_refuses_stale_fences(&target).await;
}

async fn store_refuses_stale_fences(target: &Target) {
    let store = target.store().await;
    assert_eq!(store.kind(), target.kind());
    assert_eq!(store.hold(3, 10).await.expect("hold"), Fenced::Ok);
    assert_eq!(store.hold(3, 11).await.expect("hold"), Fenced::Ok);
    let sale = |fence, buyer: &str| Sale {
        seat: 3,
        buyer: buyer.to_owned(),
        fence,
        replica: "r".to_owned(),
        sold_at_ms: 1,
    };
    assert_eq!(
        store.confirm(&sale(10, "stale")).await.expect("confirm"),
        Fenced::Stale { newer: 11 }
    );
    assert_eq!(
        store.confirm(&sale(11, "ada")).await.expect("confirm"),
        Fenced::Ok
    );
    assert_eq!(
        store.confirm(&sale(12, "bob")).await.expect("confirm"),
        Fenced::Sold
    );
    assert_eq!(store.hold(3, 13).await.expect("hold"), Fenced::Sold);
    assert_eq!(store.sale(3).await.expect("sale"), Some(sale(11, "ada")));
    assert_eq!(store.sales(5).await.expect("sales"), vec![sale(11, "ada")]);
    assert_eq!(store.sold_count().await.expect("count"), 1);

    let run = |fence| JobRun {
        job: "j".into(),
        replica: "r".into(),
        fence,
        started_ms: 1,
        ended_ms: 2,
        seats_sold: 0,
    };
    assert_eq!(
        store
            .append(Log::JobRuns, 5, &run(5))
            .await
            .expect("append"),
        Fenced::Ok
    );
    assert_eq!(
        store
            .append(Log::JobRuns, 4, &run(4))
            .await
            .expect("append"),
        Fenced::Stale { newer: 5 }
    );
    let runs: Vec<JobRun> = store.records(Log::JobRuns).await.expect("records");
    assert_eq!(runs, vec![run(5)]);
    let now = store.now_ms().await.expect("time");
    assert!(now > 1_600_000_000_000);
}

/// `LAZY_START=true`: a replica started while its Redis is down serves at once, says it is not
/// ready (`/ready` 503, a sale 503), and becomes ready and sells once Redis answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_replica_starts_before_redis_and_sells_once_it_answers() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let replica = Replica::start_with(
        "lazy",
        &[("REDIS_URL", url), ("LAZY_START", "true".to_owned())],
    );
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("HTTP client");
    let ready = http
        .get(replica.url("/ready"))
        .send()
        .await
        .expect("GET /ready");
    assert_eq!(
        ready.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        replica.log_text()
    );
    let sale = http
        .post(replica.url("/api/seats/1/checkout"))
        .header("x-forwarded-for", "198.51.100.1")
        .json(&serde_json::json!({ "buyer": "early" }))
        .send()
        .await
        .expect("checkout");
    assert_eq!(sale.status(), StatusCode::SERVICE_UNAVAILABLE);

    server.restart();
    // The library probes a down primary at least every 2 s; well within 30 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = http
            .get(replica.url("/ready"))
            .send()
            .await
            .expect("GET /ready");
        if ready.status() == StatusCode::OK {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not ready 30 s after Redis came up:\n{}",
            replica.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut sold = None;
    while Instant::now() < deadline {
        let sale = http
            .post(replica.url("/api/seats/1/checkout"))
            .header("x-forwarded-for", "198.51.100.1")
            .json(&serde_json::json!({ "buyer": "ada" }))
            .send()
            .await
            .expect("checkout");
        if sale.status() == StatusCode::CREATED {
            sold = Some(sale.json::<Value>().await.expect("sale"));
            break;
        }
        // The records' own connection may take one more try after Redis is back.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sold = sold.unwrap_or_else(|| panic!("no sale once ready:\n{}", replica.log_text()));
    assert_eq!(sold["buyer"], "ada");
}

/// Waits up to `within` for a line of `replica`'s log that contains `needle`, and returns it.
fn wait_for_log(replica: &Replica, needle: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Some(line) = replica
            .log
            .lock()
            .expect("log")
            .iter()
            .find(|line| line.contains(needle))
        {
            return line.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in {}'s log within {within:?}:\n{}",
            replica.name,
            replica.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 44: the replica that leads the job drains on SIGTERM (axum's graceful shutdown, then
/// `Client::shutdown`): it resigns, logs what it gave back and exits cleanly, and the other
/// replica leads well before the election's ttl (10 s) would have let it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_drains_on_sigterm_and_the_other_replica_leads_at_once() {
    let server = RedisServer::start();
    let mut first = Replica::start("drain-a", ("REDIS_URL", server.url()));
    wait_for_log(&first, "leading:", Duration::from_secs(20));
    let second = Replica::start("drain-b", ("REDIS_URL", server.url()));
    // The second campaigns (and waits on the release channel) once it has started.
    let http = reqwest::Client::new();
    wait_healthy(&http, &second).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !second.log_text().contains("leading:"),
        "the first replica leads until it stops"
    );

    let signalled = Instant::now();
    let sent = Command::new("kill")
        .args(["-TERM", &first.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success(), "SIGTERM: {sent:?}");
    wait_for_log(&second, "leading:", Duration::from_secs(20));
    let took_over = signalled.elapsed();
    let status = first.child.wait().expect("the first replica exits");
    assert!(status.success(), "{status:?}\n{}", first.log_text());
    let drained = wait_for_log(&first, "drained", Duration::from_secs(1));
    let resigned = wait_for_log(&first, "released on shutdown", Duration::from_secs(1));
    eprintln!("after SIGTERM the second replica led in {took_over:?}; {drained}");
    assert!(resigned.contains("election_term"), "{resigned}");
    assert!(drained.contains("not_released=0"), "{drained}");
    assert!(
        took_over < Duration::from_secs(5),
        "led {took_over:?} after SIGTERM: the election's ttl is 10 s"
    );
}
