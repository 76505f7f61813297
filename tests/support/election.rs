//! What the election tests of every backend share: waiting until a campaigner waits, and a
//! follower that is already watching when each leader changes.

use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::time::Instant;

/// Waits until a campaigner has marked election `name`'s lock as waited on (it found the lock
/// busy and sleeps on it), rather than guessing how long that takes.
pub async fn until_a_campaigner_waits(client: &distlock::Client, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = client.lock_state(name).await.expect("lock_state");
        if matches!(state, distlock::LockState::Held { waiters: true, .. }) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no campaigner waits on {name}: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Follows `election` in a task of its own, from now on: a follower already waiting when
/// each leader changes (not one that only starts to look once told to).
pub fn follow(
    election: &distlock::Election,
) -> tokio::sync::mpsc::UnboundedReceiver<distlock::Leader> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut stream = Box::pin(election.observe());
    tokio::spawn(async move {
        while let Some(leader) = stream.next().await {
            if tx.send(leader).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits (at most `within`) for the next leader `followed` sees, and checks that it is
/// `identity` in `term`; `what` names the leader for the failure message.
pub async fn expect_seen(
    followed: &mut tokio::sync::mpsc::UnboundedReceiver<distlock::Leader>,
    within: Duration,
    (term, identity): (u64, &str),
    what: &str,
) {
    let seen = tokio::time::timeout(within, followed.recv())
        .await
        .unwrap_or_else(|_| panic!("the follower saw {what}"))
        .expect("never ends");
    assert_eq!((seen.term, seen.identity.as_str()), (term, identity));
}

/// Hands election `name` over from `leader` to `campaigner` (an election of `client`), which
/// campaigns as `identity`: once the campaigner waits on the lock, the leader resigns, and
/// the campaigner must be elected at once (within 5 s, woken rather than polling) in a
/// higher term. `label` names the run in the printed hand-over time.
pub async fn hand_over(
    leader: distlock::Leadership,
    campaigner: &distlock::Election,
    client: &distlock::Client,
    name: &str,
    identity: &'static str,
    label: &str,
) -> distlock::Leadership {
    let waiting = tokio::spawn({
        let campaigner = campaigner.clone();
        async move {
            let leadership = campaigner.campaign(identity).await.expect("campaign");
            (Instant::now(), leadership)
        }
    });
    until_a_campaigner_waits(client, name).await;
    let resigned_at = Instant::now();
    let first_term = leader.term();
    leader.resign().await.expect("resign");
    let (elected_at, next) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("elected after the resign")
        .expect("campaigner");
    let handover = elected_at - resigned_at;
    println!(
        "{label} hand-over: {:.1} ms",
        handover.as_secs_f64() * 1000.0
    );
    assert!(handover < Duration::from_secs(5), "not woken: {handover:?}");
    assert!(next.term() > first_term);
    next
}

/// One election seen from two clients: `a`'s leads, `b`'s follows.
pub struct Contest {
    pub ea: distlock::Election,
    pub eb: distlock::Election,
    /// What `eb` has seen, since before anyone led.
    pub followed: tokio::sync::mpsc::UnboundedReceiver<distlock::Leader>,
    /// How long the follower may take to see a new leader.
    pub within: Duration,
}

impl Contest {
    /// Hands election `name` over from `leader` to `eb` (an election of client `b`),
    /// campaigning as `b` (see [`hand_over`]); the follower must then see `b` in its term.
    pub async fn hand_over_to_b(
        &mut self,
        leader: distlock::Leadership,
        b: &distlock::Client,
        name: &str,
        label: &str,
    ) -> distlock::Leadership {
        let next = hand_over(leader, &self.eb, b, name, "b", label).await;
        let seen = (next.term(), "b");
        expect_seen(&mut self.followed, self.within, seen, "the new leader").await;
        next
    }
}

/// Builds election `name` (lease `ttl`) on `a` and on `b`, following `b`'s from the start;
/// checks that no one leads yet, then `a`'s campaigns as `a` and the follower must see it.
/// Returns the elections and `a`'s leadership.
pub async fn a_leads(
    a: &distlock::Client,
    b: &distlock::Client,
    name: &str,
    ttl: Duration,
) -> (Contest, distlock::Leadership) {
    let ea = a.election(name).ttl(ttl).build().expect("election");
    let eb = b.election(name).ttl(ttl).build().expect("election");
    let mut followed = follow(&eb);
    let within = eb.observe_bound() + Duration::from_secs(5);
    assert_eq!(eb.leader().await.expect("leader"), None);
    let first = ea.campaign("a").await.expect("campaign");
    expect_seen(&mut followed, within, (first.term(), "a"), "the leader").await;
    let contest = Contest {
        ea,
        eb,
        followed,
        within,
    };
    (contest, first)
}
