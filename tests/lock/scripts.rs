//! The lock scripts' contract, called directly on a real server: the cases the client rarely
//! produces on its own (a fence key ahead of the clock, several fence keys in one call, a
//! retried grant, a waiter's mark, a starving waiter's reservation), checked item by item.

use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;

use crate::support::server::RedisServer;

const ACQUIRE: &str = concat!(
    include_str!("../../src/store/scripts/fence.lua"),
    include_str!("../../src/store/scripts/acquire.lua"),
);
const HANDOFF: &str = concat!(
    "local PUBLISH = 'PUBLISH'\n",
    include_str!("../../src/store/scripts/fence.lua"),
    include_str!("../../src/store/scripts/handoff.lua"),
);
const RELEASE: &str = concat!(
    "local PUBLISH = 'PUBLISH'\n",
    include_str!("../../src/store/scripts/release.lua")
);
const RENEW: &str = include_str!("../../src/store/scripts/renew.lua");
const MINT: &str = concat!(
    include_str!("../../src/store/scripts/fence.lua"),
    include_str!("../../src/store/scripts/mint.lua"),
);
const UNMARK: &str = include_str!("../../src/store/scripts/unmark.lua");

/// `(lock key, fence key, token, ttl ms)` per item, by a caller that does not wait, each
/// minting its fence with the grant (an eager lease).
async fn acquire(conn: &mut MultiplexedConnection, items: &[(&str, &str, &str, u64)]) -> Vec<i64> {
    acquire_as(conn, items, "0").await
}

/// As `acquire`, every item with the caller's `waits` argument.
async fn acquire_as(
    conn: &mut MultiplexedConnection,
    items: &[(&str, &str, &str, u64)],
    waits: &str,
) -> Vec<i64> {
    acquire_minting(conn, items, waits, "1").await
}

/// As `acquire_as`, every item with `mint` ('1' eager, '0' lazy).
async fn acquire_minting(
    conn: &mut MultiplexedConnection,
    items: &[(&str, &str, &str, u64)],
    waits: &str,
    mint: &str,
) -> Vec<i64> {
    let script = redis::Script::new(ACQUIRE);
    let mut call = script.prepare_invoke();
    for (lock, fence, _, _) in items {
        call.key(*lock).key(*fence);
    }
    for (_, _, token, ttl) in items {
        call.arg(*token).arg(*ttl).arg(waits).arg(mint);
    }
    if items.len() == 1 {
        vec![call.invoke_async(conn).await.expect("acquire")]
    } else {
        call.invoke_async(conn).await.expect("acquire")
    }
}

async fn server_micros(conn: &mut MultiplexedConnection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query_async(conn).await.expect("TIME");
    s * 1_000_000 + us
}

async fn get(conn: &mut MultiplexedConnection, key: &str) -> Option<i64> {
    redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("GET")
}

async fn set(conn: &mut MultiplexedConnection, key: &str, value: i64) {
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(conn)
        .await
        .expect("SET");
}

/// Without a fence key the fence is the server clock; with one behind the clock, the clock
/// still wins; the key always ends holding the last fence handed out.
#[tokio::test]
async fn a_fence_is_the_clock_unless_the_key_is_ahead_of_it() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;

    let before = server_micros(&mut conn).await;
    let fence = acquire(&mut conn, &[("p:lock:{a}", "p:fence", "t1", 30_000)]).await[0];
    let after = server_micros(&mut conn).await;
    assert!(
        (before..=after).contains(&fence),
        "fence {fence} is not the clock ({before}..={after})"
    );
    assert_eq!(get(&mut conn, "p:fence").await, Some(fence));

    // A key far behind the clock (an old, restored value): the clock wins again.
    set(&mut conn, "p:fence", 5).await;
    let fence = acquire(&mut conn, &[("p:lock:{b}", "p:fence", "t2", 30_000)]).await[0];
    assert!(
        fence >= after,
        "fence {fence} fell behind the clock {after}"
    );
    assert_eq!(get(&mut conn, "p:fence").await, Some(fence));

    // A key ahead of the clock (grants in one microsecond, or the clock stepped back): the
    // next fence is one more than the key, and the key moves to it.
    let ahead = server_micros(&mut conn).await + 3_600_000_000;
    set(&mut conn, "p:fence", ahead).await;
    let fence = acquire(&mut conn, &[("p:lock:{c}", "p:fence", "t3", 30_000)]).await[0];
    assert_eq!(fence, ahead + 1);
    assert_eq!(get(&mut conn, "p:fence").await, Some(ahead + 1));
}

