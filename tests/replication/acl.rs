//! Case 25 (ACL): the library runs as an ACL user limited to
//! [`LIBRARY_ACL_RULES`](crate::support::server::LIBRARY_ACL_RULES) and its key prefix; none
//! of those rules can be dropped; a user that lacks one gets a typed `NoPermission` error,
//! whether Redis refused the command itself or one a script ran. Behind Sentinel
//! the user also needs
//! [`LIBRARY_ACL_SENTINEL_RULES`](crate::support::server::LIBRARY_ACL_SENTINEL_RULES).
//!
//! Every denial is read from the server's `ACL LOG` (commands run inside scripts included),
//! so a rule is found missing even where the library tolerates the refusal (`INFO` at
//! connect, redis-rs's `CLIENT SETINFO`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use distlock::ratelimit::{Policy, Rate};
use distlock::{Client, LockError, RateLimitError, RefusedKind, StoreError};
use redis::aio::MultiplexedConnection;

use crate::support::RedisServer;
use crate::support::sentinel::SentinelSetup;
use crate::support::server::{LIBRARY_ACL_OPTIONAL_RULES, LIBRARY_ACL_RULES, library_acl_rules};

const USER: &str = "locker";
const PASSWORD: &str = "locker-pw";
const PREFIX: &str = "distlock";

/// A primary with `rules` for [`USER`] (plus a replica of it when `replica`, for `WAIT`).
struct AclServers {
    primary: RedisServer,
    _replica: Option<RedisServer>,
}

impl AclServers {
    async fn start(rules: &[String], replica: bool) -> Self {
        let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
        let primary = RedisServer::builder().acl_user(USER, &rules).start();
        let replica = replica.then(|| RedisServer::builder().replica_of(primary.addr()).start());
        if replica.is_some() {
            primary.wait_connected_replicas(1).await;
        }
        Self {
            primary,
            _replica: replica,
        }
    }

    fn url(&self) -> String {
        self.primary.url_for_user(USER, PASSWORD)
    }

    /// The default user's connection (every command), for `ACL LOG` and `INFO`.
    async fn admin(&self) -> MultiplexedConnection {
        self.primary.conn().await
    }
}

/// The rule set of [`USER`] without `drop` (or with everything, `drop` empty).
fn rules_without(drop: &[&str]) -> Vec<String> {
    library_acl_rules(PASSWORD, PREFIX)
        .into_iter()
        .filter(|r| !drop.contains(&r.as_str()))
        .collect()
}

/// Denials recorded in `ACL LOG` as `reason:object (context)`, e.g. `command:info
/// (toplevel)`, `command:setrange (lua)`, `key:other:k (lua)`.
async fn acl_denials(admin: &mut MultiplexedConnection) -> Vec<String> {
    let entries: Vec<BTreeMap<String, redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(admin)
        .await
        .expect("ACL LOG");
    let text = |v: Option<&redis::Value>| match v {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(redis::Value::SimpleString(s)) => s.clone(),
        other => format!("{other:?}"),
    };
    entries
        .iter()
        .map(|e| {
            format!(
                "{}:{} ({})",
                text(e.get("reason")),
                text(e.get("object")),
                text(e.get("context"))
            )
        })
        .collect()
}

/// Commands the server has run (`INFO commandstats`, script calls included), by name.
async fn commands_run(admin: &mut MultiplexedConnection) -> BTreeSet<String> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .expect("INFO commandstats");
    text.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// Everything the library does on a single primary, through its public API, as the user of
