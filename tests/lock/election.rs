//! Leader election (issue 27 §1): terms, the leader record and its staleness check, resign's
//! hand-over, followers' stream, bad input; on Redis and in memory (on tokio's paused clock),
//! and 4 OS processes campaigning while the leader is SIGKILLed and SIGSTOPped.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::{Client, Election, Leader, LockError, LockState, ReleaseOutcome};
use futures_util::StreamExt as _;
use tokio::time::Instant;

use crate::support::RedisServer;
use crate::support::child::{self, ChildProcess, say};
use crate::support::election::until_a_campaigner_waits;
use crate::support::fixture::{Fixture, connect, on_both_stores};
use crate::support::server::resource_conn;

on_both_stores!(
    paused_memory: terms_increase_and_the_leader_is_named,
    resign_hands_over_to_a_waiting_campaigner_well_before_the_ttl,
    a_record_whose_lease_lost_the_lock_is_never_reported,
    followers_observe_each_new_leader,
    run_drops_the_body_when_the_leadership_is_lost,
    bad_input_is_a_typed_error,
);

fn election(client: &Client, name: &str, ttl: Duration) -> Election {
    client
        .election(name)
        .ttl(ttl)
        .build()
        .expect("valid election")
}

/// The identity the lock of election `name` names as its holder, if it is held.
async fn lock_holder(client: &Client, name: &str) -> Option<String> {
    match client.lock_state(name).await.expect("lock_state") {
        LockState::Held { holder, .. } => Some(holder.expect("a holder").identity),
        _ => None,
    }
}

/// The record key of election `name` under the default prefix.
fn record_key(name: &str) -> String {
    format!("distlock:leader:{{{name}}}")
}

async fn terms_increase_and_the_leader_is_named(fx: Fixture) {
    let e = election(&fx.client, "terms", Duration::from_secs(5));
    assert_eq!(e.leader().await.expect("leader"), None, "nobody leads yet");
    let a = e.campaign("node-a").await.expect("campaign");
    assert_eq!(
        a.term(),
        a.fence().await.expect("fence"),
        "the term is the lease's fence"
    );
    assert_eq!(a.identity(), "node-a");
    let seen = e.leader().await.expect("leader").expect("a leader");
    assert_eq!((seen.term, seen.identity.as_str()), (a.term(), "node-a"));
    let first = a.term();
    assert_eq!(a.resign().await.expect("resign"), ReleaseOutcome::Released);
    assert_eq!(e.leader().await.expect("leader"), None, "resigned");
    assert_eq!(
        fx.client
            .__inspect()
            .get(&record_key("terms"))
            .await
            .expect("get"),
        None,
        "resign deletes the record"
    );
    let b = e.campaign("node-b").await.expect("campaign");
    assert!(b.term() > first, "terms strictly increase");
    let seen = e.leader().await.expect("leader").expect("a leader");
    assert_eq!((seen.term, seen.identity.as_str()), (b.term(), "node-b"));
    // The election is the lock of the same name: operators see it held, by the candidate.
    assert_eq!(
        lock_holder(&fx.client, "terms").await.as_deref(),
        Some("node-b")
    );
    b.resign().await.expect("resign");
}

async fn resign_hands_over_to_a_waiting_campaigner_well_before_the_ttl(fx: Fixture) {
    const TTL: Duration = Duration::from_secs(30);
    let leader = election(&fx.client, "handover", TTL)
        .campaign("first")
        .await
        .expect("campaign");
    let other = fx.another_client().await;
    let waiting = tokio::spawn(async move {
        let leadership = election(&other, "handover", TTL)
            .campaign("second")
            .await
            .expect("campaign");
        (Instant::now(), leadership)
    });
    // Let the campaigner find the lock busy and go to sleep on it.
    until_a_campaigner_waits(&fx.client, "handover").await;
    assert!(!waiting.is_finished(), "the second campaigner waits");
    let resigned_at = Instant::now();
    let first_term = leader.term();
    leader.resign().await.expect("resign");
    let (elected_at, second) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting campaigner was elected within 10 s of the resign (ttl 30 s)")
        .expect("campaigner");
    let handover = elected_at - resigned_at;
    println!(
        "election hand-over after resign: {:.1} ms (ttl {TTL:?})",
        handover.as_secs_f64() * 1000.0
    );
    assert!(second.term() > first_term);
    assert!(
        handover < Duration::from_secs(5),
        "the waiting campaigner was elected {handover:?} after the resign: not woken"
    );
    let seen = election(&fx.client, "handover", TTL)
        .leader()
        .await
        .expect("leader");
    assert_eq!(seen.map(|l| l.identity), Some("second".to_owned()));
    second.resign().await.expect("resign");
}

