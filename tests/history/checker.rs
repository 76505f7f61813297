//! The offline checker: reads a recorded history and verifies the README's guarantees on it.
//!
//! * **Mutual exclusion**: no two leases of one lock name (or a writer and anyone else on one
//!   read-write lock) both believed valid at one instant. A lease is believed valid over its
//!   *claims*: from its grant's completion, and from each moment the worker asked it
//!   (`valid_for()`), for as long as it said, cut where the worker stopped trusting it (before
//!   a release or a drop) and by any `extend` under way or invoked later (which may shorten it
//!   on purpose, down to its invocation plus the new ttl minus the margin).
//!   A claim is the library's own promise, so an overlap is a broken promise, whichever
//!   process noticed.
//! * **Promises kept**: a lease whose lost signal says the key was gone or taken (`NotHeld`)
//!   while one of its claims still ran had its key vanish early.
//! * **Fences**: within one name, a fence minted under a grant that completed before another
//!   was invoked is smaller than the other's, however late either was minted (with the grant,
//!   or by a lazy lease's first `fence()`), and no two leases share one. Leases that never
//!   minted have nothing to compare.
//! * **No fence after loss**: a lock's lease never gets a fence from a mint invoked after a
//!   later grant of its name completed (the store held the later lease then, not this one).
//! * **Permits**: the permits of a semaphore's leases believed valid at one instant never add
//!   up to more than its size.
//! * **Rate limits**: never more allowed than the algorithm's own bound, on the server's clock
//!   (`CLOCK_REALTIME` here, shifted by any clock jump the nemesis made), counting only the
//!   requests whose server time is certain to fall where the bound needs it.
//! * **Lost signals** fire no later than the key could expire: the last claim's end plus the
//!   margin the guide promises (unless the worker was paused meanwhile), and fire at all: a
//!   lease its worker still trusted, whose last claim ran out while its process went on
//!   recording, had a lost signal that never fired.
//!
//! The margin is the documented one ([`promised_margin`]), not `distlock::safety_margin`: a
//! library that widened its margin would loosen a check that took it from the library.
//! * **Completions**: every invoked operation completed.
//!
//! What the README documents as *not* guaranteed is told apart, not hidden: an overlap or an
//! excess that follows a fault the nemesis marked `lossy` (a failover or a restart that loses
//! the latest writes), or a server clock jump on a single primary within the jump's size, is
//! reported as a documented consequence with its size; fences that go down after a quorum
//! node's clock jumped (`skew`) likewise. Everything else is a violation.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::record::Event;

/// The safety margin the guide and `safety_margin`'s documentation promise for a ttl: 1% of
/// it plus 2 ms for clock drift, plus ttl/20 (at most 50 ms) for a late runtime. Written
/// here from the text, so that the checker holds the library to its documented bound.
pub fn promised_margin(ttl: std::time::Duration) -> std::time::Duration {
    ttl / 100
        + std::time::Duration::from_millis(2)
        + (ttl / 20).min(std::time::Duration::from_millis(50))
}

/// How long past its due time a process that kept running (and was not kept off the CPU)
/// may go on recording before a lost signal that never fired is a violation: the timer
/// wheel, the watcher's 10 ms claims, and the records themselves.
const MISSING_SIGNAL_SLACK_NS: u64 = 200_000_000;

/// Slack for a clock jump: how much longer than the jump an explained overlap may last
/// (the jump applies between two time reads of the nemesis).
const JUMP_SLACK_NS: u64 = 100_000_000;

/// A fault, as the nemesis recorded it.
#[derive(Debug, Clone)]
pub struct Fault {
    pub kind: String,
    pub target: String,
    pub start: u64,
    pub end: u64,
    pub real_start: u64,
    pub real_end: u64,
    /// Documented to lose the latest writes (failover, restart without persistence).
    pub lossy: bool,
    /// A server clock jump of this many ns.
    pub jump: u64,
    /// May make fences go down (a quorum node's clock ahead).
    pub skew: bool,
    /// May end a lease early, its holder told (a quorum node restarted empty or jumped).
    pub early_loss: bool,
    /// The worker it targets, if one.
    pub worker: Option<u32>,
}

/// One lease: a grant and what its worker saw of it.
#[derive(Debug, Clone)]
struct Lease {
    process: u32,
    op: u64,
    kind: String,
    /// `lock:<name>`, `sem:<name>` or `rw:<name>`: one fence sequence and one exclusion.
    domain: String,
    permits: u64,
    size: u64,
    ttl_ms: u64,
    inv: u64,
    ok: u64,
    /// The lease's fence: from its grant (eager), or from its first successful mint (lazy);
    /// `None` if it never minted one.
    fence: Option<u64>,
    /// When its lazy mint that succeeded was invoked, if one did.
    minted_at: Option<u64>,
    claims: Vec<(u64, u64)>,
    /// Extends: (invoked, completed, the earliest the key may expire after it). A claim made
    /// before an extend completed is cut there: the extend may shorten the lease on purpose
    /// (the key lives at least until the invocation plus the new ttl minus its margin).
    cuts: Vec<(u64, u64, u64)>,
    end: Option<u64>,
    lost: Option<(u64, String)>,
    /// ttl after each successful extend: (time, ttl ms).
    ttls: Vec<(u64, u64)>,
}

impl Lease {
    /// Claims cut where the worker stopped trusting them, merged.
    fn belief(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut claims = self.claims.clone();
        claims.sort_unstable();
        for (start, end) in claims {
            let mut end = end;
            for &(_, done, floor) in &self.cuts {
                if start <= done {
                    end = end.min(floor.max(start));
                }
            }
            if let Some(stop) = self.end {
                end = end.min(stop);
            }
            if end <= start {
                continue;
            }
            match out.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => out.push((start, end)),
            }
        }
        out
    }

    fn ttl_at(&self, t: u64) -> u64 {
        self.ttls
            .iter()
            .filter(|(at, _)| *at <= t)
            .map(|(_, ttl)| *ttl)
            .next_back()
            .unwrap_or(self.ttl_ms)
    }

    fn id(&self) -> (u32, u64) {
        (self.process, self.op)
    }
}

/// One finding: a violation, or a documented consequence.
#[derive(Debug, Clone)]
pub struct Finding {
    pub rule: &'static str,
    pub what: String,
    /// The operations involved, for the excerpt.
    pub ops: Vec<(u32, u64)>,
    pub from: u64,
    pub to: u64,
    /// The fault that explains it (documented consequence), if any.
    pub explained_by: Option<String>,
    /// Its size (an overlap's length, an excess's count), for the figures.
    pub size: u64,
}

/// What the checker found, with the figures it prints.
#[derive(Debug, Default)]
pub struct Report {
    pub ops: usize,
    pub grants: usize,
    pub checks: usize,
    pub allowed: usize,
    pub faults: Vec<Fault>,
    pub violations: Vec<Finding>,
    pub documented: Vec<Finding>,
    /// Per fault kind: the longest stretch without a successful operation of the affected
    /// workers that overlaps each fault (ns).
    pub unavailable: BTreeMap<String, Vec<u64>>,
    /// The same statistic away from every fault: the baseline.
    pub quiet_gap: u64,
    pub errors: BTreeMap<String, usize>,
}