/// One call granting several locks under one key hands out consecutive fences, skips busy
/// items without using a number, and leaves the key at the last fence.
#[tokio::test]
async fn one_call_hands_out_consecutive_fences() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let held = acquire(&mut conn, &[("p:lock:{busy}", "p:fence", "other", 30_000)]).await[0];

    let replies = acquire(
        &mut conn,
        &[
            ("p:lock:{1}", "p:fence", "a", 30_000),
            ("p:lock:{busy}", "p:fence", "b", 30_000),
            ("p:lock:{2}", "p:fence", "c", 30_000),
            ("p:lock:{3}", "p:fence", "d", 30_000),
        ],
    )
    .await;
    assert_eq!(replies.len(), 4);
    assert!(replies[0] > held, "{replies:?} after {held}");
    assert!(
        (-30_002..=-29_001).contains(&replies[1]),
        "busy item, -(pttl + 2): {replies:?}"
    );
    assert_eq!(replies[2], replies[0] + 1);
    assert_eq!(replies[3], replies[0] + 2);
    assert_eq!(get(&mut conn, "p:fence").await, Some(replies[3]));
}

/// Items under different fence keys, interleaved: each key's fences increase in item order
/// and each key ends at its own last fence.
#[tokio::test]
async fn interleaved_fence_keys_each_keep_their_order() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let ahead = server_micros(&mut conn).await + 3_600_000_000;
    set(&mut conn, "p:fence", ahead).await;

    let replies = acquire(
        &mut conn,
        &[
            ("p:lock:{1}", "p:fence", "a", 30_000),
            ("q:lock:{1}", "q:fence", "b", 30_000),
            ("p:lock:{2}", "p:fence", "c", 30_000),
            ("q:lock:{2}", "q:fence", "d", 30_000),
            ("p:lock:{3}", "p:fence", "e", 30_000),
        ],
    )
    .await;
    assert_eq!(
        [replies[0], replies[2], replies[4]],
        [ahead + 1, ahead + 2, ahead + 3]
    );
    assert!(replies[3] > replies[1], "{replies:?}");
    assert!(
        replies[1] < ahead,
        "q's fences follow the clock: {replies:?}"
    );
    assert_eq!(get(&mut conn, "p:fence").await, Some(ahead + 3));
    assert_eq!(get(&mut conn, "q:fence").await, Some(replies[3]));
}

/// A retried grant (the key already holds our token) resets the ttl and gets a new, higher
/// fence; a busy reply carries the holder's remaining ttl.
#[tokio::test]
async fn a_retried_grant_gets_a_higher_fence() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let first = acquire(&mut conn, &[("p:lock:{r}", "p:fence", "mine", 5_000)]).await[0];
    let again = acquire(&mut conn, &[("p:lock:{r}", "p:fence", "mine", 60_000)]).await[0];
    assert!(again > first, "{again} <= {first}");
    let pttl: i64 = redis::cmd("PTTL")
        .arg("p:lock:{r}")
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(pttl > 5_000, "the retry did not reset the ttl: {pttl}");

    let busy = acquire(&mut conn, &[("p:lock:{r}", "p:fence", "theirs", 60_000)]).await[0];
    assert!((-60_002..=-55_001).contains(&busy), "busy reply {busy}");
    assert_eq!(
        get(&mut conn, "p:fence").await,
        Some(again),
        "busy used a fence"
    );
}

/// Release answers one code per lock: a bare integer for one lock, an array for several.
#[tokio::test]
async fn release_answers_per_lock() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    acquire(&mut conn, &[("p:lock:{x}", "p:fence", "mine", 30_000)]).await;
    acquire(&mut conn, &[("p:lock:{y}", "p:fence", "theirs", 30_000)]).await;
    let script = redis::Script::new(RELEASE);

    let codes: Vec<i64> = script
        .key("p:lock:{x}")
        .key("p:lock:{y}")
        .key("p:lock:{z}")
        .arg("mine")
        .arg("p:released:{x}")
        .arg("mine")
        .arg("p:released:{y}")
        .arg("mine")
        .arg("p:released:{z}")
        .invoke_async(&mut conn)
        .await
        .expect("release");
    assert_eq!(codes, [1, -1, 0]);
    assert_eq!(get(&mut conn, "p:lock:{x}").await, None);

    let code: i64 = script
        .key("p:lock:{y}")
        .arg("theirs")
        .arg("p:released:{y}")
        .invoke_async(&mut conn)
        .await
        .expect("release");
    assert_eq!(code, 1);
}