async fn a_record_whose_lease_lost_the_lock_is_never_reported(fx: Fixture) {
    const TTL: Duration = Duration::from_secs(3);
    let e = election(&fx.client, "stale", TTL);
    let old = e.campaign("old").await.expect("campaign");
    let old_term = old.term();
    // The lock is taken from under the leader (as if it had crashed and its lease expired):
    // its record is still there, and must not be reported.
    assert!(fx.client.force_unlock("stale").await.expect("force_unlock"));
    assert!(
        fx.client
            .__inspect()
            .get(&record_key("stale"))
            .await
            .expect("get")
            .is_some(),
        "the stale record is still stored"
    );
    assert_eq!(
        e.leader().await.expect("leader"),
        None,
        "a record whose lease no longer holds the lock names nobody"
    );
    // Someone else takes the lock as a plain lock: still nobody is named.
    let other = fx.another_client().await;
    let plain = other.lock("stale").acquire().await.expect("acquire");
    assert_eq!(e.leader().await.expect("leader"), None);
    plain.release().await.expect("release");
    let new = election(&other, "stale", TTL)
        .campaign("new")
        .await
        .expect("campaign");
    assert!(new.term() > old_term);
    let seen = e.leader().await.expect("leader").expect("a leader");
    assert_eq!((seen.term, seen.identity.as_str()), (new.term(), "new"));
    // The old leader learns at its next renewal (within a third of the ttl, plus margin).
    tokio::time::timeout(TTL, old.lost())
        .await
        .expect("the old leader learns it lost the lock");
    // Its record rewrites are refused now: the new leader stays named.
    tokio::time::sleep(TTL / 2).await;
    let seen = e.leader().await.expect("leader").expect("a leader");
    assert_eq!(seen.identity, "new");
    drop(old);
    new.resign().await.expect("resign");
}

async fn followers_observe_each_new_leader(fx: Fixture) {
    // On the paused clock a long ttl: a follower that missed the wake-up would only look again
    // observe_bound (20 s of virtual time) later, so seeing the leader sooner proves it was woken.
    let ttl = if fx.paused() {
        Duration::from_secs(60)
    } else {
        Duration::from_secs(3)
    };
    let follower_client = fx.another_client().await;
    let follower = election(&follower_client, "observed", ttl);
    let bound = follower.observe_bound();
    // The follower polls its stream in a task of its own from the start, so that it is already
    // waiting (between two looks) when each new leader is elected.
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<(Leader, Instant)>();
    let mut stream = Box::pin(follower.observe());
    let watching = tokio::spawn(async move {
        while let Some(leader) = stream.next().await {
            if seen_tx.send((leader, Instant::now())).is_err() {
                return;
            }
        }
    });
    let e = election(&fx.client, "observed", ttl);
    // Generous: the library promises observe_bound after the record is written, even with no
    // wake-up.
    let within = bound + Duration::from_secs(5);
    let mut terms = Vec::new();
    for identity in ["one", "two", "three"] {
        if fx.paused() {
            // Half-way through the follower's wait: without a wake-up its next look is
            // bound/2 away.
            tokio::time::sleep(bound / 2).await;
        }
        let leadership = e.campaign(identity).await.expect("campaign");
        let written = Instant::now();
        let (seen, seen_at): (Leader, Instant) = tokio::time::timeout(within, seen_rx.recv())
            .await
            .expect("the follower saw the new leader")
            .expect("the follower's stream never ends");
        let after = seen_at.saturating_duration_since(written);
        println!(
            "follower saw term {} after {:.1} ms",
            seen.term,
            after.as_secs_f64() * 1000.0
        );
        assert_eq!(
            (seen.term, seen.identity.as_str()),
            (leadership.term(), identity)
        );
        if fx.paused() {
            // Virtual time: the wake-up delivers it before any timer of the follower fires.
            assert!(
                after < bound / 4,
                "the waiting follower saw the leader {after:?} after its record was written, not \
                 woken (observe_bound {bound:?})"
            );
        }
        terms.push(seen.term);
        leadership.resign().await.expect("resign");
    }
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
    watching.abort();
}