/// Checks `events` (every process's, in time order).
#[allow(clippy::too_many_lines)]
pub fn check(events: &[Event]) -> Report {
    let mut report = Report::default();
    let mut invs: BTreeMap<(u32, u64), &Event> = BTreeMap::new();
    let mut dones: BTreeMap<(u32, u64), &Event> = BTreeMap::new();
    let mut leases: BTreeMap<(u32, u64), Lease> = BTreeMap::new();
    let mut rates: BTreeMap<u32, f64> = BTreeMap::new();
    let mut open_faults: BTreeMap<u64, &Event> = BTreeMap::new();
    for e in events {
        match e.tag.as_str() {
            "meta" => {
                if let Some(rate) = e.get("clock_rate").and_then(|r| r.parse().ok()) {
                    rates.insert(e.process, rate);
                }
            }
            "inv" => {
                invs.insert((e.process, e.op), e);
            }
            "ok" | "fail" => {
                dones.insert((e.process, e.op), e);
            }
            "fault" if e.get("phase") == Some("start") => {
                open_faults.insert(e.op, e);
            }
            "fault" => {
                if let Some(start) = open_faults.remove(&e.op) {
                    report.faults.push(fault(start, Some(e)));
                }
            }
            _ => {}
        }
    }
    let last = events.last().map_or(0, |e| e.mono);
    for start in open_faults.values() {
        let mut f = fault(start, None);
        f.end = last;
        report.faults.push(f);
    }
    report.faults.sort_by_key(|f| f.start);

    // Operations and their completions.
    for (id, inv) in &invs {
        report.ops += 1;
        let Some(done) = dones.get(id) else {
            report.violations.push(Finding {
                rule: "completion",
                what: format!(
                    "operation {}/{} ({}) has no completion",
                    id.0,
                    id.1,
                    inv.get("kind").unwrap_or("?")
                ),
                ops: vec![*id],
                from: inv.mono,
                to: inv.mono,
                explained_by: None,
                size: 1,
            });
            continue;
        };
        if done.tag == "fail" {
            *report
                .errors
                .entry(format!(
                    "{}: {}",
                    inv.get("kind").unwrap_or("?"),
                    done.get("err").unwrap_or("?")
                ))
                .or_default() += 1;
        }
        let kind = inv.get("kind").unwrap_or("");
        if matches!(kind, "lock" | "sem" | "read" | "write" | "probe") && done.tag == "ok" {
            let rate = rates.get(&id.0).copied().unwrap_or(1.0);
            let name = inv.get("name").unwrap_or("");
            let domain = match kind {
                "sem" => format!("sem:{name}"),
                "read" | "write" => format!("rw:{name}"),
                _ => format!("lock:{name}"),
            };
            let valid = scaled(done.num("valid").unwrap_or(0), rate);
            report.grants += 1;
            leases.insert(
                *id,
                Lease {
                    process: id.0,
                    op: id.1,
                    kind: kind.to_owned(),
                    domain,
                    permits: inv.num("n").unwrap_or(1),
                    size: inv.num("size").unwrap_or(1),
                    ttl_ms: inv.num("ttl").unwrap_or(0),
                    inv: inv.mono,
                    ok: done.mono,
                    fence: done.num("fence"),
                    minted_at: None,
                    claims: vec![(done.mono, done.mono + valid)],
                    cuts: Vec::new(),
                    end: None,
                    lost: None,
                    ttls: Vec::new(),
                },
            );
        }
    }
    // What the workers saw of their leases.
    for e in events {
        let Some(lease_op) = e.num("lease") else {
            continue;
        };
        let Some(lease) = leases.get_mut(&(e.process, lease_op)) else {
            continue;
        };
        match e.tag.as_str() {
            "claim" => {
                let rate = rates.get(&e.process).copied().unwrap_or(1.0);
                let valid = scaled(e.num("valid").unwrap_or(0), rate);
                if valid > 0 {
                    lease.claims.push((e.mono, e.mono + valid));
                }
            }
            "lost" if lease.lost.is_none() => {
                lease.lost = Some((e.mono, e.get("reason").unwrap_or("?").to_owned()));
            }
            "end" => {
                lease.end = Some(lease.end.map_or(e.mono, |t| t.min(e.mono)));
            }
            "inv" if e.get("kind") == Some("mint") => {
                if let Some(done) = dones.get(&(e.process, e.op))
                    && done.tag == "ok"
                    && let Some(fence) = done.num("fence")
                    && lease.fence.is_none()
                {
                    lease.fence = Some(fence);
                    lease.minted_at = Some(e.mono);
                }
            }
            "inv" if e.get("kind") == Some("extend") => {
                let ttl = std::time::Duration::from_millis(e.num("ttl").unwrap_or(0));
                let floor = e.mono
                    + u64::try_from(ttl.saturating_sub(promised_margin(ttl)).as_nanos())
                        .unwrap_or(0);
                let done = dones.get(&(e.process, e.op)).map_or(u64::MAX, |d| d.mono);
                lease.cuts.push((e.mono, done, floor));
                if dones.get(&(e.process, e.op)).is_some_and(|d| d.tag == "ok")
                    && let Some(ttl) = e.num("ttl")
                {
                    let done = dones[&(e.process, e.op)].mono;
                    lease.ttls.push((done, ttl));
                }
            }
            _ => {}
        }
    }

    let mut by_domain: BTreeMap<&str, Vec<&Lease>> = BTreeMap::new();
    for lease in leases.values() {
        by_domain.entry(&lease.domain).or_default().push(lease);
    }
    let faults = report.faults.clone();
    for (domain, leases) in &by_domain {
        exclusion(domain, leases, &faults, &mut report);
        fences(domain, leases, &faults, &mut report);
        no_fence_after_loss(domain, leases, &faults, &mut report);
    }
    // When each process last recorded anything before each instant: a process that was not
    // running (starved of CPU, stopped) cannot hear a timer.
    // Workers that stamp every record's CPU wait with its time (`stamps=1` in their meta);
    // older histories stamped claims and grants before reading it, so only their other
    // records' `rd` counts.
    let stamped: BTreeSet<u32> = events
        .iter()
        .filter(|e| e.tag == "meta" && e.get("stamps") == Some("1"))
        .map(|e| e.process)
        .collect();
    let mut activity: BTreeMap<u32, Vec<(u64, Option<u64>)>> = BTreeMap::new();
    for e in events {
        let trusted = stamped.contains(&e.process) || !matches!(e.tag.as_str(), "claim" | "ok");
        let rd = if trusted { e.num("rd") } else { None };
        activity.entry(e.process).or_default().push((e.mono, rd));
    }
    for lease in leases.values() {
        lost_signal(lease, &faults, &activity, &mut report);
    }
    rate_limits(&invs, &dones, &mut report);
    unavailability(events, &mut report);
    report
}

fn fault(start: &Event, end: Option<&Event>) -> Fault {
    Fault {
        kind: start.get("kind").unwrap_or("?").to_owned(),
        target: start.get("target").unwrap_or("").to_owned(),
        start: start.mono,
        end: end.map_or(start.mono, |e| e.mono),
        real_start: start.real,
        real_end: end.map_or(start.real, |e| e.real),
        lossy: start.get("lossy") == Some("1"),
        jump: start.num("jump_ns").unwrap_or(0),
        skew: start.get("skew") == Some("1"),
        early_loss: start.get("early_loss") == Some("1"),
        worker: start
            .get("target")
            .and_then(|t| t.strip_prefix("worker"))
            .and_then(|n| n.parse().ok()),
    }
}

/// ns measured on a clock running at `rate` × real time, in real ns.
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]
fn scaled(ns: u64, rate: f64) -> u64 {
    if (rate - 1.0).abs() < f64::EPSILON {
        ns
    } else {
        (ns as f64 / rate) as u64
    }
}

/// The fault that documents a broken promise between `first` (the earlier lease's grant) and
/// `at` (when the promise broke), if any: a lossy fault under way or just over, or a clock
/// jump whose size covers `size`.
fn explain(faults: &[Fault], first: u64, at: u64, size: u64, after: u64) -> Option<String> {
    faults
        .iter()
        .find(|f| {
            let near = f.start <= at && first <= f.end + after && at <= f.end + after;
            near && (f.lossy || (f.jump > 0 && size <= f.jump + JUMP_SLACK_NS))
        })
        .map(|f| format!("{} {}", f.kind, f.target))
}

