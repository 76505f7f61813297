//! A node's boot value, and the acquires that check it.
//!
//! A node that lost its data (restarted without persistence, or flushed) has forgotten the
//! grants it gave, so it must sit out of majorities until they have all expired. It is told
//! from a node that kept its data by its **boot value**: a random value under `<prefix>:boot`,
//! seeded once with the server's time (`'<random>@<seeded ms>'`), gone with the data.
//!
//! Every acquire on a node reads it, in the **same pipeline as the acquire** on the node's one
//! connection: `GET <boot>`, `TIME`, then the acquire's commands (an uncontended one is a
//! plain `SET NX PX`; see `AcquireRounds`, whose second round, for a busy answer, carries the
//! check again). A server that restarts closes its connections, so the answers of one
//! pipeline come from one server life: if the boot value is the one the client last saw, the
//! acquire ran on a node that still has every grant it gave. A plain read costs the server a
//! fraction of what a script's `redis.call` does, and the check needs no script at all. `TIME`
//! tells the node's clock for the check of clocks that run ahead (`clocks.rs`).
//!
//! When the boot value is missing (the node lost its data), it is seeded at once (one more
//! round trip, only then) and the node's answers to that pipeline are not used; when it is
//! another value, it is adopted. Either way the node sits out for what is left of the
//! quarantine since the seeding (`QuorumStore::restarted`). The acquire's commands still ran
//! there; the keys they set are harmless copies (the acquire's rollback, or the lease's
//! release, removes them; else they expire).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionManager;

use super::NodeState;
use crate::error::StoreError;
use crate::store::batch::Batch;
use crate::store::scripts::acquire::{AcquireItem, AcquireReply, AcquireRounds, Acquires};
use crate::store::scripts::{Calls, Pipe};
use crate::token::Token;

/// What one node of a quorum answered to an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeAcquire {
    /// The node kept its data: its answer, and its clock when it answered (µs, `TIME`).
    Replied { reply: AcquireReply, clock_us: u64 },
    /// The node's boot value is not the one the client saw: it lost its data since (restart
    /// without persistence, flush), or the client never saw it. Its answer does not count.
    Restarted(Boot),
}

/// A node's boot value, and how long ago (on its clock) it was seeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Boot {
    pub(crate) value: String,
    pub(crate) age: Duration,
}

impl Boot {
    /// From `'<random>@<seeded ms>'` and the server's time in ms.
    pub(crate) fn parse(value: &str, now_ms: u64) -> Self {
        let seeded = value
            .rsplit_once('@')
            .and_then(|(_, ms)| ms.parse::<u64>().ok())
            .unwrap_or(0);
        Self {
            value: value.to_owned(),
            age: Duration::from_millis(now_ms.saturating_sub(seeded)),
        }
    }
}

/// Seeds a node's boot key if it is missing and answers its value and the server's time in ms.
/// Run at connect, and when an acquire finds the key gone.
pub(super) const SEED_BOOT: &str = "
    local t = redis.call('TIME')
    local now_ms = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
    redis.call('SET', KEYS[1], ARGV[1] .. '@' .. now_ms, 'NX')
    return { redis.call('GET', KEYS[1]), tonumber(now_ms) }
";

/// Seeds the boot key `boot_key` on `conn` if it is missing; its value, as found or seeded.
pub(super) async fn seed(conn: &ConnectionManager, boot_key: &str) -> Result<Boot, StoreError> {
    let seeded: (String, u64) = redis::Script::new(SEED_BOOT)
        .key(boot_key)
        .arg(Token::generate().as_str())
        .invoke_async(&mut conn.clone())
        .await?;
    Ok(Boot::parse(&seeded.0, seeded.1))
}

/// What the head of a node's pipeline (`GET <boot>`, `TIME`) said.
enum Life {
    /// The boot value the client last saw, and the node's clock in µs.
    Same { clock_us: u64 },
    /// Another boot value (seeded here if it was missing).
    Other(Boot),
}

/// A server's `TIME` answer in µs.
fn micros(value: Value) -> Result<u64, StoreError> {
    let (secs, micros): (u64, u64) =
        redis::from_redis_value(value).map_err(redis::RedisError::from)?;
    Ok(secs.saturating_mul(1_000_000).saturating_add(micros))
}

/// Acquires on one node, many per call, behind the node's boot check (see the module docs).
#[derive(Clone)]
pub(super) struct NodeAcquires {
    pub(super) conn: ConnectionManager,
    /// `<prefix>:boot`.
    pub(super) boot_key: Arc<str>,
    pub(super) state: Arc<Mutex<NodeState>>,
}