async fn run_drops_the_body_when_the_leadership_is_lost(fx: Fixture) {
    const TTL: Duration = Duration::from_secs(3);
    let e = election(&fx.client, "run", TTL);
    let value = e
        .campaign("runner")
        .await
        .expect("campaign")
        .run(|lease| async move { lease.fence().await.expect("fence") })
        .await
        .expect("run");
    assert!(value > 0);
    assert_eq!(
        e.leader().await.expect("leader"),
        None,
        "run resigns at the end"
    );

    let leadership = e.campaign("runner").await.expect("campaign");
    let (entered, mut entered_rx) = tokio::sync::oneshot::channel();
    let run = tokio::spawn(leadership.run(|_| async move {
        let _ = entered.send(());
        std::future::pending::<()>().await;
    }));
    (&mut entered_rx).await.expect("the body started");
    assert!(fx.client.force_unlock("run").await.expect("force_unlock"));
    let outcome = tokio::time::timeout(TTL * 2, run)
        .await
        .expect("the body was dropped")
        .expect("task");
    assert!(
        matches!(outcome, Err(LockError::LeaseLost { .. })),
        "{outcome:?}"
    );
}

async fn bad_input_is_a_typed_error(fx: Fixture) {
    assert!(matches!(
        fx.client.election("").build(),
        Err(LockError::InvalidName(_))
    ));
    assert!(matches!(
        fx.client.election("x").ttl(Duration::ZERO).build(),
        Err(LockError::InvalidConfig { .. })
    ));
    assert!(matches!(
        fx.client.election("x").ttl(Duration::MAX).build(),
        Err(LockError::InvalidConfig { .. })
    ));
    let e = election(&fx.client, "x", Duration::from_secs(1));
    assert!(matches!(
        e.campaign("").await,
        Err(LockError::InvalidConfig { .. })
    ));
    assert!(matches!(
        e.campaign("x".repeat(distlock::MAX_IDENTITY_LEN + 1)).await,
        Err(LockError::InvalidConfig { .. })
    ));
    // Any text is an identity, newlines included.
    let odd = e.campaign("a\nb\n{c}").await.expect("campaign");
    let seen = e.leader().await.expect("leader").expect("a leader");
    assert_eq!(seen.identity, "a\nb\n{c}");
    // Not one a lock's holder may carry: the lock keeps naming the client.
    let client_identity = fx.client.identity().to_owned();
    assert_eq!(
        lock_holder(&fx.client, "x").await.as_deref(),
        Some(client_identity.as_str())
    );
    odd.resign().await.expect("resign");
}

// ---- 4 OS processes campaigning against one redis-server (TESTPLAN 47). ----

/// This binary's entry test for the campaigning children.
const ENTRY: &str = "election::child_entry";
/// The children's election.
const NAME: &str = "processes";
/// The children's lease ttl: short, so that a killed or frozen leader is replaced quickly.
const CHILD_TTL: Duration = Duration::from_secs(2);
/// How long a leader holds in the `rotate` mode before it resigns.
const ROTATE_HOLD: Duration = Duration::from_millis(400);
/// Where the children write what they did (a list), and read the mode the parent sets.
const LOG: &str = "election:log";
const MODE: &str = "election:mode";
/// Slack for a busy machine on top of every bound the library promises.
const MARGIN: Duration = Duration::from_secs(3);

fn wall_us() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after the epoch")
            .as_micros(),
    )
    .expect("fits")
}

async fn log_line(conn: &mut redis::aio::MultiplexedConnection, line: String) {
    use redis::AsyncCommands as _;
    let _: () = conn.rpush(LOG, line).await.expect("log");
}