fn exclusion(domain: &str, leases: &[&Lease], faults: &[Fault], report: &mut Report) {
    let mut intervals: Vec<(u64, u64, &Lease)> = leases
        .iter()
        .flat_map(|l| l.belief().into_iter().map(move |(s, e)| (s, e, *l)))
        .collect();
    intervals.sort_by_key(|(s, _, _)| *s);
    let max_ttl = leases.iter().map(|l| l.ttl_ms).max().unwrap_or(0) * 1_000_000;
    let mut active: Vec<(u64, u64, &Lease)> = Vec::new();
    let mut reported: BTreeSet<((u32, u64), (u32, u64))> = BTreeSet::new();
    for (start, end, lease) in intervals {
        active.retain(|(_, e, _)| *e > start);
        active.push((start, end, lease));
        let others: Vec<&(u64, u64, &Lease)> = active
            .iter()
            .filter(|(_, _, l)| l.id() != lease.id())
            .collect();
        if others.is_empty() {
            continue;
        }
        let (rule, bad): (&str, Vec<&&Lease>) = if lease.kind == "sem" {
            let held: u64 = active.iter().map(|(_, _, l)| l.permits).sum();
            let size = active.iter().map(|(_, _, l)| l.size).min().unwrap_or(1);
            if held <= size {
                continue;
            }
            ("permits", others.iter().map(|(_, _, l)| l).collect())
        } else if lease.kind == "read" {
            let writers: Vec<&&Lease> = others
                .iter()
                .map(|(_, _, l)| l)
                .filter(|l| l.kind == "write")
                .collect();
            if writers.is_empty() {
                continue;
            }
            ("read-write", writers)
        } else {
            let rule = if lease.kind == "write" {
                "read-write"
            } else {
                "mutual exclusion"
            };
            (rule, others.iter().map(|(_, _, l)| l).collect())
        };
        for other in bad {
            let key = (other.id(), lease.id());
            if !reported.insert(key) {
                continue;
            }
            let other_end = active
                .iter()
                .filter(|(_, _, l)| l.id() == other.id())
                .map(|(_, e, _)| *e)
                .max()
                .unwrap_or(start);
            let overlap = intersection(&other.belief(), &lease.belief());
            let what = format!(
                "{domain}: {} {}/{} (fence {:?}) believed valid until {} while {} {}/{} (fence {:?}) \
                 believed valid from {}: overlap {:.1} ms",
                other.kind,
                other.process,
                other.op,
                other.fence,
                ms(other_end),
                lease.kind,
                lease.process,
                lease.op,
                lease.fence,
                ms(start),
                overlap as f64 / 1e6
            );
            let explained_by = explain(
                faults,
                other.ok,
                start,
                overlap,
                2 * max_ttl + 1_000_000_000,
            );
            let finding = Finding {
                rule,
                what,
                ops: vec![other.id(), lease.id()],
                from: other.ok.min(start),
                to: end.max(other_end),
                explained_by,
                size: overlap,
            };
            push(report, finding);
        }
    }
    // Promises kept: a key found gone while a claim still ran.
    for lease in leases {
        if let Some((at, reason)) = &lease.lost
            && reason == "not-held"
            && let Some(&(_, end)) = lease.belief().iter().find(|(s, e)| s <= at && at < e)
        {
            let early = end - at;
            let finding = Finding {
                rule: "promise kept",
                what: format!(
                    "{domain}: {} {}/{} found its key gone at {} while it had promised it \
                     until {} ({:.1} ms early)",
                    lease.kind,
                    lease.process,
                    lease.op,
                    ms(*at),
                    ms(end),
                    early as f64 / 1e6
                ),
                ops: vec![lease.id()],
                from: lease.ok,
                to: end,
                // A quorum node that restarts empty or whose clock jumps can end a lease early
                // whose grant holds a bare majority with that node in it (`early_loss`): its
                // holder is told; whether a second holder gets in is the exclusion check's.
                explained_by: explain(faults, lease.ok, *at, early, 2 * max_ttl + 1_000_000_000)
                    .or_else(|| {
                        faults
                            .iter()
                            .find(|f| {
                                f.early_loss
                                    && f.start <= *at
                                    && *at <= f.end + 2 * max_ttl + 1_000_000_000
                            })
                            .map(|f| format!("{} {}", f.kind, f.target))
                    }),
                size: early,
            };
            push(report, finding);
        }
    }
}

/// Total length of the intersection of two sorted, disjoint interval lists.
fn intersection(a: &[(u64, u64)], b: &[(u64, u64)]) -> u64 {
    let mut total = 0;
    for &(s1, e1) in a {
        for &(s2, e2) in b {
            total += e1.min(e2).saturating_sub(s1.max(s2));
        }
    }
    total
}

/// A minted fence is above every fence minted under an earlier grant of the name (one that
/// completed before this lease's acquire was invoked), whenever either was minted; no two
/// leases share a fence.
fn fences(domain: &str, leases: &[&Lease], faults: &[Fault], report: &mut Report) {
    let fenced: Vec<(&Lease, u64)> = leases
        .iter()
        .filter_map(|l| l.fence.map(|f| (*l, f)))
        .collect();
    let mut by_ok = fenced.clone();
    by_ok.sort_by_key(|(l, _)| l.ok);
    let mut by_inv = fenced.clone();
    by_inv.sort_by_key(|(l, _)| l.inv);
    // Running maximum of the fences of grants completed before each invocation.
    let mut done = 0;
    let mut best: Option<(&Lease, u64)> = None;
    for (lease, fence) in by_inv {
        while done < by_ok.len() && by_ok[done].0.ok < lease.inv {
            if best.is_none_or(|(_, b)| by_ok[done].1 > b) {
                best = Some(by_ok[done]);
            }
            done += 1;
        }
        if let Some((before, before_fence)) = best
            && before_fence >= fence
        {
            let explained_by = faults
                .iter()
                .find(|f| f.skew && f.start <= lease.inv)
                .map(|f| format!("{} {}", f.kind, f.target));
            push(
                report,
                Finding {
                    rule: "fence order",
                    what: format!(
                        "{domain}: {}/{} granted at {} with fence {before_fence}{}, then {}/{} \
                         invoked at {} got fence {fence}{}",
                        before.process,
                        before.op,
                        ms(before.ok),
                        minted(before),
                        lease.process,
                        lease.op,
                        ms(lease.inv),
                        minted(lease),
                    ),
                    ops: vec![before.id(), lease.id()],
                    from: before.ok,
                    to: lease.ok.max(lease.minted_at.unwrap_or(0)),
                    explained_by,
                    size: before_fence - fence + 1,
                },
            );
        }
    }
    let mut seen: BTreeMap<u64, &Lease> = BTreeMap::new();
    for (lease, fence) in fenced {
        if let Some(other) = seen.insert(fence, lease) {
            push(
                report,
                Finding {
                    rule: "fence order",
                    what: format!(
                        "{domain}: {}/{} and {}/{} share fence {fence}",
                        other.process, other.op, lease.process, lease.op
                    ),
                    ops: vec![other.id(), lease.id()],
                    from: other.ok.min(lease.ok),
                    to: other.ok.max(lease.ok),
                    explained_by: None,
                    size: 1,
                },
            );
        }
    }
}

/// How a lease got its fence, for messages.
fn minted(lease: &Lease) -> String {
    match lease.minted_at {
        Some(at) => format!(" (minted at {})", ms(at)),
        None => String::new(),
    }
}

/// A lock's lease that minted its fence lazily did so while the store held it: never after a
/// later grant of the name completed (that grant replaced its token, which no later grant
/// brings back). A mint that succeeded anyway broke "a lost lease never gets a fence", unless
/// a fault that loses writes (a failover, a restart) explains it.
fn no_fence_after_loss(domain: &str, leases: &[&Lease], faults: &[Fault], report: &mut Report) {
    if !domain.starts_with("lock:") {
        return;
    }
    let max_ttl = leases.iter().map(|l| l.ttl_ms).max().unwrap_or(0) * 1_000_000;
    for lease in leases {
        let Some(minted_at) = lease.minted_at else {
            continue;
        };
        let Some(later) = leases
            .iter()
            .filter(|l| l.inv > lease.ok && l.ok < minted_at)
            .min_by_key(|l| l.ok)
        else {
            continue;
        };
        let explained_by = explain(faults, lease.ok, minted_at, 0, 2 * max_ttl + 1_000_000_000);
        push(
            report,
            Finding {
                rule: "fence after loss",
                what: format!(
                    "{domain}: {}/{} (granted at {}) minted fence {} with a mint invoked at {}, \
                     after {}/{} was granted at {}",
                    lease.process,
                    lease.op,
                    ms(lease.ok),
                    lease.fence.unwrap_or(0),
                    ms(minted_at),
                    later.process,
                    later.op,
                    ms(later.ok)
                ),
                ops: vec![later.id(), lease.id()],
                from: lease.ok,
                to: minted_at,
                explained_by,
                size: 1,
            },
        );
    }
}

