//! The Lua side: `ratelimit.lua` runs one or more rate-limit operations per call (checks,
//! reservations, refunds, penalties, resets, any-of checks), each over one or more policies
//! of one subject, all or nothing, or for an any-of the first policy that allows (contract
//! in the `.lua` header). The script is the shared helpers, one file
//! per algorithm (the token bucket runs GCRA's), the lockout, then the driver; a clock comes
//! first (the algorithms read its `slack` when they rewrite a state counted in another unit).
//!
//! The production script reads the server's clock (`ratelimit/clock.lua`). With the
//! `test-util` feature, a second script text takes the time from the caller, for the model
//! checks that replay traces at chosen instants; it is never sent without that feature.

use std::sync::LazyLock;

use redis::{Cmd, Value};

use super::gcra::figures as gcra_figures;
use super::{PolicyParams, RateOp, RateReply, RateRequest, ScriptAlgorithm, Verdict};
use crate::error::StoreError;
#[cfg(feature = "test-util")]
use crate::store::scripts::Conn;
use crate::store::scripts::{Calls, Lua, codes, decimal, per_item};

/// The script text up to the clock: the helpers and the algorithms.
macro_rules! algorithms {
    () => {
        concat!(
            include_str!("common.lua"),
            include_str!("gcra_debt.lua"),
            include_str!("gcra.lua"),
            include_str!("fixed_window.lua"),
            include_str!("sliding_window.lua"),
            include_str!("sliding_log.lua"),
            include_str!("lockout.lua"),
        )
    };
}

/// Test-only: the clock of the `_AT` scripts: the time given as ARGV[1] (µs since the
/// epoch), and an hour of slack on every ttl, since the server expires keys on its own clock.
#[cfg(feature = "test-util")]
macro_rules! test_clock {
    () => {
        "local now = tonumber(ARGV[1])\nlocal slack = 3600000\nlocal arg = 2\n"
    };
}

pub(crate) static SCRIPT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("clock.lua"),
        algorithms!(),
        include_str!("ratelimit.lua"),
    ))
});

/// The hot path: checks under one GCRA-family policy each, many per call, answered with one
/// integer each (contract in `ratelimit/gcra_checks.lua`). It defines no functions, so a
/// call costs the server about a third of the general script's.
pub(crate) static GCRA_CHECKS: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("clock.lua"),
        include_str!("gcra_debt.lua"),
        include_str!("gcra_checks.lua"),
    ))
});

/// Test-only: [`GCRA_CHECKS`] deciding at the time given as ARGV[1], as [`SCRIPT_AT`].
#[cfg(feature = "test-util")]
pub(crate) static GCRA_CHECKS_AT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        test_clock!(),
        include_str!("gcra_debt.lua"),
        include_str!("gcra_checks.lua"),
    ))
});

/// Test-only: the same script deciding at the time given as ARGV[1] (µs since the epoch);
/// every ttl it sets gets an hour of slack, since the server expires keys on its own clock.
#[cfg(feature = "test-util")]
pub(crate) static SCRIPT_AT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        test_clock!(),
        algorithms!(),
        include_str!("ratelimit.lua"),
    ))
});

/// One operation, owned so it can wait in a batch.
pub(crate) struct RateItem {
    pub(crate) keys: Vec<String>,
    pub(crate) params: Vec<PolicyParams>,
    pub(crate) op: RateOp,
}

impl RateItem {
    /// The cost and policy of a check under one GCRA-family policy without a lockout: what
    /// [`GCRA_CHECKS`] decides.
    fn gcra_check(&self) -> Option<(u32, PolicyParams)> {
        match (self.op, self.params.as_slice()) {
            (RateOp::Check { cost }, [p])
                if matches!(p.kind, ScriptAlgorithm::Gcra | ScriptAlgorithm::TokenBucket)
                    && p.lockout.is_none() =>
            {
                Some((cost, *p))
            }
            _ => None,
        }
    }

    pub(crate) fn of(req: &RateRequest<'_>) -> Self {
        Self {
            keys: req.keys.to_vec(),
            params: req.params.to_vec(),
            op: req.op,
        }
    }
}

/// Rate-limit operations, many per call.
#[derive(Clone)]
pub(crate) struct Rates;

/// Whether a call of rate-limit items is written with the lean script: every item is a check
/// under one GCRA-family policy (see [`RateItem::gcra_check`]). Asked again where needed
/// rather than collected: a call of one item must not allocate for it.
fn gcra_checks(items: &[&RateItem]) -> bool {
    items.iter().all(|item| item.gcra_check().is_some())
}