/// Entry point of the child processes; does nothing unless the parent set a role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of the tests in this module"]
async fn child_entry() {
    let Some((role, url)) = child::role() else {
        return;
    };
    if role == "lead-once" {
        child_lead_once(&url).await;
    } else {
        child_campaign(&role, &url).await;
    }
}

/// Campaigns once and holds the leadership until killed.
async fn child_lead_once(url: &str) {
    let client = connect(url).await;
    let leadership = election(&client, "crashed", CHILD_TTL)
        .campaign("doomed")
        .await
        .expect("campaign");
    say(&format!("LEADER {}", leadership.term()));
    tokio::time::sleep(Duration::from_secs(120)).await;
    drop(leadership);
}

/// A leader process is SIGKILLed: while its lease lives it is still named (it still holds the
/// lock); once the lock has expired, its record (kept twice as long) is never named; the next
/// leader is, with a higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leaders_record_is_not_reported_once_its_lease_expired() {
    let server = RedisServer::start();
    let child = ChildProcess::spawn(ENTRY, "lead-once", &server.url());
    let line = child.expect_line("LEADER", Duration::from_secs(60));
    let term: u64 = line["LEADER ".len()..].parse().expect("term");
    let client = connect(&server.url()).await;
    let e = election(&client, "crashed", CHILD_TTL);
    let named = e
        .leader()
        .await
        .expect("leader")
        .expect("the live leader is named");
    assert_eq!((named.term, named.identity.as_str()), (term, "doomed"));
    child.signal(libc::SIGKILL);
    child.wait_exit(Duration::from_secs(10));
    // The lock expires within its ttl; the record outlives it.
    let deadline = Instant::now() + CHILD_TTL + MARGIN;
    while client
        .__inspect()
        .get(&client.__inspect().lock_key("crashed").expect("key"))
        .await
        .expect("get")
        .is_some()
    {
        assert!(
            Instant::now() < deadline,
            "the dead leader's lock did not expire"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        e.leader().await.expect("leader"),
        None,
        "the dead leader is named after its lease expired"
    );
    // Read after the answer: the record was there when `leader()` looked, so `None` came
    // from the check against the lock, not from a missing record.
    let record = client
        .__inspect()
        .get(&record_key("crashed"))
        .await
        .expect("get");
    assert!(
        record.is_some(),
        "the record outlives the lock (it has twice its ttl)"
    );
    let next = e.campaign("successor").await.expect("campaign");
    assert!(next.term() > term);
    let named = e.leader().await.expect("leader").expect("a leader");
    assert_eq!(
        (named.term, named.identity.as_str()),
        (next.term(), "successor")
    );
    next.resign().await.expect("resign");
}