/// A call that fails part way (here a later item's key holds a hash, so its GET is refused)
/// is not rolled back by Redis: whatever it wrote must leave the fence key no lower than the
/// fences earlier calls returned.
#[tokio::test]
async fn a_call_failing_part_way_never_lowers_the_fence_key() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let ahead = server_micros(&mut conn).await + 3_600_000_000;
    set(&mut conn, "p:fence", ahead).await;
    let () = redis::cmd("HSET")
        .arg("p:lock:{hash}")
        .arg("f")
        .arg("v")
        .query_async(&mut conn)
        .await
        .expect("HSET");

    let script = redis::Script::new(ACQUIRE);
    let failed: redis::RedisResult<Vec<i64>> = script
        .key("p:lock:{a}")
        .key("p:fence")
        .key("p:lock:{hash}")
        .key("p:fence")
        .arg("t")
        .arg(30_000)
        .arg("0")
        .arg("1")
        .arg("t")
        .arg(30_000)
        .arg("0")
        .arg("1")
        .invoke_async(&mut conn)
        .await;
    assert!(failed.is_err(), "{failed:?}");
    let key = get(&mut conn, "p:fence").await.expect("fence key");
    assert!(key >= ahead, "the fence key fell from {ahead} to {key}");
    let next = acquire(&mut conn, &[("p:lock:{b}", "p:fence", "t", 30_000)]).await[0];
    assert!(next > ahead, "fence {next} is not above {ahead}");
}

async fn release(conn: &mut MultiplexedConnection, lock: &str, token: &str, channel: &str) -> i64 {
    eval(conn, RELEASE, &[lock], &[token, channel], "release").await
}

/// Runs `script` on `conn` with `keys` and `args`, panicking with `what` if it errs.
async fn eval<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    script: &str,
    keys: &[&str],
    args: &[&str],
    what: &str,
) -> T {
    let script = redis::Script::new(script);
    let mut call = script.prepare_invoke();
    for key in keys {
        call.key(*key);
    }
    for arg in args {
        call.arg(*arg);
    }
    call.invoke_async(conn).await.expect(what)
}

async fn value(conn: &mut MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("GET")
}

/// Whether the release just made published on `CHANNEL`: a marker published after it comes
/// first if not (messages on one channel arrive in the order they were published).
async fn published(
    conn: &mut MultiplexedConnection,
    messages: &mut (impl futures_util::Stream<Item = redis::Msg> + Unpin),
) -> bool {
    let () = redis::cmd("PUBLISH")
        .arg(CHANNEL)
        .arg("marker")
        .query_async(conn)
        .await
        .expect("PUBLISH");
    let first = next_message(messages).await;
    if first == "marker" {
        return false;
    }
    assert_eq!(
        (first.as_str(), next_message(messages).await.as_str()),
        ("", "marker")
    );
    true
}

const LOCK: &str = "p:lock:{m}";
const CHANNEL: &str = "p:released:{m}";

/// The messages on `CHANNEL` of `server`, subscribed to before this returns.
async fn subscribed(
    server: &RedisServer,
) -> impl futures_util::Stream<Item = redis::Msg> + Unpin + use<> {
    let client = redis::Client::open(server.url()).expect("client");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub.subscribe(CHANNEL).await.expect("subscribe");
    pubsub.into_on_message()
}