/// The command of one call of `items` with `script` (the lean `fast` one when the items allow),
/// after `leading` ARGV (the test clock's time, or none).
fn encode(
    script: &'static Lua,
    fast: &'static Lua,
    leading: Option<&str>,
    items: &[&RateItem],
) -> (&'static Lua, Cmd) {
    if gcra_checks(items) {
        let bytes = items.iter().map(|item| item.keys[0].len() + 40).sum();
        let mut cmd = fast.call(items.len(), 1 + items.len(), bytes);
        for item in items {
            cmd.arg(&item.keys[0]);
        }
        if let Some(leading) = leading {
            cmd.arg(leading);
        }
        // One text per check, `<cost>:<unit µs>:<count>`; a batch usually repeats one, and
        // the script parses it once. Written without a formatter (this runs per check).
        let mut text = Vec::with_capacity(48);
        let mut last = None;
        for (cost, p) in items.iter().filter_map(|item| item.gcra_check()) {
            if last != Some((cost, p)) {
                text.clear();
                push_decimal(&mut text, i64::from(cost));
                text.push(b':');
                push_decimal(&mut text, p.unit_us);
                text.push(b':');
                push_decimal(&mut text, p.count);
                last = Some((cost, p));
            }
            cmd.arg(text.as_slice());
        }
        return (fast, cmd);
    }
    let keys: usize = items.iter().map(|item| item.keys.len()).sum();
    let policies: usize = items.iter().map(|item| item.params.len()).sum();
    let mut cmd = script.call(keys, 1 + 4 * items.len() + 5 * policies, 128 * keys);
    for item in items {
        for key in &item.keys {
            cmd.arg(key);
        }
    }
    if let Some(leading) = leading {
        cmd.arg(leading);
    }
    for item in items {
        let (code, amount, extra) = item.op.encode();
        cmd.arg(code).arg(amount).arg(extra).arg(item.params.len());
        for p in &item.params {
            // Only the sliding log reads how long it is kept.
            let keep = if p.kind == ScriptAlgorithm::SlidingLog {
                p.log_keep_us()
            } else {
                0
            };
            cmd.arg(p.kind.code()).arg(p.unit_us).arg(p.count).arg(keep);
            match &p.lockout {
                Some(lockout) => cmd.arg(lockout.encode()),
                None => cmd.arg("0"),
            };
        }
    }
    (script, cmd)
}

/// Appends `n` in decimal (with its sign) to `text`.
fn push_decimal(text: &mut Vec<u8>, n: i64) {
    if n < 0 {
        text.push(b'-');
    }
    let mut digits = [0u8; 20];
    text.extend_from_slice(decimal(n.unsigned_abs(), &mut digits));
}

/// The reply of [`encode`]'s call: one answer per item.
fn decode(reply: Value, items: &[&RateItem]) -> Result<Vec<RateReply>, StoreError> {
    match gcra_checks(items) {
        true => codes(reply, items.len(), "gcra_checks")?
            .into_iter()
            .zip(items.iter().filter_map(|item| item.gcra_check()))
            .map(|(code, (cost, p))| gcra_check_reply(code, cost, p))
            .collect(),
        false => per_item(reply, items.len(), "ratelimit")?
            .iter()
            .zip(items)
            .map(|(text, item)| {
                parse_reply(text, item.params.len()).and_then(|r| granted(r, item.op))
            })
            .collect(),
    }
}

impl Calls for Rates {
    type Item = RateItem;
    type Reply = RateReply;
    /// Measured with 40 to 200 callers on 1000 subjects (peer bench W5): a check costs the
    /// server 3-4 µs in a batch and a call ~35 µs more, so calls of 32 share that well and a
    /// client's callers still split into calls that take turns on the server; 16 and 64 were
    /// slower at every count tried, 6 (the old value) much slower.
    const FLUSH_AT: usize = 32;

    /// Every key of one operation shares the subject's slot.
    fn slot_key(item: &RateItem) -> &str {
        item.keys.first().map_or("", String::as_str)
    }

    fn encode(&self, items: &[&RateItem]) -> (&'static Lua, Cmd) {
        encode(&SCRIPT, &GCRA_CHECKS, None, items)
    }

    fn decode(&self, reply: Value, items: &[&RateItem]) -> Result<Vec<RateReply>, StoreError> {
        decode(reply, items)
    }
}

/// Test-only: one operation decided at `now_us` (µs since the epoch), on `conn`.
#[cfg(feature = "test-util")]
pub(crate) async fn check_at<C: Conn>(
    conn: &C,
    item: RateItem,
    now_us: u64,
) -> Result<RateReply, StoreError> {
    let items = [&item];
    let (script, cmd) = encode(
        &SCRIPT_AT,
        &GCRA_CHECKS_AT,
        Some(&now_us.to_string()),
        &items,
    );
    let reply: Value = script.invoke(&cmd, conn).await?;
    decode(reply, &items)?
        .pop()
        .ok_or_else(|| StoreError::Protocol {
            message: "ratelimit answered no check".to_owned(),
        })
}

