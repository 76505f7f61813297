//! A quorum node whose clock runs ahead of the others' does not vote.
//!
//! Redis expires keys on its own clock. A node whose clock steps forward (an NTP step, a VM
//! restored from a snapshot, an operator's `date -s`) expires its copies of every lease early;
//! if it held a bare majority's copy, its vote could then give a second client the lock while
//! the first still trusts it (Redlock trusts every node's clock). A lone node cannot tell
//! that its clock stepped, but an acquire can see it: every node answers an acquire with its
//! clock (`TIME`, in the acquire's pipeline: see `boot.rs`), read somewhere between the
//! request's send and its answer; a lazy lease's mint reads it too (a fence is
//! `max(previous + 1, the node's clock in µs)`), so the fence it uses comes from the nodes
//! whose clocks agree.
//!
//! A granting node whose clock is surely ahead of the granting nodes' median (whatever the
//! round trips hide) by more than half the lease's [`safety_margin`](crate::drift::safety_margin)
//! does not vote for this grant, and its fence is not used. A forward step larger than that
//! plus the round trip is therefore never counted; a smaller one is inside the margin by
//! which every holder stops trusting its lease before the store could expire it.
//!
//! What it costs: quorum nodes' clocks must agree within half the safety margin of the
//! shortest ttl used (NTP keeps a LAN within a millisecond), or the node ahead sits out of
//! every grant (and a warning says so); a node that runs behind is not held against it (its
//! keys live longer, which is safe, and its fences never go down).

use std::time::Duration;

use tokio::time::Instant;

/// One granting node's clock (µs: its `TIME`, or a fence it minted) and when its answer
/// arrived.
#[derive(Debug, Clone, Copy)]
pub(super) struct Granted {
    pub(super) clock_us: u64,
    pub(super) answered: Instant,
}

/// For each of `granted` (all answers to one acquire sent at `sent`), whether its clock is
/// surely ahead of the others' by more than `limit`. Fewer than two grants: none is (there
/// is nothing to compare with, and one grant is never a majority).
///
/// A node read its clock somewhere between `sent` and its answer, so its clock's offset from
/// this client's monotonic clock lies between `clock − round trip` and `clock` (µs, up to a
/// constant the same for all). The reference is the lower median of the offsets' upper
/// bounds; a node is ahead only if even its lower bound exceeds that by `limit`. A slow
/// answer (a busy client, a slow link) therefore never makes a node look ahead: it widens the
/// step that goes unseen by that round trip instead.
pub(super) fn ahead(granted: &[Granted], sent: Instant, limit: Duration) -> Vec<bool> {
    if granted.len() < 2 {
        return vec![false; granted.len()];
    }
    let micros = |d: Duration| i128::try_from(d.as_micros()).unwrap_or(i128::MAX);
    let mut upper: Vec<i128> = granted.iter().map(|g| i128::from(g.clock_us)).collect();
    upper.sort_unstable();
    // The lower median: with two grants, the one behind is the reference, so a node ahead of
    // its only partner is never trusted over it.
    let reference = upper[(upper.len() - 1) / 2];
    let limit = micros(limit);
    granted
        .iter()
        .map(|g| {
            let lower = i128::from(g.clock_us) - micros(g.answered.saturating_duration_since(sent));
            lower - reference > limit
        })
        .collect()
}

/// The most a granting node's clock may run ahead of the others' before it sits out of a
/// grant of `ttl`: half the lease's safety margin, at least 1 ms.
pub(super) fn limit(ttl: Duration) -> Duration {
    (crate::drift::safety_margin(ttl) / 2).max(Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(sent: Instant, clock_us: u64, answered_ms: u64) -> Granted {
        Granted {
            clock_us,
            answered: sent + Duration::from_millis(answered_ms),
        }
    }

    #[test]
    fn a_node_two_seconds_ahead_is_found_and_the_others_are_not() {
        let sent = Instant::now();
        let base = 1_700_000_000_000_000;
        let granted = [
            at(sent, base + 2_000_000, 1),
            at(sent, base + 300, 1),
            at(sent, base, 2),
        ];
        let found = ahead(&granted, sent, Duration::from_millis(5));
        assert_eq!(found, [true, false, false]);
    }

    #[test]
    fn two_grants_trust_the_one_behind() {
        let sent = Instant::now();
        let granted = [at(sent, 10_000_000, 1), at(sent, 20_000_000, 1)];
        assert_eq!(
            ahead(&granted, sent, Duration::from_millis(5)),
            [false, true]
        );
    }

    #[test]
    fn a_late_answer_is_not_taken_for_a_clock_ahead() {
        let sent = Instant::now();
        // The second node ran the script 40 ms after the first (its answer came at 80 ms):
        // its clock read 40 ms more, which its round trip explains.
        let granted = [
            at(sent, 5_000_000, 1),
            at(sent, 5_040_000, 80),
            at(sent, 5_000_100, 1),
        ];
        assert_eq!(
            ahead(&granted, sent, Duration::from_millis(5)),
            [false, false, false]
        );
    }

    #[test]
    fn a_node_behind_votes() {
        let sent = Instant::now();
        let granted = [
            at(sent, 1_000_000, 1),
            at(sent, 9_000_000, 1),
            at(sent, 9_000_050, 1),
        ];
        assert_eq!(
            ahead(&granted, sent, Duration::from_millis(5)),
            [false, false, false]
        );
    }

    #[test]
    fn fewer_than_two_grants_compare_nothing() {
        let sent = Instant::now();
        assert!(ahead(&[], sent, Duration::ZERO).is_empty());
        assert_eq!(ahead(&[at(sent, 1, 1)], sent, Duration::ZERO), [false]);
    }

    #[test]
    fn the_limit_is_half_the_safety_margin() {
        assert_eq!(limit(Duration::from_secs(30)), Duration::from_millis(176));
        assert_eq!(
            limit(Duration::from_millis(10)),
            Duration::from_micros(1300)
        );
        assert_eq!(limit(Duration::ZERO), Duration::from_millis(1));
    }
}