fn lost_signal(
    lease: &Lease,
    faults: &[Fault],
    activity: &BTreeMap<u32, Vec<(u64, Option<u64>)>>,
    report: &mut Report,
) {
    let Some((at, reason)) = &lease.lost else {
        never_lost(lease, faults, activity, report);
        return;
    };
    if reason == "released" {
        return;
    }
    // The last claim made before the signal, uncut: the deadline the lease worked to.
    let Some(&(made, deadline)) = lease.claims.iter().filter(|(s, _)| s <= at).max() else {
        return;
    };
    let margin = margin_ns(lease, made);
    if *at <= deadline + margin {
        return;
    }
    let paused = faults.iter().any(|f| {
        f.kind == "pause-worker"
            && f.worker == Some(lease.process)
            && f.start <= *at
            && deadline <= f.end + margin
    });
    if paused {
        return;
    }
    let late = *at - deadline - margin;
    // A process that does not run cannot hear a timer (CPU starvation, as on a loaded
    // machine). Each record carries how long its thread had waited for a CPU so far (`rd`),
    // so the lateness that counts is what remains once the time the machine kept the process
    // off the CPU since its last record before the due time is taken off, with 20 ms for the
    // timer wheel and the records themselves. (Without `rd`, from histories of older runs:
    // lateness counted from the process's first record after the due time, against 50 ms.)
    let due = deadline + margin;
    let times: &[(u64, Option<u64>)] = activity.get(&lease.process).map_or(&[], Vec::as_slice);
    let before = times[..times.partition_point(|&(t, _)| t <= due)]
        .iter()
        .rev()
        .find(|(_, rd)| rd.is_some())
        .copied();
    let at_rd = times
        .iter()
        .rev()
        .find(|(t, _)| *t == *at)
        .and_then(|(_, rd)| *rd);
    let (net, withheld) = match (before, at_rd) {
        (Some((_, Some(rd_before))), Some(rd_at)) => {
            let withheld = rd_at.saturating_sub(rd_before);
            (late.saturating_sub(withheld), withheld)
        }
        _ => {
            let resumed = times
                .get(times.partition_point(|&(t, _)| t <= due))
                .map_or(*at, |&(t, _)| t)
                .min(*at);
            (*at - resumed, resumed.saturating_sub(due))
        }
    };
    let explained_by = (net <= 20_000_000).then(|| {
        format!(
            "starvation process{} kept off the CPU {:.0} ms",
            lease.process,
            withheld as f64 / 1e6
        )
    });
    push(
        report,
        Finding {
            rule: "lost in time",
            what: format!(
                "{} {}/{} ({}): lost signal ({reason}) at {}, {:.1} ms after its deadline {} \
                 plus its safety margin",
                lease.kind,
                lease.process,
                lease.op,
                lease.domain,
                ms(*at),
                late as f64 / 1e6,
                ms(deadline)
            ),
            ops: vec![lease.id()],
            from: made,
            to: *at,
            explained_by,
            size: late,
        },
    );
}

/// The promised margin of `lease`'s ttl at `at`, in ns.
fn margin_ns(lease: &Lease, at: u64) -> u64 {
    u64::try_from(promised_margin(std::time::Duration::from_millis(lease.ttl_at(at))).as_nanos())
        .unwrap_or(u64::MAX)
}

/// A lease with no lost signal at all: a violation if its worker still trusted it (no `end`
/// before the key could expire) and its process went on recording well past that moment,
/// running (not paused, not kept off the CPU), so a timer that was due would have been heard.
fn never_lost(
    lease: &Lease,
    faults: &[Fault],
    activity: &BTreeMap<u32, Vec<(u64, Option<u64>)>>,
    report: &mut Report,
) {
    let Some(&(made, deadline)) = lease.claims.iter().max() else {
        return;
    };
    let due = deadline.saturating_add(margin_ns(lease, made));
    if lease.end.is_some_and(|end| end <= due) {
        return;
    }
    if faults.iter().any(|f| {
        f.kind == "pause-worker"
            && f.worker == Some(lease.process)
            && f.start <= due + MISSING_SIGNAL_SLACK_NS
            && due <= f.end
    }) {
        return;
    }
    let times: &[(u64, Option<u64>)] = activity.get(&lease.process).map_or(&[], Vec::as_slice);
    let from = times.partition_point(|&(t, _)| t <= due);
    let rd_at_due = times[..from].iter().rev().find_map(|&(_, rd)| rd);
    // The first record of the process that came past the slack once the time it was kept off
    // the CPU since the due time is taken off (records without `rd` count whole).
    let heard = times[from..].iter().find(|&&(t, rd)| {
        let withheld = match (rd_at_due, rd) {
            (Some(before), Some(now)) => now.saturating_sub(before),
            _ => 0,
        };
        (t - due).saturating_sub(withheld) > MISSING_SIGNAL_SLACK_NS
    });
    let Some(&(seen, _)) = heard else {
        return;
    };
    push(
        report,
        Finding {
            rule: "lost never signalled",
            what: format!(
                "{} {}/{} ({}): its last claim ran out at {} and the key could expire by {}; \
                 its worker still trusted it and recorded on at {}, and no lost signal fired",
                lease.kind,
                lease.process,
                lease.op,
                lease.domain,
                ms(deadline),
                ms(due),
                ms(seen)
            ),
            ops: vec![lease.id()],
            from: made,
            to: seen,
            explained_by: None,
            size: seen - due,
        },
    );
}

/// One allowed request on the server's clock: (earliest, latest) µs, cost, op.
pub type Allowed = (i64, i64, i64, (u32, u64));

/// One (policy, subject)'s allowed requests: algorithm, limit, unit µs, the requests.
type Limited = (String, i64, i64, Vec<Allowed>);

/// A set of allowed requests over the budget: (from µs, to µs, units, operations, the bound).
pub type Excess = (i64, i64, i64, Vec<(u32, u64)>, String);