/// The reply of one check under one GCRA-family policy, from `gcra_checks.lua`'s integer:
/// the figures `gcra.lua` would have answered, by the memory store's GCRA arithmetic.
fn gcra_check_reply(code: i64, cost: u32, p: PolicyParams) -> Result<RateReply, StoreError> {
    let allowed = code >= 0;
    // r: µs until the policy is back to full (after consuming, if the check consumed), i.e.
    // the TAT r µs after now.
    let r = if allowed { code } else { -(code + 1) };
    let interval = p.unit_us;
    if interval < 1 {
        return Err(StoreError::Protocol {
            message: format!("a GCRA check with an emission interval of {interval} µs"),
        });
    }
    let figures = gcra_figures(r, 0, interval, p.count);
    let retry = if allowed {
        0
    } else {
        // When a request of cost max(cost, 1) fits: as `gcra::decide`'s `allow_at - now`.
        let need = i64::from(cost.max(1));
        r.saturating_add(need.saturating_mul(interval))
            .saturating_sub(interval.saturating_mul(p.count))
    };
    Ok(RateReply {
        applied: allowed && cost > 0,
        wait_us: 0,
        granted: if allowed { cost } else { 0 },
        charged: None,
        verdicts: vec![Verdict::new(
            allowed,
            figures.remaining,
            retry,
            figures.reset,
        )],
    })
}

/// The units a reply of the general script consumed: an applied check's or reservation's
/// cost; for a check-up-to, its second number (its grant, where a reservation has its wait);
/// for an any-of, its cost when applied, and its second number is the charged policy's
/// number (from 1; 0 for none), which must name one of the policies.
fn granted(mut reply: RateReply, op: RateOp) -> Result<RateReply, StoreError> {
    reply.granted = match op {
        RateOp::CheckUpTo { .. } => {
            let grant = u32::try_from(reply.wait_us).unwrap_or(0);
            reply.wait_us = 0;
            grant
        }
        RateOp::AnyOf { cost } => {
            let number = usize::try_from(std::mem::take(&mut reply.wait_us)).ok();
            reply.charged = match number {
                Some(0) if !reply.applied => None,
                Some(n) if reply.applied && (1..=reply.verdicts.len()).contains(&n) => Some(n - 1),
                _ => {
                    return Err(StoreError::Protocol {
                        message: format!(
                            "an any-of answered applied = {} with policy number {number:?} of {}",
                            reply.applied,
                            reply.verdicts.len()
                        ),
                    });
                }
            };
            if reply.applied { cost } else { 0 }
        }
        RateOp::Check { cost } | RateOp::Reserve { cost, .. } if reply.applied => cost,
        _ => 0,
    };
    Ok(reply)
}