impl NodeAcquires {
    /// Sends `body` behind `GET <boot>` and `TIME` in one pipeline; on `NOSCRIPT`, loads the
    /// scripts and sends the calls that found none once more, behind the check again. The
    /// answers to `body`, in order, if the node's life is the one last seen.
    async fn checked(&self, body: Pipe) -> Result<(Life, Vec<Value>), StoreError> {
        let seen = super::lock_state(&self.state).boot.clone();
        let head = |pipe: &mut Pipe| {
            let mut get = redis::cmd("GET");
            get.arg(&*self.boot_key);
            pipe.plain(get);
            pipe.plain(redis::cmd("TIME"));
        };
        let mut pipe = Pipe::with_capacity(body.len() + 2);
        head(&mut pipe);
        for (i, cmd) in body.commands().enumerate() {
            match body.script_of(i) {
                Some(script) => pipe.script(script, cmd.clone()),
                None => pipe.plain(cmd.clone()),
            }
        }
        let mut values = pipe.send(&self.conn).await?;
        let mut life = self.life(&seen, &mut values).await?;
        let missing: Vec<usize> = (0..body.len())
            .filter(|&i| body.no_script(i, &values[i]))
            .collect();
        if matches!(life, Life::Same { .. }) && !missing.is_empty() {
            body.load(&self.conn, &missing).await?;
            let mut again = Pipe::with_capacity(missing.len() + 2);
            head(&mut again);
            let cmds: Vec<&redis::Cmd> = body.commands().collect();
            for &i in &missing {
                if let Some(script) = body.script_of(i) {
                    again.script(script, cmds[i].clone());
                }
            }
            let mut answers = again.send(&self.conn).await?;
            life = self.life(&seen, &mut answers).await?;
            for (&i, value) in missing.iter().zip(answers) {
                values[i] = value;
            }
        }
        Ok((life, values))
    }

    /// Reads the head of a pipeline's answers (taking it off `values`): the node's life, and
    /// its clock.
    async fn life(&self, seen: &str, values: &mut Vec<Value>) -> Result<Life, StoreError> {
        let mut head = values.drain(..2);
        let (Some(boot), Some(time)) = (head.next(), head.next()) else {
            return Err(StoreError::Protocol {
                message: "a quorum node's pipeline lost its boot check".to_owned(),
            });
        };
        drop(head);
        let clock_us = micros(time)?;
        let boot: Option<String> =
            redis::from_redis_value(boot).map_err(redis::RedisError::from)?;
        Ok(match boot {
            Some(value) if value == seen => Life::Same { clock_us },
            Some(value) => Life::Other(Boot::parse(&value, clock_us / 1000)),
            None => Life::Other(seed(&self.conn, &self.boot_key).await?),
        })
    }
}

/// A lease's copy to take again on a node: its lock key, the lease's token and the ttl (ms).
pub(super) type LostCopy<'a> = (&'a str, &'a Token, u64);

/// What a node answered to re-taking lost copies of leases (see [`NodeAcquires::retake`]).
pub(super) enum Retaken {
    /// Per key: whether it was free and is now the lease's.
    Keys(Vec<bool>),
    /// The node's life is not the one last seen: nothing it answered counts.
    Restarted(Boot),
}

impl NodeAcquires {
    /// Re-takes `keys` (a lock key, the token its lease holds it under, the ttl to set) on
    /// this node, each only if it is free (`SET key token NX PX ttl`), behind the boot check.
    /// The boot value is read first, on its own: a node that lost its data since the client
    /// last saw it is told apart before anything is written there (it sits out its
    /// quarantine, and is healed at a renewal after that). The writes then carry the check
    /// again, for a restart in between.
    pub(super) async fn retake(&self, keys: &[LostCopy<'_>]) -> Result<Retaken, StoreError> {
        if let (Life::Other(boot), _) = self.checked(Pipe::default()).await? {
            return Ok(Retaken::Restarted(boot));
        }
        let mut pipe = Pipe::with_capacity(keys.len());
        for (key, token, ttl_ms) in keys {
            let mut cmd = redis::cmd("SET");
            cmd.arg(*key)
                .arg(token.as_str())
                .arg("NX")
                .arg("PX")
                .arg(*ttl_ms);
            pipe.plain(cmd);
        }
        let (life, values) = self.checked(pipe).await?;
        Ok(match life {
            Life::Same { .. } => Retaken::Keys(
                values
                    .iter()
                    .map(|v| {
                        matches!(v, Value::Okay)
                            || matches!(v, Value::SimpleString(ok) if ok == "OK")
                    })
                    .collect(),
            ),
            Life::Other(boot) => Retaken::Restarted(boot),
        })
    }
}

impl Batch for NodeAcquires {
    type Item = AcquireItem;
    type Reply = Result<NodeAcquire, StoreError>;
    const FLUSH_AT: usize = <Acquires as Calls>::FLUSH_AT;

    /// The batch in [`AcquireRounds`], every round behind the boot check: a node whose life
    /// changed at any round answers `Restarted` for every item.
    async fn run(&self, items: &[AcquireItem]) -> Result<Vec<Self::Reply>, StoreError> {
        let mut rounds = AcquireRounds::new(items, false);
        let mut clock: Option<u64> = None;
        while let Some(pipe) = rounds.next_round() {
            let (life, values) = self.checked(pipe).await?;
            match life {
                Life::Same { clock_us } => {
                    clock.get_or_insert(clock_us);
                }
                Life::Other(boot) => {
                    return Ok(vec![Ok(NodeAcquire::Restarted(boot)); items.len()]);
                }
            }
            rounds.answer(values.into_iter().map(Ok).collect());
        }
        let clock_us = clock.unwrap_or_default();
        Ok(rounds
            .replies()
            .into_iter()
            .map(|reply| reply.map(|reply| NodeAcquire::Replied { reply, clock_us }))
            .collect())
    }
    // A grant nobody waits for (its caller's per-node deadline passed) is not undone here:
    // a waiter keeps its token across busy attempts, so a release that left later than the
    // next attempt's acquire would delete that attempt's copy on this node, and the lease
    // would count a vote it no longer has. The attempt's rollback (sent on the connection,
    // in order) or the grant's ttl clears it; a later attempt with the token re-takes it.
}