#[allow(clippy::too_many_lines)]
fn rate_limits(
    invs: &BTreeMap<(u32, u64), &Event>,
    dones: &BTreeMap<(u32, u64), &Event>,
    report: &mut Report,
) {
    let jumps: Vec<&Fault> = report.faults.iter().filter(|f| f.jump > 0).collect();
    let mut groups: BTreeMap<(String, String), Limited> = BTreeMap::new();
    for (id, inv) in invs {
        if inv.get("kind") != Some("rl") {
            continue;
        }
        report.checks += 1;
        let Some(done) = dones.get(id) else { continue };
        if done.tag != "ok" || done.get("allowed") != Some("1") {
            continue;
        }
        report.allowed += 1;
        // Server time: real time plus the jumps made before; unknown across a jump.
        let shift = |real: u64| -> Option<u64> {
            let mut offset = 0;
            for j in &jumps {
                if real >= j.real_end {
                    offset += j.jump;
                } else if real >= j.real_start {
                    return None;
                }
            }
            Some(real + offset)
        };
        let (Some(lo), Some(hi)) = (shift(inv.real), shift(done.real)) else {
            continue;
        };
        if lo / 1000 > hi / 1000 && hi < lo {
            continue;
        }
        let key = (
            inv.get("policy").unwrap_or("?").to_owned(),
            inv.get("subject").unwrap_or("?").to_owned(),
        );
        let entry = groups.entry(key).or_insert_with(|| {
            (
                inv.get("alg").unwrap_or("?").to_owned(),
                i64::try_from(inv.num("limit").unwrap_or(0)).unwrap_or(0),
                i64::try_from(inv.num("unit_us").unwrap_or(1)).unwrap_or(1),
                Vec::new(),
            )
        });
        entry.3.push((
            i64::try_from(lo / 1000).unwrap_or(0),
            i64::try_from(hi / 1000).unwrap_or(0),
            i64::try_from(inv.num("cost").unwrap_or(1)).unwrap_or(1),
            *id,
        ));
    }
    let faults = report.faults.clone();
    for ((policy, subject), (alg, limit, unit, mut allowed)) in groups {
        allowed.sort_by_key(|a| a.0);
        let excess: Vec<Excess> = match alg.as_str() {
            "gcra" | "token-bucket" => span_excess(
                &allowed,
                |span| limit + span / unit,
                limit * unit + 4 * unit,
            ),
            "sliding-log" => span_excess(
                &allowed,
                |span| if span < unit { limit } else { i64::MAX },
                unit,
            ),
            "fixed-window" => window_excess(&allowed, limit, unit),
            "sliding-window" => sliding_excess(&allowed, limit, unit),
            _ => Vec::new(),
        };
        for (lo, hi, count, ops, bound) in excess {
            let horizon = u64::try_from(2 * limit * unit).unwrap_or(0) * 1000 + 1_000_000_000;
            let from = ops
                .iter()
                .filter_map(|id| invs.get(id))
                .map(|e| e.mono)
                .min()
                .unwrap_or(0);
            let to = ops
                .iter()
                .filter_map(|id| dones.get(id))
                .map(|e| e.mono)
                .max()
                .unwrap_or(0);
            // On the monotonic clock (the server's may have jumped): a fault that loses state
            // or moves the server's clock within the bound's horizon explains an excess.
            let explained_by = faults
                .iter()
                .find(|f| {
                    (f.lossy || f.jump > 0) && f.start <= to + horizon && from <= f.end + horizon
                })
                .map(|f| format!("{} {}", f.kind, f.target));
            push(
                report,
                Finding {
                    rule: "rate budget",
                    what: format!(
                        "{policy} ({alg}, limit {limit}, unit {unit} µs) on {subject}: {count} \
                         allowed within server times [{lo}, {hi}] µs, over {bound}"
                    ),
                    ops: ops.into_iter().take(12).collect(),
                    from,
                    to,
                    explained_by,
                    size: u64::try_from(count).unwrap_or(0),
                },
            );
        }
    }
}

/// Sets of requests certain to lie within `[lo_i, hi_j]` whose cost exceeds `bound(span)`:
/// for each first request `i`, the later ones by their latest time. At most one per `i`.
pub fn span_excess(allowed: &[Allowed], bound: impl Fn(i64) -> i64, horizon: i64) -> Vec<Excess> {
    let mut out = Vec::new();
    let mut skip_until = i64::MIN;
    for (i, first) in allowed.iter().enumerate() {
        if first.0 < skip_until {
            continue;
        }
        let mut later: Vec<&Allowed> = allowed[i..]
            .iter()
            .take_while(|a| a.0 <= first.0 + horizon)
            .filter(|a| a.1 >= first.0)
            .collect();
        later.sort_by_key(|a| a.1);
        let mut sum = 0;
        for (j, last) in later.iter().enumerate() {
            sum += last.2;
            let span = last.1 - first.0;
            let limit = bound(span);
            if sum > limit {
                let ops = later[..=j].iter().map(|a| a.3).collect();
                out.push((
                    first.0,
                    last.1,
                    sum,
                    ops,
                    format!("its bound {limit} for {span} µs"),
                ));
                skip_until = last.1;
                break;
            }
        }
    }
    out
}

pub fn window_excess(allowed: &[Allowed], limit: i64, period: i64) -> Vec<Excess> {
    let mut windows: BTreeMap<i64, (i64, Vec<(u32, u64)>)> = BTreeMap::new();
    for a in allowed {
        if a.0.div_euclid(period) == a.1.div_euclid(period) {
            let w = windows.entry(a.0.div_euclid(period)).or_default();
            w.0 += a.2;
            w.1.push(a.3);
        }
    }
    windows
        .into_iter()
        .filter(|(_, (n, _))| *n > limit)
        .map(|(w, (n, ops))| {
            (
                w * period,
                (w + 1) * period,
                n,
                ops,
                format!("its limit {limit} per window"),
            )
        })
        .collect()
}

#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
pub fn sliding_excess(allowed: &[Allowed], limit: i64, period: i64) -> Vec<Excess> {
    let window = |a: &Allowed| {
        (a.0.div_euclid(period) == a.1.div_euclid(period)).then(|| a.0.div_euclid(period))
    };
    let mut out = Vec::new();
    for r in allowed {
        let Some(w) = window(r) else { continue };
        let prev: i64 = allowed
            .iter()
            .filter(|a| window(a) == Some(w - 1))
            .map(|a| a.2)
            .sum();
        let before: Vec<&Allowed> = allowed
            .iter()
            .filter(|a| window(a) == Some(w) && a.1 < r.0)
            .collect();
        let curr: i64 = before.iter().map(|a| a.2).sum::<i64>() + r.2;
        let elapsed = r.1 - w * period;
        let weighted = (prev as f64 * (period - elapsed) as f64 / period as f64).ceil() as i64;
        if weighted + curr > limit {
            let mut ops: Vec<(u32, u64)> = before.iter().map(|a| a.3).collect();
            ops.push(r.3);
            out.push((
                w * period,
                r.1,
                weighted + curr,
                ops,
                format!("its limit {limit} (weighted previous {weighted})"),
            ));
            break;
        }
    }
    out
}

/// Per fault, the longest stretch without a successful operation of the workers it affects.
fn unavailability(events: &[Event], report: &mut Report) {
    let successes: Vec<(u64, u32)> = events
        .iter()
        // The random mix's workers (1..100); probes (100+) and the hot-lock waiters (200+)
        // run apart and would read as gaps.
        .filter(|e| e.tag == "ok" && e.process > 0 && e.process < 100)
        .map(|e| (e.mono, e.process))
        .collect();
    let Some(&(first, _)) = successes.first() else {
        return;
    };
    let end = events.last().map_or(first, |e| e.mono);
    for f in report.faults.iter().filter(|f| f.kind != "partition-probe") {
        let times: Vec<u64> = successes
            .iter()
            .filter(|(_, p)| f.worker.is_none_or(|w| w == *p))
            .map(|(t, _)| *t)
            .collect();
        let mut longest = 0;
        // From the affected workers' last success before the fault (or its start).
        let mut prev = times
            .iter()
            .copied()
            .filter(|&t| t < f.start)
            .max()
            .unwrap_or(f.start);
        for &t in times.iter().chain(std::iter::once(&end)) {
            if t >= f.start && prev <= f.end {
                longest = longest.max(t - prev);
            }
            prev = t;
        }
        report
            .unavailable
            .entry(f.kind.clone())
            .or_default()
            .push(longest);
    }
    let mut prev = first;
    for &(t, _) in &successes {
        let quiet = report
            .faults
            .iter()
            .all(|f| t < f.start || prev > f.end + 1_000_000_000);
        if quiet {
            report.quiet_gap = report.quiet_gap.max(t - prev);
        }
        prev = t;
    }
}

fn push(report: &mut Report, finding: Finding) {
    if finding.explained_by.is_some() {
        report.documented.push(finding);
    } else {
        report.violations.push(finding);
    }
}

#[allow(clippy::cast_precision_loss)]
fn ms(ns: u64) -> String {
    format!("{:.3}s", ns as f64 / 1e9)
}

/// The events around `finding`: those of its operations (and of the leases they are), and the
/// faults under way, with times relative to the first.
pub fn excerpt(events: &[Event], finding: &Finding) -> String {
    let ops: BTreeSet<(u32, u64)> = finding.ops.iter().copied().collect();
    let margin = 500_000_000;
    let picked: Vec<&Event> = events
        .iter()
        .filter(|e| {
            ops.contains(&(e.process, e.op))
                || e.num("lease")
                    .is_some_and(|l| ops.contains(&(e.process, l)))
                || (e.tag == "fault"
                    && e.mono + margin >= finding.from
                    && e.mono <= finding.to + margin)
        })
        .collect();
    let base = picked.first().map_or(0, |e| e.mono);
    let mut out = String::new();
    for e in picked.iter().take(60) {
        let _ = writeln!(
            out,
            "  +{:>10.3} ms  {}",
            (e.mono - base) as f64 / 1e6,
            e.line()
        );
    }
    if picked.len() > 60 {
        let _ = writeln!(out, "  ... {} more events", picked.len() - 60);
    }
    out
}