/// One operation's text: `applied wait_us`, then `allowed remaining retry_us reset_us
/// locked_us` per policy, as integers separated by single spaces.
fn parse_reply(text: &Value, policies: usize) -> Result<RateReply, StoreError> {
    let bad = || StoreError::Protocol {
        message: format!("expected 2 + 5 × {policies} integers from ratelimit, got {text:?}"),
    };
    let bytes = match text {
        Value::BulkString(bytes) => bytes.as_slice(),
        Value::SimpleString(s) => s.as_bytes(),
        _ => return Err(bad()),
    };
    let mut numbers = bytes.split(|&b| b == b' ').map(|n| {
        std::str::from_utf8(n)
            .ok()
            .and_then(|n| n.parse::<i64>().ok())
    });
    let applied = match numbers.next().flatten() {
        Some(applied @ (0 | 1)) => applied == 1,
        _ => return Err(bad()),
    };
    let wait_us = match numbers.next().flatten().map(u64::try_from) {
        Some(Ok(wait)) => wait,
        _ => return Err(bad()),
    };
    let mut verdicts = Vec::with_capacity(policies);
    for _ in 0..policies {
        let mut next = || numbers.next().flatten().ok_or_else(bad);
        let (allowed, remaining, retry, reset) = (next()?, next()?, next()?, next()?);
        let locked = next()?;
        verdicts.push(Verdict::new(allowed == 1, remaining, retry, reset).locked(locked));
    }
    if numbers.next().is_some() {
        return Err(bad());
    }
    Ok(RateReply {
        applied,
        wait_us,
        granted: 0,
        charged: None,
        verdicts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn replies_parse_per_policy() {
        let reply = parse_reply(
            &text("1 0 1 9 0 100000 0 0 0 4503599627370495 86400000000 60000000"),
            2,
        )
        .expect("valid");
        assert!(reply.applied);
        assert_eq!(reply.verdicts[0], Verdict::new(true, 9, 0, 100_000));
        assert_eq!(
            reply.verdicts[1],
            Verdict::new(false, 0, 4_503_599_627_370_495, 86_400_000_000).locked(60_000_000)
        );
        let denied = parse_reply(&text("0 0 0 0 250 1000 0"), 1).expect("valid");
        assert!(!denied.applied && !denied.verdicts[0].allowed);
        let reserved = parse_reply(&text("1 20000 1 0 0 40000 0"), 1).expect("valid");
        assert_eq!(reserved.wait_us, 20_000);
    }

    #[test]
    fn malformed_replies_are_protocol_errors() {
        for bad in [
            text(""),
            text("1 0 1 9 0 100"),
            text("1 0 1 9 0 100 0 7"),
            text("2 0 1 9 0 100 0"),
            text("1 -1 1 9 0 100 0"),
            text("1 0 1 x 0 100 0"),
            text("1 0  1 9 0 100 0"),
            Value::Int(1),
        ] {
            assert!(
                matches!(parse_reply(&bad, 1), Err(StoreError::Protocol { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn any_of_replies_name_the_charged_policy() {
        let reply =
            |s: &str| parse_reply(&text(s), 2).and_then(|r| granted(r, RateOp::AnyOf { cost: 3 }));
        let r = reply("1 2 0 0 900 1000 0 1 4 0 300 0").expect("valid");
        assert_eq!(
            (r.applied, r.charged, r.granted, r.wait_us),
            (true, Some(1), 3, 0)
        );
        let r = reply("0 0 0 0 900 1000 0 0 0 50 60 0").expect("valid");
        assert_eq!((r.applied, r.charged, r.granted), (false, None, 0));
        // Applied without a policy, a policy past the last, or a policy but not applied.
        for bad in [
            "1 0 0 0 900 1000 0 1 4 0 300 0",
            "1 3 0 0 900 1000 0 1 4 0 300 0",
            "0 1 1 4 0 300 0 0 0 50 60 0",
        ] {
            assert!(
                matches!(reply(bad), Err(StoreError::Protocol { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_production_scripts_take_no_time_from_the_client() {
        for text in [
            concat!(
                include_str!("clock.lua"),
                algorithms!(),
                include_str!("ratelimit.lua")
            ),
            concat!(
                include_str!("clock.lua"),
                include_str!("gcra_debt.lua"),
                include_str!("gcra_checks.lua")
            ),
        ] {
            assert!(text.contains("redis.call('TIME')"));
            // Checks read their ARGV from `arg` on; only the test clock reads ARGV[1] itself.
            assert!(
                !text.contains("ARGV[1]"),
                "a client-supplied time in production"
            );
        }
    }

    fn gcra(unit_us: i64, count: i64) -> PolicyParams {
        PolicyParams {
            kind: ScriptAlgorithm::Gcra,
            unit_us,
            count,
            keep_us: 0,
            lockout: None,
        }
    }

    /// The client's side of `gcra_checks.lua`: the figures `gcra.lua` answers for the same
    /// state (interval 100 ms, burst 5, so the tolerance is 500 ms).
    #[test]
    fn gcra_check_replies_carry_gcra_lua_figures() {
        let p = gcra(100_000, 5);
        // Allowed, consumed: 300 ms of debt after it, so 2 more fit now.
        let r = gcra_check_reply(300_000, 1, p).expect("valid");
        assert!(r.applied && r.wait_us == 0);
        assert_eq!(r.verdicts, vec![Verdict::new(true, 2, 0, 300_000)]);
        // A peek on a fresh subject: allowed, nothing consumed, the full burst left.
        let r = gcra_check_reply(0, 0, p).expect("valid");
        assert!(!r.applied);
        assert_eq!(r.verdicts, vec![Verdict::new(true, 5, 0, 0)]);
        // Refused with 450 ms of debt: a cost of 1 fits in 50 ms, a cost of 3 in 250 ms.
        let r = gcra_check_reply(-450_001, 1, p).expect("valid");
        assert!(!r.applied);
        assert_eq!(r.verdicts, vec![Verdict::new(false, 0, 50_000, 450_000)]);
        let r = gcra_check_reply(-450_001, 3, p).expect("valid");
        assert_eq!(r.verdicts, vec![Verdict::new(false, 0, 250_000, 450_000)]);
        // Refused for a cost of 3 with 350 ms of debt (it fits in 150 ms); one of 1 would fit now.
        let r = gcra_check_reply(-350_001, 3, p).expect("valid");
        assert_eq!(r.verdicts, vec![Verdict::new(false, 1, 150_000, 350_000)]);
        assert!(matches!(
            gcra_check_reply(0, 1, gcra(0, 5)),
            Err(StoreError::Protocol { .. })
        ));
    }
}