/// Campaigns, holds (rotating or not, as the parent's mode says) and follows, logging every
/// step with the wall clock (shared by the processes of one machine).
async fn child_campaign(identity: &str, url: &str) {
    use redis::AsyncCommands as _;
    let client = connect(url).await;
    let e = election(&client, NAME, CHILD_TTL);
    let mut conn = resource_conn(url).await;
    // The mode, polled into a watch channel.
    let (mode_tx, mut mode) = tokio::sync::watch::channel(String::from("rotate"));
    let mut mode_conn = resource_conn(url).await;
    tokio::spawn(async move {
        loop {
            let current: Option<String> = mode_conn.get(MODE).await.expect("mode");
            if mode_tx.send(current.unwrap_or_default()).is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    // The follower.
    let mut follow_conn = resource_conn(url).await;
    let follower = e.clone();
    let me = identity.to_owned();
    tokio::spawn(async move {
        let mut leaders = Box::pin(follower.observe());
        while let Some(leader) = leaders.next().await {
            let line = format!("SAW {me} {} {} {}", leader.term, leader.identity, wall_us());
            log_line(&mut follow_conn, line).await;
        }
    });
    say("READY");
    loop {
        if *mode.borrow() == "stop" {
            break;
        }
        let leadership = tokio::select! {
            won = e.campaign(identity) => won.expect("campaign"),
            () = async { let _ = mode.wait_for(|m| m == "stop").await; } => break,
        };
        let term = leadership.term();
        let start = wall_us();
        log_line(&mut conn, format!("LEADER {identity} {term} {start}")).await;
        loop {
            // The local deadline as this process knows it now: the wall clock read first, so
            // that a pause between the two reads makes it earlier, never later. Asked whether
            // it is lost only after: a pause just after that question cannot log a deadline
            // read after the pause.
            let wall = wall_us();
            let valid = leadership.valid_for();
            if leadership.is_lost() || valid.is_zero() {
                log_line(&mut conn, format!("LOST {identity} {term}")).await;
                break;
            }
            let until = wall + micros(valid);
            log_line(&mut conn, format!("VALID {identity} {term} {until}")).await;
            let current = mode.borrow().clone();
            let rotate = current == "rotate" && start + micros(ROTATE_HOLD) <= wall_us();
            if rotate || current == "stop" {
                log_line(&mut conn, format!("RESIGN {identity} {term} {}", wall_us())).await;
                leadership.resign().await.expect("resign");
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Let the follower see the last change.
    tokio::time::sleep(Duration::from_millis(300)).await;
    say("DONE");
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).expect("fits")
}

/// What one leadership was, from the children's lines.
#[derive(Debug, Default, Clone)]
struct Term {
    identity: String,
    start: u64,
    /// The latest local deadline its holder logged.
    valid_until: Option<u64>,
    resigned_at: Option<u64>,
    lost: bool,
}

impl Term {
    /// When the holder stopped being entitled to act: at its resign, else at the latest
    /// deadline it knew of.
    fn end(&self) -> u64 {
        self.resigned_at.or(self.valid_until).unwrap_or(self.start)
    }
}

struct History {
    terms: BTreeMap<u64, Term>,
    /// Per follower, what it saw in order: (term, identity, when).
    saw: HashMap<String, Vec<(u64, String, u64)>>,
}

fn parse(lines: &[String]) -> History {
    let mut terms: BTreeMap<u64, Term> = BTreeMap::new();
    let mut saw: HashMap<String, Vec<(u64, String, u64)>> = HashMap::new();
    let number = |s: &str| s.parse::<u64>().unwrap_or_else(|_| panic!("a number: {s}"));
    for line in lines {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts.as_slice() {
            ["LEADER", who, term, start] => {
                let previous = terms.insert(
                    number(term),
                    Term {
                        identity: (*who).to_owned(),
                        start: number(start),
                        ..Term::default()
                    },
                );
                assert!(
                    previous.is_none(),
                    "two leaders for term {term}: {previous:?} and {who}"
                );
            }
            ["VALID", who, term, until] => {
                let t = terms.get_mut(&number(term)).expect("VALID after LEADER");
                assert_eq!(t.identity, *who);
                t.valid_until = t.valid_until.max(Some(number(until)));
            }
            ["RESIGN", _, term, at] => {
                terms
                    .get_mut(&number(term))
                    .expect("RESIGN after LEADER")
                    .resigned_at = Some(number(at));
            }
            ["LOST", _, term] => {
                terms
                    .get_mut(&number(term))
                    .expect("LOST after LEADER")
                    .lost = true
            }
            ["SAW", who, term, identity, at] => saw.entry((*who).to_owned()).or_default().push((
                number(term),
                (*identity).to_owned(),
                number(at),
            )),
            _ => panic!("unexpected log line {line:?}"),
        }
    }
    History { terms, saw }
}

async fn read_log(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    use redis::AsyncCommands as _;
    conn.lrange(LOG, 0, -1).await.expect("LRANGE")
}

/// Waits (bounded) until `e.leader()` names a leader with a term above `above`.
async fn leader_above(e: &Election, above: u64, within: Duration) -> (Leader, Instant) {
    let deadline = Instant::now() + within;
    loop {
        if let Some(leader) = e.leader().await.expect("leader")
            && leader.term > above
        {
            return (leader, Instant::now());
        }
        assert!(
            Instant::now() < deadline,
            "no leader above term {above} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (bounded) until `leader`'s process has logged that it leads.
async fn logged_leader(
    conn: &mut redis::aio::MultiplexedConnection,
    leader: &Leader,
    within: Duration,
) {
    let prefix = format!("LEADER {} {} ", leader.identity, leader.term);
    let deadline = Instant::now() + within;
    while !read_log(conn).await.iter().any(|l| l.starts_with(&prefix)) {
        assert!(
            Instant::now() < deadline,
            "{} never logged term {} within {within:?}",
            leader.identity,
            leader.term
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// TESTPLAN 47: 4 processes campaign; leaders rotate by resigning, then the leader is
/// SIGKILLed, then the next one SIGSTOPped past its ttl. One leader per term, terms strictly
/// increasing in the order leaders were elected, no two leaderships overlap by their holders'
/// local deadlines, a killed leader's record is never reported once the term moved on, and
/// every follower that ran throughout saw every leadership that lasted longer than the
/// observe bound, within that bound (plus a margin for a busy machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_elect_one_leader_per_term_through_kills_and_pauses() {
    use redis::AsyncCommands as _;
    let server = RedisServer::start();
    let url = server.url();
    let mut conn = resource_conn(&url).await;
    let _: () = conn.set(MODE, "rotate").await.expect("mode");
    let roles = ["node-0", "node-1", "node-2", "node-3"];
    let children: Vec<ChildProcess> = roles
        .iter()
        .map(|role| ChildProcess::spawn(ENTRY, role, &url))
        .collect();
    for child in &children {
        child.expect_line("READY", Duration::from_secs(60));
    }
    let client = connect(&url).await;
    let e = election(&client, NAME, CHILD_TTL);
    let bound = e.observe_bound();

    // Leaders rotate by resigning.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let leaders = read_log(&mut conn)
            .await
            .iter()
            .filter(|l| l.starts_with("LEADER"))
            .count();
        if leaders >= 6 {
            break;
        }
        assert!(Instant::now() < deadline, "only {leaders} leaders in 90 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The leader holds; kill it.
    let _: () = conn.set(MODE, "hold").await.expect("mode");
    tokio::time::sleep(ROTATE_HOLD + Duration::from_millis(500)).await;
    leader_above(&e, 0, Duration::from_secs(30)).await;
    // Long enough to be a leadership every follower must have seen.
    tokio::time::sleep(bound + MARGIN + Duration::from_millis(500)).await;
    let (killed, _) = leader_above(&e, 0, Duration::from_secs(30)).await;
    logged_leader(&mut conn, &killed, Duration::from_secs(60)).await;
    let index = |identity: &str| roles.iter().position(|r| *r == identity).expect("a child");
    children[index(&killed.identity)].signal(libc::SIGKILL);
    let killed_at = Instant::now();
    let (after_kill, seen_at) = leader_above(&e, killed.term, Duration::from_secs(60)).await;
    // Its record is written before its process logs that it leads; the freeze below must
    // come after that line, or the line would carry the time it was resumed.
    logged_leader(&mut conn, &after_kill, Duration::from_secs(60)).await;
    println!(
        "leader {} (term {}) SIGKILLed: {} (term {}) named {:.0} ms later (ttl {CHILD_TTL:?})",
        killed.identity,
        killed.term,
        after_kill.identity,
        after_kill.term,
        (seen_at - killed_at).as_secs_f64() * 1000.0
    );
    // The dead leader's record is still stored until it expires, and never reported.
    for _ in 0..5 {
        let now = e.leader().await.expect("leader").expect("a leader");
        assert_ne!(now.identity, killed.identity, "the killed leader reported");
        assert!(now.term > killed.term);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Freeze the next leader past its ttl.
    let frozen = after_kill;
    let frozen_child = &children[index(&frozen.identity)];
    frozen_child.signal(libc::SIGSTOP);
    let stopped_at = Instant::now();
    let (after_stop, seen_at) = leader_above(&e, frozen.term, Duration::from_secs(60)).await;
    println!(
        "leader {} (term {}) SIGSTOPped: {} (term {}) named {:.0} ms later",
        frozen.identity,
        frozen.term,
        after_stop.identity,
        after_stop.term,
        (seen_at - stopped_at).as_secs_f64() * 1000.0
    );
    tokio::time::sleep(CHILD_TTL).await;
    frozen_child.signal(libc::SIGCONT);
    // The leader after the freeze holds long enough to be seen by every follower, the
    // resumed one included.
    tokio::time::sleep(bound + MARGIN).await;

    // A few more rotations, with the resumed child back in, then stop.
    let _: () = conn.set(MODE, "rotate").await.expect("mode");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _: () = conn.set(MODE, "stop").await.expect("mode");
    for (child, role) in children.into_iter().zip(roles) {
        if role == killed.identity {
            continue;
        }
        child.expect_line("DONE", Duration::from_secs(60));
        child.wait_success(Duration::from_secs(10));
    }

    let lines = read_log(&mut conn).await;
    let history = parse(&lines);
    let terms: Vec<(&u64, &Term)> = history.terms.iter().collect();
    assert!(terms.len() >= 9, "{} leaderships", terms.len());
    // Terms strictly increase in the order the leaders were elected.
    let mut by_start = terms.clone();
    by_start.sort_by_key(|(_, t)| t.start);
    assert!(
        by_start.windows(2).all(|w| w[0].0 < w[1].0),
        "terms out of order: {by_start:?}"
    );
    // No two leaderships overlap by their holders' local deadlines.
    for w in by_start.windows(2) {
        let ((a_term, a), (b_term, b)) = (w[0], w[1]);
        assert!(
            a.end() <= b.start,
            "term {a_term} ({}) was valid until {} but term {b_term} ({}) started at {}",
            a.identity,
            a.end(),
            b.identity,
            b.start
        );
    }
    // Hand-over between processes: from a resign to the next leader's election.
    let mut handovers: Vec<u64> = by_start
        .windows(2)
        .filter_map(|w| Some(w[1].1.start.saturating_sub(w[0].1.resigned_at?)))
        .collect();
    handovers.sort_unstable();
    if let (Some(median), Some(max)) = (handovers.get(handovers.len() / 2), handovers.last()) {
        println!(
            "hand-over between processes after a resign: median {:.1} ms, max {:.1} ms over {}",
            *median as f64 / 1000.0,
            *max as f64 / 1000.0,
            handovers.len()
        );
    }
    assert!(
        history.terms[&frozen.term].lost,
        "the frozen leader learned it lost term {}",
        frozen.term
    );
    // Followers: each saw leaders in increasing terms, as elected.
    for (who, seen) in &history.saw {
        assert!(
            seen.windows(2).all(|w| w[0].0 < w[1].0),
            "{who} saw terms out of order: {seen:?}"
        );
        for (term, identity, _) in seen {
            assert_eq!(
                history.terms.get(term).map(|t| t.identity.as_str()),
                Some(identity.as_str()),
                "{who} saw term {term} led by {identity}"
            );
        }
    }
    // Every follower that ran throughout saw every leadership that lasted longer than the
    // bound (plus margin), within it.
    let mut delays = Vec::new();
    let mut short_seen = (0, 0);
    for role in roles {
        if role == killed.identity || role == frozen.identity {
            continue;
        }
        let seen = &history.saw[role];
        for (term, t) in &history.terms {
            let at = seen
                .iter()
                .find(|(s, _, _)| s == term)
                .map(|(_, _, at)| *at);
            let lasted = t.end().saturating_sub(t.start);
            if lasted < micros(bound + MARGIN) {
                short_seen.1 += 1;
                short_seen.0 += usize::from(at.is_some());
                continue;
            }
            let at = at.unwrap_or_else(|| panic!("{role} never saw term {term} ({t:?})"));
            let delay = at.saturating_sub(t.start);
            assert!(
                delay <= micros(bound + MARGIN),
                "{role} saw term {term} {delay} µs after it started"
            );
            delays.push(delay);
        }
    }
    delays.sort_unstable();
    if !delays.is_empty() {
        println!(
            "followers saw long leaderships after: median {:.1} ms, max {:.1} ms (bound {bound:?}); \
             short leaderships (< bound + margin) seen: {} of {}",
            delays[delays.len() / 2] as f64 / 1000.0,
            delays[delays.len() - 1] as f64 / 1000.0,
            short_seen.0,
            short_seen.1
        );
    }
    assert!(
        delays.len() >= 2,
        "too few long leaderships checked: {delays:?}"
    );
    println!("{} leaderships, log of {} lines", terms.len(), lines.len());
}