/// The figures, as printed after a run.
#[allow(clippy::cast_precision_loss)]
pub fn figures(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "operations {}, grants {}, rate checks {} ({} allowed), faults injected {}, \
         violations {}, documented consequences {}",
        report.ops,
        report.grants,
        report.checks,
        report.allowed,
        report.faults.len(),
        report.violations.len(),
        report.documented.len()
    );
    let _ = writeln!(
        out,
        "longest stretch without a success away from faults: {:.0} ms",
        report.quiet_gap as f64 / 1e6
    );
    let _ = writeln!(
        out,
        "unavailability per fault kind (longest stretch without a success of the affected workers, overlapping the fault):"
    );
    for (kind, gaps) in &report.unavailable {
        let mut sorted = gaps.clone();
        sorted.sort_unstable();
        let median = sorted[sorted.len() / 2];
        let max = sorted.last().copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "  {kind:<22} n={:<3} median {:>7.0} ms  max {:>7.0} ms",
            gaps.len(),
            median as f64 / 1e6,
            max as f64 / 1e6
        );
    }
    let mut documented: BTreeMap<(&str, String), (usize, u64)> = BTreeMap::new();
    for d in &report.documented {
        let by = d.explained_by.clone().unwrap_or_default();
        let kind = by.split(' ').next().unwrap_or("").to_owned();
        let e = documented.entry((d.rule, kind)).or_default();
        e.0 += 1;
        e.1 = e.1.max(d.size);
    }
    if !documented.is_empty() {
        let _ = writeln!(out, "documented consequences (not guaranteed):");
        for ((rule, kind), (n, max)) in documented {
            let size = if rule == "rate budget" || rule == "fence order" {
                format!("largest {max}")
            } else {
                format!("longest {:.1} ms", max as f64 / 1e6)
            };
            let _ = writeln!(out, "  {rule:<17} after {kind:<20} n={n:<4} {size}");
        }
    }
    let mut errors: Vec<(&String, &usize)> = report.errors.iter().collect();
    errors.sort_by(|a, b| b.1.cmp(a.1));
    let listed: Vec<String> = errors
        .iter()
        .take(8)
        .map(|(k, n)| format!("{k} ×{n}"))
        .collect();
    let _ = writeln!(out, "failed operations: {}", listed.join(", "));
    out
}

#[cfg(test)]
mod tests {
    //! Hand-made histories: each bad one must fail with the right rule, the good ones pass.
    use super::*;
    use crate::record::fields;

    const MS: u64 = 1_000_000;

    #[derive(Default)]
    struct H(Vec<Event>);

    impl H {
        fn ev(mut self, t_ms: u64, p: u32, op: u64, tag: &str, pairs: &[(&str, &str)]) -> Self {
            let pairs: Vec<(&str, String)> =
                pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
            self.0.push(Event {
                mono: t_ms * MS,
                real: 1_000_000_000_000_000 + t_ms * MS,
                process: p,
                op,
                tag: tag.into(),
                fields: fields(&pairs),
            });
            self
        }

        /// A lock grant: invoked at `inv`, granted at `ok` with `valid` ms and `fence`.
        #[allow(clippy::too_many_arguments)]
        fn grant(
            self,
            p: u32,
            op: u64,
            name: &str,
            inv: u64,
            ok: u64,
            valid: u64,
            fence: u64,
        ) -> Self {
            let valid = (valid * MS).to_string();
            let fence = fence.to_string();
            self.ev(
                inv,
                p,
                op,
                "inv",
                &[("kind", "lock"), ("name", name), ("ttl", "1000")],
            )
            .ev(ok, p, op, "ok", &[("fence", &fence), ("valid", &valid)])
        }

        /// A lazy lock grant: as [`grant`](Self::grant), with no fence minted.
        fn lazy_grant(self, p: u32, op: u64, name: &str, inv: u64, ok: u64, valid: u64) -> Self {
            let valid = (valid * MS).to_string();
            self.ev(
                inv,
                p,
                op,
                "inv",
                &[
                    ("kind", "lock"),
                    ("name", name),
                    ("ttl", "1000"),
                    ("fenced", "0"),
                ],
            )
            .ev(ok, p, op, "ok", &[("valid", &valid)])
        }

        /// Lease `lease`'s mint (operation `op`), invoked at `at`: answered at `at + 1` with
        /// `fence`, or failed (`None`: the lease was no longer held).
        fn mint(self, p: u32, op: u64, lease: u64, at: u64, fence: Option<u64>) -> Self {
            let lease = lease.to_string();
            let h = self.ev(at, p, op, "inv", &[("kind", "mint"), ("lease", &lease)]);
            match fence {
                Some(fence) => h.ev(at + 1, p, op, "ok", &[("fence", &fence.to_string())]),
                None => h.ev(at + 1, p, op, "fail", &[("err", "lost")]),
            }
        }

        fn release(self, p: u32, op: u64, lease: u64, at: u64) -> Self {
            let lease = lease.to_string();
            self.ev(at, p, 0, "end", &[("lease", &lease)])
                .ev(at, p, op, "inv", &[("kind", "release"), ("lease", &lease)])
                .ev(at + 1, p, op, "ok", &[("outcome", "released")])
        }

        /// Lease `lease`'s extend to `ttl` ms (operation `op`), invoked at `at`; its answer is
        /// the test's to add.
        fn extend(self, p: u32, op: u64, lease: u64, at: u64, ttl: u64) -> Self {
            let (lease, ttl) = (lease.to_string(), ttl.to_string());
            self.ev(
                at,
                p,
                op,
                "inv",
                &[("kind", "extend"), ("lease", &lease), ("ttl", &ttl)],
            )
        }

        fn fault(self, id: u64, start: u64, end: u64, kind: &str, extra: &[(&str, &str)]) -> Self {
            let mut pairs = vec![("kind", kind), ("phase", "start")];
            pairs.extend_from_slice(extra);
            self.ev(start, 0, id, "fault", &pairs).ev(
                end,
                0,
                id,
                "fault",
                &[("kind", kind), ("phase", "end")],
            )
        }

        /// Process 1's lock grant of `a` (operation 1): invoked at 0, granted at 5 ms, valid
        /// 900 ms, fence 10: the first holder of most histories here.
        fn first_holder(self) -> Self {
            self.grant(1, 1, "a", 0, 5, 900, 10)
        }

        /// Process `p`'s grant (operation 1) invoked at `at` with `inv`, answered 1 ms later
        /// with a fence of `at + 1`, valid 500 ms.
        fn held(self, p: u32, at: u64, inv: &[(&str, &str)]) -> Self {
            self.ev(at, p, 1, "inv", inv).ev(
                at + 1,
                p,
                1,
                "ok",
                &[("fence", &(at + 1).to_string()), ("valid", "500000000")],
            )
        }

        /// Process 2's grant of `a` (operation 1, valid 900 ms, fence 11) invoked at `inv`
        /// and granted at `ok`; process 1 releases its lease at `first_released`, process 2
        /// at `second_released`; the history checked.
        fn second_holder(
            self,
            inv: u64,
            ok: u64,
            first_released: u64,
            second_released: u64,
        ) -> Report {
            self.grant(2, 1, "a", inv, ok, 900, 11)
                .release(1, 2, 1, first_released)
                .release(2, 2, 1, second_released)
                .check()
        }

        /// Process 1's lost signal for its lease 1 at `at`, for `reason`.
        fn lost(self, at: u64, reason: &str) -> Self {
            self.ev(at, 1, 0, "lost", &[("lease", "1"), ("reason", reason)])
        }

        /// A record of process 1 at `at` that says nothing but that it ran.
        fn tick(self, at: u64) -> Self {
            self.ev(at, 1, 0, "meta", &[("tick", "1")])
        }