/// A release publishes a wake-up only when a listening waiter marked the lock (or a waiter
/// was granted it while others of its client still wait). A marked lock is still its
/// holder's: a retried grant and a renewal recognise it, and keep the mark.
#[tokio::test]
async fn a_release_publishes_only_for_a_lock_a_waiter_marked() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let mut messages = subscribed(&server).await;
    // Nobody waited: no message.
    assert!(acquire(&mut conn, &[(LOCK, "p:fence", "h", 30_000)]).await[0] > 0);
    assert_eq!(release(&mut conn, LOCK, "h", CHANNEL).await, 1);
    assert!(
        !published(&mut conn, &mut messages).await,
        "a release nobody waited for published"
    );

    // A busy attempt by a caller that does not listen leaves no mark.
    acquire(&mut conn, &[(LOCK, "p:fence", "h", 30_000)]).await;
    assert!(acquire(&mut conn, &[(LOCK, "p:fence", "w", 30_000)]).await[0] < 0);
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("h"));
    assert_eq!(release(&mut conn, LOCK, "h", CHANNEL).await, 1);
    assert!(!published(&mut conn, &mut messages).await);

    // A listening waiter's busy attempt marks the lock once; the holder's retried grant and
    // renewal still recognise it as theirs and keep the mark; its release publishes.
    let first = acquire(&mut conn, &[(LOCK, "p:fence", "h", 30_000)]).await[0];
    for _ in 0..2 {
        assert!(acquire_as(&mut conn, &[(LOCK, "p:fence", "w", 30_000)], "1").await[0] < 0);
    }
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("h*"));
    let again = acquire(&mut conn, &[(LOCK, "p:fence", "h", 30_000)]).await[0];
    assert!(again > first, "the retried grant on a marked lock: {again}");
    let renewed: Vec<i64> = eval(&mut conn, RENEW, &[LOCK], &["h", "40000"], "renew").await;
    assert_eq!(renewed, [1]);
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("h*"));
    assert_eq!(
        release(&mut conn, LOCK, "w", CHANNEL).await,
        -1,
        "a waiter's token"
    );
    assert_eq!(release(&mut conn, LOCK, "h", CHANNEL).await, 1);
    assert!(
        published(&mut conn, &mut messages).await,
        "a marked release did not publish"
    );

    // A waiter granted the lock while others of its client wait marks it at once.
    assert!(acquire_as(&mut conn, &[(LOCK, "p:fence", "w", 30_000)], "2").await[0] > 0);
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("w*"));
    assert_eq!(release(&mut conn, LOCK, "w", CHANNEL).await, 1);
    assert!(published(&mut conn, &mut messages).await);
    // ...and a lone listening waiter granted it does not.
    assert!(acquire_as(&mut conn, &[(LOCK, "p:fence", "w", 30_000)], "1").await[0] > 0);
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("w"));
    assert_eq!(release(&mut conn, LOCK, "w", CHANNEL).await, 1);
    assert!(!published(&mut conn, &mut messages).await);
}

/// A hand-off to an eager lease (minting its fence).
async fn handoff(conn: &mut MultiplexedConnection, lock: &str, from: &str, to: &str) -> i64 {
    handoff_minting(conn, lock, from, to, "1").await
}

async fn handoff_minting(
    conn: &mut MultiplexedConnection,
    lock: &str,
    from: &str,
    to: &str,
    mint: &str,
) -> i64 {
    let args = [from, to, "20000", CHANNEL, mint];
    eval(conn, HANDOFF, &[lock, "p:fence"], &args, "handoff").await
}

/// A hand-off passes the lock only from its holder (marked or not), to the new token with
/// the new ttl and a higher fence, keeping the mark; otherwise it changes nothing.
#[tokio::test]
async fn a_handoff_passes_the_lock_only_from_its_holder() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let lock = "p:lock:{h}";
    assert_eq!(handoff(&mut conn, lock, "h", "w").await, 0, "no lock: gone");
    assert_eq!(value(&mut conn, lock).await, None);

    let first = acquire(&mut conn, &[(lock, "p:fence", "h", 30_000)]).await[0];
    assert_eq!(
        handoff(&mut conn, lock, "x", "w").await,
        -1,
        "not the holder"
    );
    assert_eq!(value(&mut conn, lock).await.as_deref(), Some("h"));

    let second = handoff(&mut conn, lock, "h", "w").await;
    assert!(second > first, "fence {second} after {first}");
    assert_eq!(value(&mut conn, lock).await.as_deref(), Some("w"));
    let pttl = pttl(&mut conn, lock).await;
    assert!((19_000..=20_000).contains(&pttl), "ttl {pttl}");
    assert_eq!(get(&mut conn, "p:fence").await, Some(second));

    // A listening waiter marks it; the next hand-off keeps the mark for the new holder.
    assert!(acquire_as(&mut conn, &[(lock, "p:fence", "v", 30_000)], "1").await[0] < 0);
    let third = handoff(&mut conn, lock, "w", "u").await;
    assert!(third > second, "fence {third} after {second}");
    assert_eq!(value(&mut conn, lock).await.as_deref(), Some("u*"));
}

async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("PTTL")
}