/// `url` (with `.replicas(1, ..)` when `replica`). `Err` names the first operation that
/// failed and its typed error. Bounded: every wait is short, responses time out after 1 s.
async fn library_operations(url: &str, replica: bool) -> Result<(), String> {
    let connect = || async {
        Client::builder()
            .response_timeout(Duration::from_secs(1))
            .connect(url)
            .await
            .map_err(|e| format!("connect: {e:?}"))
    };
    let a = connect().await?;
    let b = connect().await?;
    let lock_err = |what: &'static str| move |e: LockError| format!("{what}: {e:?}");
    let rate_err = |what: String| move |e: RateLimitError| format!("{what}: {e:?}");

    // Uncontended acquire (EVALSHA, SCRIPT LOAD on the first NOSCRIPT; SET NX PX, TIME and
    // SET .. GET for the fence), extend (GET, PEXPIRE), release (GET, DEL).
    let lease = a
        .lock("acl-plain")
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .map_err(lock_err("acquire"))?;
    lease
        .extend(Duration::from_secs(3))
        .await
        .map_err(lock_err("extend"))?;
    lease.release().await.map_err(lock_err("release"))?;

    // Busy without waiting (GET, PTTL).
    let held = a
        .lock("acl-busy")
        .ttl(Duration::from_secs(3))
        .acquire()
        .await
        .map_err(lock_err("acquire acl-busy"))?;
    match b.lock("acl-busy").wait(Duration::ZERO).acquire().await {
        Err(LockError::Busy { .. }) => {}
        other => return Err(format!("acquire a busy lock without waiting: {other:?}")),
    }

    // A waiter of another client: SUBSCRIBE on the release channel, marks the lock (APPEND
    // '*', then SETRANGE '!' once it starves); the release reserves it (SET '!' PX) and
    // PUBLISHes; the waiter takes the reservation; UNSUBSCRIBE afterwards.
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let lease = b
                .lock("acl-busy")
                .wait(Duration::from_secs(3))
                .acquire()
                .await?;
            lease.release().await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.map_err(lock_err("release acl-busy"))?;
    waiter
        .await
        .map_err(|e| format!("waiter task: {e}"))?
        .map_err(lock_err("waiter of another client"))?;

    // A starving waiter that gives up takes its mark back (unmark.lua: SETRANGE or DEL).
    let held = a
        .lock("acl-giveup")
        .ttl(Duration::from_secs(3))
        .acquire()
        .await
        .map_err(lock_err("acquire acl-giveup"))?;
    match b
        .lock("acl-giveup")
        .wait(Duration::from_millis(400))
        .acquire()
        .await
    {
        Err(LockError::Timeout { .. }) => {}
        other => return Err(format!("a waiter that times out: {other:?}")),
    }
    held.release()
        .await
        .map_err(lock_err("release acl-giveup"))?;

    // Hand-off to a waiter of the same client (handoff.lua).
    let held = a
        .lock("acl-handoff")
        .ttl(Duration::from_secs(3))
        .acquire()
        .await
        .map_err(lock_err("acquire acl-handoff"))?;
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move {
            let lease = a
                .lock("acl-handoff")
                .wait(Duration::from_secs(3))
                .acquire()
                .await?;
            lease.release().await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.release()
        .await
        .map_err(lock_err("release acl-handoff"))?;
    waiter
        .await
        .map_err(|e| format!("waiter task: {e}"))?
        .map_err(lock_err("waiter of the same client"))?;

    // Watchdog renewals (renew.lua: GET, PEXPIRE) while a body runs past the ttl.
    let value = a
        .lock("acl-watchdog")
        .ttl(Duration::from_millis(300))
        .run(|_lease| async {
            tokio::time::sleep(Duration::from_millis(700)).await;
            7
        })
        .await
        .map_err(lock_err("run with watchdog"))?;
    if value != 7 {
        return Err(format!("run returned {value}"));
    }

    // Semaphores: permits as sorted-set entries (ZADD, ZCOUNT, ZREMRANGEBYSCORE; renewals
    // ZSCORE; release ZREM, EXISTS for the waiters' mark), a waiter for a permit woken by a
    // release.
    let permit = a
        .semaphore("acl-permits", 2)
        .ttl(Duration::from_secs(2))
        .acquire_n(2)
        .await
        .map_err(lock_err("semaphore acquire_n"))?;
    permit
        .extend(Duration::from_secs(3))
        .await
        .map_err(lock_err("semaphore extend"))?;
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let lease = b
                .semaphore("acl-permits", 2)
                .wait(Duration::from_secs(3))
                .acquire()
                .await?;
            lease.release().await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    permit
        .release()
        .await
        .map_err(lock_err("semaphore release"))?;
    waiter
        .await
        .map_err(|e| format!("waiter task: {e}"))?
        .map_err(lock_err("semaphore waiter"))?;

    // Read-write lock: two readers, a writer that waits for them (its mark keeps new readers
    // out: EXISTS), then the write hold.
    let r1 = a
        .rw_lock("acl-rw")
        .ttl(Duration::from_secs(2))
        .read()
        .await
        .map_err(lock_err("read"))?;
    let r2 = b
        .rw_lock("acl-rw")
        .ttl(Duration::from_secs(2))
        .read()
        .await
        .map_err(lock_err("second read"))?;
    let writer = {
        let b = b.clone();
        tokio::spawn(async move {
            let lease = b
                .rw_lock("acl-rw")
                .wait(Duration::from_secs(3))
                .write()
                .await?;
            lease.release().await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    r1.release().await.map_err(lock_err("release read"))?;
    r2.release()
        .await
        .map_err(lock_err("release second read"))?;
    writer
        .await
        .map_err(|e| format!("writer task: {e}"))?
        .map_err(lock_err("waiting writer"))?;

    // Multi-lock: all or nothing in one script.
    let multi = a
        .multi_lock(["acl-m1", "acl-m2", "acl-m3"])
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .map_err(lock_err("multi-lock"))?;
    multi.release().await.map_err(lock_err("multi release"))?;

    // A scheduled job kept for `at_least` after its start.
    let ran = a
        .job("acl-job")
        .at_least(Duration::from_secs(1))
        .at_most(Duration::from_secs(5))
        .run(|_lease| async { 1 })
        .await
        .map_err(lock_err("job"))?;
    if ran != Some(1) {
        return Err(format!("job ran: {ran:?}"));
    }

    // Operating a limiter: refund (the sliding log's ZPOPMAX), penalize, reset.
    let log = a
        .rate_limiter(
            Policy::sliding_log("acl-operate", Rate::per_hour(3).expect("rate")).expect("policy"),
        )
        .build()
        .expect("valid limiter");
    log.check_n("subject", 2)
        .await
        .map_err(rate_err("check before refund".into()))?;
    log.refund("subject", 1)
        .await
        .map_err(rate_err("refund".into()))?;
    log.penalize("subject", 1)
        .await
        .map_err(rate_err("penalize".into()))?;
    log.reset("subject")
        .await
        .map_err(rate_err("reset".into()))?;

    // A Bloom filter on bitmaps: open (configuration header, size), add, look up, count,
    // clear.
    let bloom_err = |what: &'static str| move |e: distlock::BloomError| format!("{what}: {e:?}");
    let filter = a
        .bloom_filter("acl-bloom")
        .expected_items(1000)
        .false_positive_rate(0.01)
        .open()
        .await
        .map_err(bloom_err("bloom open"))?;
    filter
        .add_many(["a", "b"])
        .await
        .map_err(bloom_err("bloom add_many"))?;
    if !filter
        .contains("a")
        .await
        .map_err(bloom_err("bloom contains"))?
    {
        return Err("the Bloom filter lost an item".to_owned());
    }
    filter.count().await.map_err(bloom_err("bloom count"))?;
    filter.clear().await.map_err(bloom_err("bloom clear"))?;

    // The operators' view: lock_state (GET, PTTL), force_unlock (the release script).
    let _forced = a
        .lock("acl-operated")
        .ttl(Duration::from_secs(3))
        .acquire()
        .await
        .map_err(lock_err("acquire acl-operated"))?;
    b.lock_state("acl-operated")
        .await
        .map_err(lock_err("lock_state"))?;
    if !b
        .force_unlock("acl-operated")
        .await
        .map_err(lock_err("force_unlock"))?
    {
        return Err("force_unlock found nothing to free".to_owned());
    }

    // Replica acknowledgement (WAIT). The live replica normally acknowledges in a
    // millisecond; the wait only outlasts a busy machine that leaves it unscheduled.
    if replica {
        let lease = a
            .lock("acl-wait")
            .replicas(1, Duration::from_secs(3))
            .acquire()
            .await
            .map_err(lock_err("acquire with replicas(1)"))?;
        lease
            .release()
            .await
            .map_err(lock_err("release acl-wait"))?;
    }

    // Rate limits, every algorithm (GET/SET; the sliding log's sorted set commands), up to
    // a denial, a multi-unit check and a peek; then several policies at once.
    // Per hour, so that no token comes back between the checks (the fixed and sliding
    // windows could still straddle an hour boundary: a few µs of the hour).
    let rate = Rate::per_hour(3).expect("rate");
    let policies = [
        Policy::gcra("acl-gcra", rate),
        Policy::token_bucket("acl-bucket", rate),
        Policy::fixed_window("acl-fixed", rate),
        Policy::sliding_window("acl-sliding", rate),
        Policy::sliding_log("acl-log", rate),
    ];
    for policy in policies {
        let policy = policy.expect("policy");
        let name = policy.name().to_owned();
        let limiter = a.rate_limiter(policy).build().expect("valid limiter");
        let mut allowed = 0;
        for _ in 0..4 {
            let decision = limiter
                .check("subject")
                .await
                .map_err(rate_err(format!("check {name}")))?;
            allowed += usize::from(decision.allowed);
        }
        if allowed != 3 {
            return Err(format!("{name}: {allowed} of 4 checks allowed, want 3"));
        }
        limiter
            .check_n("other", 2)
            .await
            .map_err(rate_err(format!("check_n {name}")))?;
        limiter
            .peek("other")
            .await
            .map_err(rate_err(format!("peek {name}")))?;
    }
    let all = a
        .rate_limiter_all([
            Policy::gcra("acl-all-second", rate).expect("policy"),
            Policy::sliding_log("acl-all-minute", Rate::per_minute(10).expect("rate"))
                .expect("policy"),
        ])
        .build()
        .expect("limiter");
    all.check("subject")
        .await
        .map_err(rate_err("check of two policies".into()))?;
    let any = a
        .rate_limiter_any([
            Policy::gcra("acl-any-steady", Rate::per_hour(1).expect("rate")).expect("policy"),
            Policy::fixed_window("acl-any-burst", Rate::per_hour(1).expect("rate"))
                .expect("policy"),
        ])
        .deny_cache(0)
        .build()
        .expect("limiter");
    let mut charged = Vec::new();
    for _ in 0..3 {
        let d = any
            .check("subject")
            .await
            .map_err(rate_err("any-of check".into()))?;
        charged.push(d.policies.iter().position(|p| p.charged));
    }
    if charged != [Some(0), Some(1), None] {
        return Err(format!(
            "any-of checks charged {charged:?}, want steady, burst, none"
        ));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_runs_as_a_user_with_the_library_acl_rules() {
    let servers = AclServers::start(&rules_without(&[]), true).await;
    let mut admin = servers.admin().await;
    let before = commands_run(&mut admin).await;
    let result = library_operations(&servers.url(), true).await;
    let denials = acl_denials(&mut admin).await;
    assert_eq!(
        (result, denials.clone()),
        (Ok(()), Vec::new()),
        "with rules {:?}\nlog:\n{}",
        rules_without(&[]),
        servers.primary.log()
    );
    let ran: BTreeSet<String> = commands_run(&mut admin)
        .await
        .difference(&before)
        .filter(|c| !c.starts_with("acl|"))
        .cloned()
        .collect();
    eprintln!("commands the library ran: {ran:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_optional_rules_only_their_commands_are_refused() {
    let servers = AclServers::start(&rules_without(LIBRARY_ACL_OPTIONAL_RULES), true).await;
    let mut admin = servers.admin().await;
    let result = library_operations(&servers.url(), true).await;
    let denials: BTreeSet<String> = acl_denials(&mut admin).await.into_iter().collect();
    assert_eq!(result, Ok(()), "log:\n{}", servers.primary.log());
    eprintln!("refused without the optional rules: {denials:?}");
    for denial in &denials {
        assert!(
            LIBRARY_ACL_OPTIONAL_RULES
                .iter()
                .any(|r| denial.starts_with(&format!("command:{}", &r[1..]))),
            "{denial}: not an optional rule's command"
        );
    }
}

/// Rules no public operation reaches, with the reason they stay in [`LIBRARY_ACL_RULES`].
const UNREACHABLE: &[(&str, &str)] = &[(
    "+zremrangebyrank",
    "the sliding log's cap at `limit` members: the script never lets the set grow past it",
)];

/// Drops each rule of [`LIBRARY_ACL_RULES`] in turn: the operations then fail or the server
/// logs a denial (except for the [`UNREACHABLE`] ones). Seven primaries (with a replica each)
/// at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_library_acl_rule_is_needed() {
    let rules: Vec<&str> = LIBRARY_ACL_RULES
        .iter()
        .copied()
        .filter(|r| !UNREACHABLE.iter().any(|(u, _)| u == r))
        .collect();
    let mut removable = Vec::new();
    for chunk in rules.chunks(7) {
        let runs = chunk.iter().map(|rule| async move {
            let servers = AclServers::start(&rules_without(&[rule]), true).await;
            let mut admin = servers.admin().await;
            let result = library_operations(&servers.url(), true).await;
            let denials = acl_denials(&mut admin).await;
            (*rule, result, denials)
        });
        for (rule, result, denials) in futures_util::future::join_all(runs).await {
            eprintln!("without {rule}: {result:?}, ACL LOG {denials:?}");
            if result.is_ok() && denials.is_empty() {
                removable.push(rule);
            }
        }
    }
    assert!(
        removable.is_empty(),
        "the operations pass without {removable:?}: drop them from LIBRARY_ACL_RULES"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_a_rule_gets_a_typed_no_permission_error() {
    let servers = AclServers::start(&rules_without(&["+evalsha"]), false).await;
    let client = Client::connect(&servers.url())
        .await
        .expect("connect (the handshake needs no rule)");
    // An eager grant is a script (a lazy one is a plain SET, which this user may send).
    match client.lock("noperm").fenced().acquire().await {
        Err(LockError::Store(StoreError::Refused {
            kind: RefusedKind::NoPermission,
            message,
            ..
        })) => eprintln!("without +evalsha, acquire: NoPermission: {message}"),
        other => panic!("acquire without +evalsha: expected NoPermission, got {other:?}"),
    }
    let limiter = client
        .rate_limiter(Policy::gcra("noperm", Rate::per_second(3).unwrap()).unwrap())
        .build()
        .expect("valid limiter");
    match limiter.check("subject").await {
        Err(RateLimitError::Store(StoreError::Refused {
            kind: RefusedKind::NoPermission,
            ..
        })) => {}
        other => panic!("check without +evalsha: expected NoPermission, got {other:?}"),
    }
}

/// A command refused inside a script (here the acquire script's `GET`, which it calls when
/// the name is already held) is `NoPermission` too, not a script error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_refused_inside_a_script_is_no_permission() {
    let servers = AclServers::start(&rules_without(&["+get"]), false).await;
    let client = Client::connect(&servers.url()).await.expect("connect");
    // A free name is granted by `SET NX` alone; the second attempt finds it held and reads it.
    let _held = client
        .lock("noperm-in-script")
        .acquire()
        .await
        .expect("a free name needs no GET");
    match client.lock("noperm-in-script").acquire().await {
        Err(LockError::Store(StoreError::Refused {
            kind: RefusedKind::NoPermission,
            message,
            ..
        })) => eprintln!("without +get, acquire: NoPermission: {message}"),
        other => panic!("acquire without +get: expected NoPermission, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_limited_to_another_prefix_gets_no_permission_on_the_keys() {
    let rules: Vec<String> = library_acl_rules(PASSWORD, "other");
    let servers = AclServers::start(&rules, false).await;
    let client = Client::connect(&servers.url()).await.expect("connect");
    match client.lock("foreign").acquire().await {
        Err(LockError::Store(StoreError::Refused {
            kind: RefusedKind::NoPermission,
            message,
            ..
        })) => eprintln!("keys outside ~other:*: NoPermission: {message}"),
        other => panic!("acquire under a foreign prefix: expected NoPermission, got {other:?}"),
    }
    // The same user with its own prefix is fine.
    let own = Client::builder()
        .prefix("other")
        .connect(&servers.url())
        .await
        .expect("connect");
    let lease = own
        .lock("mine")
        .acquire()
        .await
        .expect("acquire under ~other:*");
    lease.release().await.expect("release");
}

/// Behind Sentinel, redis-rs checks the named primary's `ROLE` (or `INFO replication`) as the
/// library user: [`LIBRARY_ACL_SENTINEL_RULES`] on top of the single-primary rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_sentinel_the_user_also_needs_role() {
    async fn connect(setup: &SentinelSetup) -> Result<Client, StoreError> {
        Client::builder()
            .primary_auth(Some(USER), PASSWORD)
            .response_timeout(Duration::from_secs(1))
            .connect_sentinel(setup.master_name(), setup.sentinel_urls())
            .await
    }
    let setup = SentinelSetup::builder()
        .library_user(USER, PASSWORD, PREFIX)
        .start();
    let client = connect(&setup)
        .await
        .expect("connect through the sentinels");
    let lease = client
        .lock("behind-sentinel")
        .acquire()
        .await
        .expect("acquire");
    lease.release().await.expect("release");
    let mut admin = setup.primary().await.conn().await;
    assert_eq!(acl_denials(&mut admin).await, Vec::<String>::new());
    drop(setup);

    // Without ROLE and INFO, the lookup cannot confirm the primary.
    let mut values: Vec<String> = vec![USER.to_owned()];
    values.extend(rules_without(&["+info"]));
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let setup = SentinelSetup::builder().config("user", &values).start();
    match connect(&setup).await {
        Err(StoreError::Refused {
            kind: RefusedKind::NoPermission,
            message,
            ..
        }) => eprintln!("behind Sentinel without +role/+info: NoPermission: {message}"),
        other => panic!(
            "connect_sentinel without +role: expected NoPermission, got {:?}",
            other.map(|_| ())
        ),
    }
}

/// The README's `ACL SETUSER` example grants exactly the rules these tests prove needed
/// (required, optional and Sentinel's), so the documentation cannot drift from them.
#[test]
fn the_readme_acl_example_lists_exactly_the_tested_rules() {
    use crate::support::server::LIBRARY_ACL_SENTINEL_RULES;
    let readme = include_str!("../../src/guide/deployment.md");
    let start = readme
        .find("ACL SETUSER app")
        .expect("the README's ACL example");
    let block = &readme[start..start + readme[start..].find("```").expect("end of the block")];
    let documented: BTreeSet<&str> = block
        .split_whitespace()
        .filter(|word| word.starts_with('+'))
        .collect();
    let tested: BTreeSet<&str> = LIBRARY_ACL_RULES
        .iter()
        .chain(LIBRARY_ACL_OPTIONAL_RULES)
        .chain(LIBRARY_ACL_SENTINEL_RULES)
        .copied()
        .collect();
    assert_eq!(
        documented, tested,
        "README.md's ACL example vs the tested rules"
    );
    for pattern in ["~distlock:*", "&distlock:*", "-@all"] {
        assert!(
            block.contains(pattern),
            "README.md's ACL example lacks {pattern}"
        );
    }
}