        /// Process 1's claim at `at` that its lease 1 is valid `valid_ns` more.
        fn claim(self, at: u64, valid_ns: &str) -> Self {
            self.ev(at, 1, 0, "claim", &[("lease", "1"), ("valid", valid_ns)])
        }

        fn check(mut self) -> Report {
            self.0.sort_by_key(|e| e.mono);
            check(&self.0)
        }
    }

    #[track_caller]
    fn assert_clean(r: &Report) {
        assert!(r.violations.is_empty(), "{:?}", r.violations);
    }

    fn rules(r: &Report) -> Vec<&'static str> {
        r.violations.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn a_clean_handover_passes() {
        let r = H::default()
            .first_holder()
            .release(1, 2, 1, 300)
            .grant(2, 1, "a", 100, 302, 900, 11)
            .release(2, 2, 1, 600)
            .check();
        assert_clean(&r);
        assert_eq!(r.grants, 2);
    }

    #[test]
    fn two_holders_at_once_fail_mutual_exclusion() {
        let r = H::default()
            .first_holder()
            .second_holder(100, 400, 500, 600);
        assert_eq!(rules(&r), ["mutual exclusion"]);
        let text = excerpt(&H::default().first_holder().0, &r.violations[0]);
        assert!(text.contains(" inv "), "{text}");
    }

    #[test]
    fn a_claim_made_later_also_counts() {
        // Granted for 100 ms, then told valid for 800 ms more; the second grant lands inside.
        let r = H::default()
            .grant(1, 1, "a", 0, 5, 100, 10)
            .claim(50, "800000000")
            .second_holder(100, 400, 500, 1400);
        assert_eq!(rules(&r), ["mutual exclusion"]);
    }

    #[test]
    fn an_extend_cuts_earlier_claims() {
        // A shortens its lease with extend at 200 ms (to 100 ms); B is granted at 350 ms.
        let r = H::default()
            .first_holder()
            .extend(1, 3, 1, 200, 100)
            .ev(201, 1, 3, "ok", &[])
            .claim(202, "90000000")
            // Its lost signal fires when the shortened lease runs out, as the library's does.
            .lost(293, "expired")
            .second_holder(300, 350, 600, 1400);
        assert_clean(&r);
    }

    #[test]
    fn a_claim_made_during_an_extend_is_cut_too() {
        // Extend to 100 ms invoked at 200 ms, completed at 400 ms; a claim at 300 ms (still
        // showing the old deadline) is cut at 200 + 100 - 8 = 292 ms... so B at 350 ms is fine,
        let ok = H::default()
            .first_holder()
            .extend(1, 3, 1, 200, 100)
            .claim(300, "600000000")
            .ev(400, 1, 3, "ok", &[])
            .second_holder(340, 350, 600, 1400);
        assert_clean(&ok);
        // ...but B at 280 ms is inside what the extend still promised.
        let bad = H::default()
            .first_holder()
            .extend(1, 3, 1, 200, 100)
            .ev(400, 1, 3, "ok", &[])
            .second_holder(270, 280, 600, 1400);
        assert_eq!(rules(&bad), ["mutual exclusion"]);
    }

    #[test]
    fn a_fence_going_down_fails() {
        // A holds with fence 20 until 50 ms; B's fence, granted at 70 ms, must be above it.
        let after_20 = |fence: u64| {
            H::default()
                .grant(1, 1, "a", 0, 5, 100, 20)
                .release(1, 2, 1, 50)
                .grant(2, 1, "a", 60, 70, 100, fence)
                .release(2, 2, 1, 90)
                .check()
        };
        assert_eq!(rules(&after_20(19)), ["fence order"]);
        assert_eq!(
            rules(&after_20(20)),
            ["fence order", "fence order"],
            "equal fences"
        );
    }

    #[test]
    fn lazy_fences_minted_in_grant_order_pass_whenever_they_are_minted() {
        // A mints late in its hold, B never mints, C mints at once, D is eager; a failed mint
        // counts for nothing.
        let r = H::default()
            .lazy_grant(1, 1, "a", 0, 5, 900)
            .mint(1, 3, 1, 250, Some(10))
            .release(1, 2, 1, 300)
            .lazy_grant(2, 1, "a", 100, 302, 900)
            .release(2, 2, 1, 400)
            .lazy_grant(3, 1, "a", 350, 402, 900)
            .mint(3, 3, 1, 403, Some(11))
            .release(3, 2, 1, 500)
            .grant(4, 1, "a", 450, 502, 900, 12)
            .mint(4, 3, 1, 600, None)
            .release(4, 2, 1, 700)
            .check();
        assert_clean(&r);
        assert_eq!(r.grants, 4);
    }

    #[test]
    fn a_lazy_fence_below_an_earlier_grants_fails() {
        // A's eager fence is 20; B, granted after A's grant, mints 19 later on.
        let r = H::default()
            .grant(1, 1, "a", 0, 5, 100, 20)
            .release(1, 2, 1, 50)
            .lazy_grant(2, 1, "a", 60, 70, 100)
            .mint(2, 3, 1, 80, Some(19))
            .release(2, 2, 1, 90)
            .check();
        assert_eq!(rules(&r), ["fence order"]);
        assert!(
            r.violations[0].what.contains("minted at"),
            "{:?}",
            r.violations
        );
    }

    /// The hand-made history the new rule exists for: A's lease is lost (B is granted), and
    /// A still gets a fence afterwards, above B's. Both rules reject it.
    #[test]
    fn a_fence_minted_after_a_later_grant_fails() {
        // A (lazy) is granted for 100 ms; B is granted at 210 ms.
        let lost_to_b = || {
            H::default()
                .lazy_grant(1, 1, "a", 0, 5, 100)
                .lazy_grant(2, 1, "a", 200, 210, 100)
        };
        // B releases at 290 ms; A mints 31 at 300 ms and releases.
        let a_mints_late = |h: H| {
            h.release(2, 2, 1, 290)
                .mint(1, 3, 1, 300, Some(31))
                .release(1, 2, 1, 310)
                .check()
        };
        let r = a_mints_late(lost_to_b().mint(2, 3, 1, 220, Some(30)));
        assert_eq!(rules(&r), ["fence order", "fence after loss"]);
        // Without B's mint there is nothing to order, but A's late mint is still refused.
        let r = a_mints_late(lost_to_b());
        assert_eq!(rules(&r), ["fence after loss"]);
        // A failover that loses writes explains it (a documented consequence).
        let r = a_mints_late(lost_to_b().fault(
            9,
            150,
            180,
            "failover",
            &[("lossy", "1"), ("target", "primary")],
        ));
        assert_clean(&r);
        assert_eq!(r.documented.len(), 1, "{:?}", r.documented);
    }

    #[test]
    fn more_permits_than_the_size_fail() {
        let sem = |h: H, p: u32, at: u64, n: &str| {
            h.held(
                p,
                at,
                &[
                    ("kind", "sem"),
                    ("name", "s"),
                    ("n", n),
                    ("size", "3"),
                    ("ttl", "1000"),
                ],
            )
        };
        let ok = sem(sem(H::default(), 1, 0, "2"), 2, 10, "1").check();
        assert_clean(&ok);
        let bad = sem(sem(H::default(), 1, 0, "2"), 2, 10, "2").check();
        assert_eq!(rules(&bad), ["permits"]);
    }

    #[test]
    fn a_reader_inside_with_a_writer_fails() {
        let rw = |h: H, p: u32, at: u64, kind: &str| {
            h.held(p, at, &[("kind", kind), ("name", "r"), ("ttl", "1000")])
        };
        let readers = rw(rw(H::default(), 1, 0, "read"), 2, 10, "read").check();
        assert_clean(&readers);
        let bad = rw(rw(H::default(), 1, 0, "write"), 2, 10, "read").check();
        assert_eq!(rules(&bad), ["read-write"]);
        let bad = rw(rw(H::default(), 1, 0, "read"), 2, 10, "write").check();
        assert_eq!(rules(&bad), ["read-write"]);
    }