/// The next message on `CHANNEL`.
async fn next_message(
    messages: &mut (impl futures_util::Stream<Item = redis::Msg> + Unpin),
) -> String {
    tokio::time::timeout(Duration::from_secs(5), messages.next())
        .await
        .expect("a message in time")
        .expect("subscription open")
        .get_payload()
        .expect("payload")
}

/// A waiter that has waited long ('3') marks a busy lock '!' (over a '*' mark, or none); the
/// holder's renewal and retried grant keep it; the release does not free the lock but
/// reserves it ('!', for at most 250 ms) and publishes '!'; only a starving waiter takes a
/// reserved lock, and nobody's token releases it. A hand-off of a '!' lock reserves it too.
#[tokio::test]
async fn a_starving_waiter_is_served_before_the_releaser() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let mut messages = subscribed(&server).await;

    let first = acquire(&mut conn, &[(LOCK, "p:fence", "h", 30_000)]).await[0];
    assert!(acquire_as(&mut conn, &[(LOCK, "p:fence", "w", 30_000)], "1").await[0] < 0);
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("h*"));
    assert!(acquire_as(&mut conn, &[(LOCK, "p:fence", "s", 30_000)], "3").await[0] < 0);
    assert_eq!(
        value(&mut conn, LOCK).await.as_deref(),
        Some("h!"),
        "'*' becomes '!'"
    );
    // Marks do not pile up; a listening waiter does not downgrade it.
    assert!(acquire_as(&mut conn, &[(LOCK, "p:fence", "s", 30_000)], "3").await[0] < 0);
    assert!(acquire_as(&mut conn, &[(LOCK, "p:fence", "w", 30_000)], "1").await[0] < 0);
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("h!"));
    let renewed: Vec<i64> = eval(&mut conn, RENEW, &[LOCK], &["h", "40000"], "renew").await;
    assert_eq!(renewed, [1]);
    let again = acquire(&mut conn, &[(LOCK, "p:fence", "h", 30_000)]).await[0];
    assert!(again > first);
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("h!"));

    assert_eq!(release(&mut conn, LOCK, "h", CHANNEL).await, 1);
    assert_eq!(next_message(&mut messages).await, "!");
    assert_eq!(
        value(&mut conn, LOCK).await.as_deref(),
        Some("!"),
        "reserved"
    );
    let claim = pttl(&mut conn, LOCK).await;
    assert!((1..=250).contains(&claim), "claim {claim} ms");
    // The releaser, a plain caller and a listening waiter cannot take it; nobody releases it.
    for waits in ["0", "1", "2"] {
        let busy = acquire_as(&mut conn, &[(LOCK, "p:fence", "h", 30_000)], waits).await[0];
        assert!(busy < 0 && -busy - 2 <= 250, "waits {waits}: {busy}");
    }
    assert_eq!(release(&mut conn, LOCK, "h", CHANNEL).await, -1);
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("!"));
    // The starving waiter takes it, marked for the others, with its full ttl and a new fence.
    let granted = acquire_as(&mut conn, &[(LOCK, "p:fence", "s", 30_000)], "3").await[0];
    assert!(granted > again, "fence {granted}");
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("s*"));
    assert!(pttl(&mut conn, LOCK).await > 29_000);

    // A starving mark on a lock its holder hands off: reserved instead (-2), '!' published.
    assert!(acquire_as(&mut conn, &[(LOCK, "p:fence", "x", 30_000)], "3").await[0] < 0);
    assert_eq!(handoff(&mut conn, LOCK, "s", "local").await, -2);
    assert_eq!(next_message(&mut messages).await, "!");
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("!"));

    // Unclaimed, the reservation runs out and the lock is anyone's.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(acquire(&mut conn, &[(LOCK, "p:fence", "late", 30_000)]).await[0] > 0);
}

async fn unmark(conn: &mut MultiplexedConnection, lock: &str) -> i64 {
    eval(conn, UNMARK, &[lock], &[], "unmark").await
}