    fn checks(alg: &str, limit: &str, unit_us: &str, times_ms: &[u64]) -> Report {
        let mut h = H::default();
        for (i, &t) in times_ms.iter().enumerate() {
            let op = i as u64 + 1;
            h = h
                .ev(
                    t,
                    1,
                    op,
                    "inv",
                    &[
                        ("kind", "rl"),
                        ("alg", alg),
                        ("limit", limit),
                        ("unit_us", unit_us),
                        ("policy", "p"),
                        ("subject", "s"),
                        ("cost", "1"),
                    ],
                )
                .ev(t, 1, op, "ok", &[("allowed", "1")]);
        }
        h.check()
    }

    #[test]
    fn a_rate_limit_over_its_budget_fails() {
        // GCRA, burst 3, one per 100 ms: 3 at once, then one per 100 ms is within budget.
        let ok = checks("gcra", "3", "100000", &[0, 0, 0, 100, 200, 300]);
        assert_clean(&ok);
        let bad = checks("gcra", "3", "100000", &[0, 0, 0, 50]);
        assert_eq!(rules(&bad), ["rate budget"]);
        // Sliding log, 2 per 100 ms.
        let ok = checks("sliding-log", "2", "100000", &[0, 1, 101, 102]);
        assert_clean(&ok);
        let bad = checks("sliding-log", "2", "100000", &[0, 50, 99]);
        assert_eq!(rules(&bad), ["rate budget"]);
        // Fixed window, 2 per second, on real time (whole seconds here).
        let bad = checks("fixed-window", "2", "1000000", &[100, 200, 300]);
        assert_eq!(rules(&bad), ["rate budget"]);
        let ok = checks("fixed-window", "2", "1000000", &[100, 200, 1100]);
        assert_clean(&ok);
        // Sliding window counter, 2 per second: 2 late in one window, 1 early in the next.
        let bad = checks("sliding-window", "2", "1000000", &[900, 950, 1050]);
        assert_eq!(rules(&bad), ["rate budget"]);
    }

    #[test]
    fn a_late_lost_signal_fails() {
        // ttl 1000 ms: margin 62 ms. Deadline at 5 + 900 = 905 ms, due at 967 ms; lost at
        // 1100 ms is late, and the process was running from 970 ms on (more than the 50 ms
        // runtime allowance before the signal).
        let late = H::default()
            .first_holder()
            .tick(970)
            .lost(1100, "expired")
            .release(1, 2, 1, 1001)
            .check();
        assert_eq!(rules(&late), ["lost in time"]);
        let on_time = H::default()
            .first_holder()
            .lost(910, "expired")
            .release(1, 2, 1, 1001)
            .check();
        assert_clean(&on_time);
    }

    #[test]
    fn a_lost_signal_that_never_fires_fails() {
        // ttl 1000 ms: due at 967 ms. The worker still trusts the lease (no `end`) and goes
        // on recording at 1500 ms with no lost signal: a timer that never fired.
        let silent = H::default().first_holder().tick(1500).check();
        assert_eq!(rules(&silent), ["lost never signalled"]);
        // The same with the signal: clean.
        let signalled = H::default()
            .first_holder()
            .lost(910, "expired")
            .tick(1500)
            .check();
        assert_clean(&signalled);
        // Released before it ran out: nothing was owed.
        let released = H::default()
            .first_holder()
            .release(1, 2, 1, 300)
            .tick(1500)
            .check();
        assert_clean(&released);
        // A process that recorded nothing after the due time (stopped, or the run ended)
        // could not have been heard.
        let quiet = H::default().first_holder().tick(1000).check();
        assert_clean(&quiet);
        // Kept off the CPU from the due time to its next record: not heard yet.
        let starved = H::default()
            .first_holder()
            .ev(960, 1, 0, "meta", &[("rd", "1000000")])
            .ev(1500, 1, 0, "meta", &[("rd", "500000000")])
            .check();
        assert_clean(&starved);
    }

    #[test]
    fn the_promised_margin_is_the_documented_one() {
        // The guide: 1% + 2 ms for drift, plus ttl/20 up to 50 ms; 352 ms for 30 s, 62 ms
        // for 1 s (safety_margin's own figures). The library's margin may only be as wide.
        for (ttl_ms, promised_ms) in [(1_000, 62), (30_000, 352), (100, 8), (10, 2)] {
            let ttl = std::time::Duration::from_millis(ttl_ms);
            assert_eq!(
                promised_margin(ttl).as_millis(),
                promised_ms,
                "ttl {ttl_ms} ms"
            );
            assert!(
                distlock::safety_margin(ttl) <= promised_margin(ttl),
                "ttl {ttl_ms} ms"
            );
        }
    }

    #[test]
    fn a_late_lost_signal_of_a_silent_process_is_starvation() {
        // Nothing recorded by process 1 between 100 ms and the signal at 1000 ms.
        let r = H::default()
            .first_holder()
            .claim(100, "800000000")
            .lost(1000, "expired")
            .release(1, 2, 1, 1001)
            .check();
        assert_clean(&r);
        assert_eq!(r.documented.len(), 1);
        assert!(
            r.documented[0]
                .explained_by
                .as_deref()
                .unwrap_or("")
                .starts_with("starvation")
        );
    }

    #[test]
    fn lateness_counts_only_the_time_the_process_could_run() {
        // Due at 967 ms; the signal at 1100 ms is 133 ms late.
        let run = |rd_at_signal: &str| {
            H::default()
                .first_holder()
                .ev(960, 1, 0, "meta", &[("rd", "1000000")])
                .ev(
                    1100,
                    1,
                    0,
                    "lost",
                    &[("lease", "1"), ("reason", "expired"), ("rd", rd_at_signal)],
                )
                .release(1, 2, 1, 1101)
                .check()
        };
        // Kept off the CPU 125 ms of those: 8 ms of its own, within the 20 ms.
        let starved = run("126000000");
        assert_clean(&starved);
        // Kept off the CPU 10 ms: 123 ms late on its own.
        assert_eq!(rules(&run("11000000")), ["lost in time"]);
    }

    #[test]
    fn a_key_gone_before_its_promise_fails() {
        let r = H::default()
            .first_holder()
            .lost(300, "not-held")
            .release(1, 2, 1, 301)
            .check();
        assert_eq!(rules(&r), ["promise kept"]);
    }

    #[test]
    fn an_operation_without_completion_fails() {
        let r = H::default()
            .ev(0, 1, 1, "inv", &[("kind", "lock"), ("name", "a")])
            .check();
        assert_eq!(rules(&r), ["completion"]);
    }

    #[test]
    fn an_overlap_after_a_lossy_failover_is_documented_not_hidden() {
        let r = H::default()
            .first_holder()
            .fault(1, 100, 200, "kill-primary", &[("lossy", "1")])
            .second_holder(150, 250, 500, 600);
        assert_clean(&r);
        assert_eq!(r.documented.len(), 1);
        assert_eq!(r.documented[0].rule, "mutual exclusion");
        // The same overlap after a fault that loses nothing is a violation.
        let r = H::default()
            .first_holder()
            .fault(1, 100, 200, "pause-primary", &[])
            .second_holder(150, 250, 500, 600);
        assert_eq!(rules(&r), ["mutual exclusion"]);
    }

    #[test]
    fn a_clock_jump_explains_only_an_overlap_within_its_size() {
        let jumped = |jump_ms: &str| {
            H::default()
                .first_holder()
                .fault(1, 100, 101, "clock-jump", &[("jump_ns", jump_ms)])
                .second_holder(150, 250, 800, 900)
        };
        // Overlap 250..800 = 550 ms.
        assert!(jumped("600000000").violations.is_empty());
        assert_eq!(rules(&jumped("300000000")), ["mutual exclusion"]);
    }

    #[test]
    fn figures_name_every_fault_kind() {
        let r = H::default()
            .first_holder()
            .fault(1, 100, 400, "pause-worker", &[("target", "worker1")])
            .release(1, 2, 1, 500)
            .check();
        let text = figures(&r);
        assert!(text.contains("pause-worker"), "{text}");
        assert!(text.contains("violations 0"), "{text}");
    }
}