/// A starving waiter that gives up takes its mark back: 'T!' becomes 'T*' (the ttl kept), a
/// reserved lock is freed, anything else is left alone.
#[tokio::test]
async fn unmark_takes_a_starving_mark_back() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    assert_eq!(unmark(&mut conn, LOCK).await, 0, "no lock");
    assert!(acquire(&mut conn, &[(LOCK, "p:fence", "h", 30_000)]).await[0] > 0);
    assert_eq!(unmark(&mut conn, LOCK).await, 0, "unmarked");
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("h"));
    assert!(acquire_as(&mut conn, &[(LOCK, "p:fence", "w", 30_000)], "1").await[0] < 0);
    assert_eq!(unmark(&mut conn, LOCK).await, 0, "a listening mark stays");
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("h*"));
    assert!(acquire_as(&mut conn, &[(LOCK, "p:fence", "s", 30_000)], "3").await[0] < 0);
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("h!"));
    assert_eq!(unmark(&mut conn, LOCK).await, 1);
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("h*"));
    assert!(
        pttl(&mut conn, LOCK).await > 29_000,
        "the holder's ttl is kept"
    );
    assert!(acquire_as(&mut conn, &[(LOCK, "p:fence", "s", 30_000)], "3").await[0] < 0);
    assert_eq!(release(&mut conn, LOCK, "h", CHANNEL).await, 1);
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("!"));
    assert_eq!(unmark(&mut conn, LOCK).await, 1);
    assert_eq!(value(&mut conn, LOCK).await, None, "a reservation is freed");
}

async fn mint(conn: &mut MultiplexedConnection, lock: &str, token: &str) -> i64 {
    eval(conn, MINT, &[lock, "p:fence"], &[token], "mint").await
}

/// A lazy grant (`'0'`) answers 0 and leaves the fence key alone; `mint.lua` then mints for
/// the token the key holds (marked or not), above every fence before it, and nothing for
/// another token (-1) or a key that is gone (0).
#[tokio::test]
async fn a_lazy_grant_mints_nothing_until_its_holder_asks() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let eager = acquire(&mut conn, &[("p:lock:{e}", "p:fence", "e", 30_000)]).await[0];
    let lazy = acquire_minting(&mut conn, &[(LOCK, "p:fence", "h", 30_000)], "0", "0").await[0];
    assert_eq!(lazy, 0, "a lazy grant");
    assert_eq!(
        get(&mut conn, "p:fence").await,
        Some(eager),
        "nothing minted"
    );
    // Busy and retried answers are as for an eager item.
    let busy = acquire_minting(&mut conn, &[(LOCK, "p:fence", "w", 30_000)], "1", "0").await[0];
    assert!((-30_002..=-29_001).contains(&busy), "busy {busy}");
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("h*"));
    let retried = acquire_minting(&mut conn, &[(LOCK, "p:fence", "h", 30_000)], "0", "0").await[0];
    assert_eq!(retried, 0, "a retried lazy grant");

    assert_eq!(mint(&mut conn, LOCK, "w").await, -1, "another token's");
    let fence = mint(&mut conn, LOCK, "h").await;
    assert!(fence > eager, "fence {fence} after {eager}");
    assert_eq!(get(&mut conn, "p:fence").await, Some(fence));
    let again = mint(&mut conn, LOCK, "h").await;
    assert!(again > fence, "every mint is a new fence");
    assert_eq!(release(&mut conn, LOCK, "h", CHANNEL).await, 1);
    assert_eq!(mint(&mut conn, LOCK, "h").await, 0, "gone: nothing minted");
    assert_eq!(get(&mut conn, "p:fence").await, Some(again));

    // A hand-off to a lazy lease passes the lock and mints nothing (-3).
    acquire_minting(&mut conn, &[(LOCK, "p:fence", "a", 30_000)], "0", "0").await;
    assert_eq!(handoff_minting(&mut conn, LOCK, "a", "b", "0").await, -3);
    assert_eq!(value(&mut conn, LOCK).await.as_deref(), Some("b"));
    assert_eq!(get(&mut conn, "p:fence").await, Some(again));
    assert!(mint(&mut conn, LOCK, "b").await > again);
}

const ACQUIRE_PATH: &str = concat!(
    include_str!("../../src/store/scripts/fence.lua"),
    include_str!("../../src/store/scripts/holders.lua"),
    include_str!("../../src/store/scripts/acquire_path.lua")
);
const RELEASE_PATH: &str = concat!(
    "local PUBLISH = 'PUBLISH'\n",
    include_str!("../../src/store/scripts/holders.lua"),
    include_str!("../../src/store/scripts/release_path.lua")
);

/// The keys of level `tail` (`""` for the root `r`, `"/t"` for `r/t`): the holder sets of
/// IS, IX, S, X, the intent mark, the waited mark.
fn level(tail: &str) -> [String; 6] {
    ["is", "ix", "s", "x", "intent", "waited"].map(|what| format!("p:hier-{what}:{{r}}{tail}"))
}

/// `acquire_path.lua` on the levels `tails` with `modes` (1 IS .. 4 X, one per level).
async fn take_path(
    conn: &mut MultiplexedConnection,
    tails: &[&str],
    modes: &[u8],
    token: &str,
    waits: &str,
    waiter: &str,
) -> i64 {
    let script = redis::Script::new(ACQUIRE_PATH);
    let mut call = script.prepare_invoke();
    for tail in tails {
        for key in level(tail) {
            call.key(key);
        }
    }
    call.key("p:fence");
    call.arg(token).arg(30_000).arg(waits).arg(waiter);
    for mode in modes {
        call.arg(*mode);
    }
    call.invoke_async(conn).await.expect("acquire_path")
}

/// `release_path.lua` for `token` on the levels `(tail, index of the mode's set)`.
async fn release_path(
    conn: &mut MultiplexedConnection,
    token: &str,
    held: &[(&str, usize)],
) -> i64 {
    let script = redis::Script::new(RELEASE_PATH);
    let mut call = script.prepare_invoke();
    for (tail, set) in held {
        let keys = level(tail);
        call.key(keys[*set].clone()).key(keys[5].clone());
    }
    call.arg(token).arg(CHANNEL);
    call.invoke_async(conn).await.expect("release_path")
}

/// `acquire_path.lua` and `release_path.lua` called directly: a retried grant (same token)
/// is granted again with a higher fence; a waiter kept out by a holder marks the level with
/// its mode and waiter id for the holder's ttl plus 250 ms, which keeps out a newcomer the
/// holder alone would let in but never the waiter itself (with a new token); a level the mark
/// is not on is free; the release publishes because the level was waited for, and a second
/// release finds nothing.
#[tokio::test]
async fn a_paths_scripts_mark_waiters_and_publish_for_them() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let client = redis::Client::open(server.url()).expect("client");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub.subscribe(CHANNEL).await.expect("subscribe");
    let mut messages = pubsub.into_on_message();
    let path = ["", "/t"];
    // S on r/t: IS on r.
    let first = take_path(&mut conn, &path, &[1, 3], "a", "0", "wa").await;
    assert!(first > 0, "{first}");
    let again = take_path(&mut conn, &path, &[1, 3], "a", "0", "wa").await;
    assert!(again > first, "a retried grant: {again} after {first}");
    // X on r/t, waiting: busy for the reader's ttl, the level marked X by "wb".
    let busy = take_path(&mut conn, &path, &[2, 4], "b1", "1", "wb").await;
    assert!((-30_001..=-29_000).contains(&busy), "{busy}");
    let intent = &level("/t")[4];
    let got: Option<String> = redis::cmd("GET")
        .arg(intent)
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(got.as_deref(), Some("4wb"));
    let left = pttl(&mut conn, intent).await;
    assert!((29_000..=30_250).contains(&left), "{left}");
    assert!(
        pttl(&mut conn, &level("/t")[5]).await > 29_000,
        "waited mark"
    );
    // Another reader of r/t would share it with "a", but the mark keeps it out.
    assert!(take_path(&mut conn, &path, &[1, 3], "c", "0", "wc").await < 0);
    // IS on the root alone: the mark is on r/t only.
    let root = take_path(&mut conn, &[""], &[1], "d", "0", "wd").await;
    assert!(root > again, "{root}");
    // The waiter itself, with a new token: kept out by "a", not by its own mark.
    let retry = take_path(&mut conn, &path, &[2, 4], "b2", "1", "wb").await;
    assert!((-30_001..=-29_000).contains(&retry), "{retry}");

    assert_eq!(release_path(&mut conn, "d", &[("", 0)]).await, 1);
    assert!(
        !published(&mut conn, &mut messages).await,
        "nobody waited for the root"
    );
    assert_eq!(release_path(&mut conn, "a", &[("", 0), ("/t", 2)]).await, 1);
    assert!(
        published(&mut conn, &mut messages).await,
        "r/t was waited for"
    );
    assert_eq!(
        release_path(&mut conn, "a", &[("", 0), ("/t", 2)]).await,
        0,
        "released twice"
    );
    // Free now: the waiter gets in, and its mark goes with the grant.
    assert!(take_path(&mut conn, &path, &[2, 4], "b3", "1", "wb").await > root);
    assert_eq!(
        pttl(&mut conn, intent).await,
        -2,
        "the mark outlived its waiter's grant"
    );
}
