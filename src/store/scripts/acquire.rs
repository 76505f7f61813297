//! Acquires: the uncontended one of a lazy lease is a plain `SET key token NX PX ttl`, and
//! everything else is `acquire.lua`, after `fence.lua` (take locks, mark them for waiters,
//! reserve them for the starving, read the wait, and mint the fences of those that ask for one
//! now: contract in the `.lua` header). [`AcquireRounds`] decides which goes where.

use std::sync::LazyLock;

use redis::{Cmd, Value};

use super::release::ReleaseItem;
use super::{Calls, Conn, Lua, Pipe, Publish, Replicas, codes};
use crate::error::StoreError;
use crate::keys::{LockKeys, slot_of};
use crate::store::batch::Batch;
use crate::store::requests::Acquire;
pub(crate) use crate::store::requests::Waits;
use crate::token::Token;

pub(crate) static SCRIPT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("fence.lua"),
        include_str!("acquire.lua")
    ))
});

/// The answer to one acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Granted; `fence` is the grant's fence if it was minted with it (an eager lease, and
    /// every grant of a semaphore, a read-write lock or a multi-lock), `None` if the lease
    /// mints it when first asked.
    Granted { fence: Option<u64> },
    /// `pttl` is the holder's remaining ttl; `None` if the key has no expiry.
    Busy { pttl: Option<std::time::Duration> },
    /// Granted, but fewer replicas than required acknowledged it in time: the caller must
    /// not use it (and releases it).
    Unreplicated { acked: u32, wanted: u32 },
}

impl AcquireReply {
    /// One reply of a script that always mints (`acquire_permits.lua`, `acquire_read.lua`,
    /// `acquire_write.lua`): a fence (> 0), or −(pttl + 1) when busy.
    pub(crate) fn from_code(code: i64) -> Self {
        match u64::try_from(code) {
            Ok(fence) if fence > 0 => Self::Granted { fence: Some(fence) },
            _ => Self::Busy {
                pttl: u64::try_from(-(code + 1))
                    .ok()
                    .map(std::time::Duration::from_millis),
            },
        }
    }

    /// One item of `acquire.lua`'s reply: a fence (> 0), 0 for a grant that minted none, or
    /// −(pttl + 2) when busy (−1: the key has no expiry).
    pub(crate) fn from_acquire_code(code: i64) -> Self {
        match u64::try_from(code) {
            Ok(0) => Self::Granted { fence: None },
            Ok(fence) => Self::Granted { fence: Some(fence) },
            Err(_) => Self::Busy {
                pttl: u64::try_from(-(code + 2))
                    .ok()
                    .map(std::time::Duration::from_millis),
            },
        }
    }
}

/// One lock to acquire, owned so it can wait in a batch.
#[derive(Clone)]
pub(crate) struct AcquireItem {
    pub(crate) keys: LockKeys,
    pub(crate) token: Token,
    pub(crate) ttl_ms: u64,
    pub(crate) waits: Waits,
    /// Replica acknowledgement the grant needs, if any.
    pub(crate) replicas: Option<Replicas>,
    /// Mint the grant's fence with it (an eager lease); else the lease mints it when asked.
    pub(crate) mint: bool,
}

impl AcquireItem {
    /// The item of one acquire, owned.
    pub(crate) fn of(req: &Acquire<'_>) -> Self {
        Self {
            keys: req.keys.clone(),
            token: req.token.clone(),
            ttl_ms: super::millis(req.ttl),
            waits: req.waits,
            replicas: req.replicas,
            mint: req.mint,
        }
    }

    /// Whether its first try is the plain command (`SET key token NX PX ttl`): a lazy lease's
    /// acquire by a caller that does not wait yet (a waiter marks the lock or takes a
    /// reservation: the script's work), without replica acknowledgement.
    pub(crate) fn is_fast(&self) -> bool {
        !self.mint && self.waits == Waits::No && self.replicas.is_none()
    }

    /// The item's four arguments to `acquire.lua`.
    fn args(&self, cmd: &mut Cmd) {
        cmd.arg(self.token.as_str())
            .arg(self.ttl_ms)
            .arg(self.waits.arg())
            .arg(if self.mint { "1" } else { "0" });
    }
}

/// Acquires, many per call.
#[derive(Clone)]
pub(crate) struct Acquires;

impl Acquires {
    /// Replies to a call that ran with `WAIT` behind it: a grant counts only if at least
    /// `acked` replicas is what its item asked for.
    pub(crate) fn acknowledged(
        replies: Vec<AcquireReply>,
        items: &[&AcquireItem],
        acked: u32,
    ) -> Vec<AcquireReply> {
        replies
            .into_iter()
            .zip(items)
            .map(|(reply, item)| match (reply, item.replicas) {
                (AcquireReply::Granted { .. }, Some(r)) if acked < r.count => {
                    AcquireReply::Unreplicated {
                        acked,
                        wanted: r.count,
                    }
                }
                (reply, _) => reply,
            })
            .collect()
    }
}

impl Calls for Acquires {
    type Item = AcquireItem;
    type Reply = AcquireReply;
    /// Measured with 32 and 64 tasks cycling acquire/release on distinct keys (peer bench
    /// W2): 16 splits a client's acquires into calls that take turns on the server; 32 (each
    /// kind sees about half the tasks) put them all in one call, 6 paid a call per few items.
    const FLUSH_AT: usize = 16;

    fn slot_key(item: &AcquireItem) -> &str {
        &item.keys.lock
    }

    fn encode(&self, items: &[&AcquireItem]) -> (&'static Lua, Cmd) {
        let mut cmd = SCRIPT.call(2 * items.len(), 4 * items.len(), 128 * items.len());
        for item in items {
            cmd.arg(&item.keys.lock).arg(&*item.keys.fence);
        }
        for item in items {
            item.args(&mut cmd);
        }
        (&SCRIPT, cmd)
    }

    fn decode(
        &self,
        reply: Value,
        items: &[&AcquireItem],
    ) -> Result<Vec<AcquireReply>, StoreError> {
        Ok(codes(reply, items.len(), "acquire")?
            .into_iter()
            .map(AcquireReply::from_acquire_code)
            .collect())
    }

    /// A grant nobody waits for any more: give it back at once rather than at its ttl.
    fn undo(&self, item: AcquireItem, reply: &AcquireReply) -> Option<ReleaseItem> {
        matches!(
            reply,
            AcquireReply::Granted { .. } | AcquireReply::Unreplicated { .. }
        )
        .then_some(ReleaseItem {
            keys: item.keys,
            token: item.token,
        })
    }
}

/// Acquires batched on one connection (a primary): each batch in [`AcquireRounds`], each
/// round one pipelined write. A grant whose caller is gone is released in the background on
/// the same connection, publishing as `publish` says.
#[derive(Clone)]
pub(crate) struct AcquiresOnConn<C> {
    pub(crate) conn: C,
    pub(crate) publish: Publish,
}

impl<C: Conn> Batch for AcquiresOnConn<C> {
    type Item = AcquireItem;
    type Reply = Result<AcquireReply, StoreError>;
    const FLUSH_AT: usize = <Acquires as Calls>::FLUSH_AT;

    async fn run(&self, items: &[AcquireItem]) -> Result<Vec<Self::Reply>, StoreError> {
        let mut rounds = AcquireRounds::new(items, false);
        while let Some(pipe) = rounds.next_round() {
            let values = pipe.send_loading(&self.conn).await?;
            rounds.answer(values.into_iter().map(Ok).collect());
        }
        Ok(rounds.replies())
    }

    fn abandoned(&self, item: AcquireItem, reply: Self::Reply) {
        if let Ok(reply) = reply
            && let Some(undo) = Acquires.undo(item, &reply)
        {
            super::release::in_background(self.conn.clone(), self.publish, undo);
        }
    }
}

/// How a batch of acquires travels, in at most two rounds of one pipeline each:
///
/// 1. every **fast** item (a lazy lease's acquire by a caller that does not wait yet, without
///    replica acknowledgement) is the command a raw client sends, `SET key token NX PX ttl`;
///    the other items go in script calls (`acquire.lua`: one per batch on a primary or a
///    quorum node, one per hash slot on a cluster node);
/// 2. the fast items answered nil (the lock was taken, or holds the item's own token: a retry
///    of a grant whose reply was lost, or a hand-off's) go to the script, which tells a retry
///    from a busy lock and reads the holder's remaining ttl.
///
/// An uncontended batch is one round of plain `SET`s; only a busy answer pays for a script.
/// The driver sends each round's [`Pipe`] and hands its answers back:
///
/// ```text
/// let mut rounds = AcquireRounds::new(&items, by_slot);
/// while let Some(pipe) = rounds.next_round() {
///     let answers = send(pipe).await?;
///     rounds.answer(answers);
/// }
/// rounds.replies()
/// ```
pub(crate) struct AcquireRounds<'a> {
    items: &'a [AcquireItem],
    /// One script call per hash slot (a cluster node), rather than one for all.
    by_slot: bool,
    replies: Vec<Option<Result<AcquireReply, StoreError>>>,
    /// The items the script decides next (round 2).
    to_script: Vec<usize>,
    /// What each command of the round on the wire answers.
    sent: Vec<RoundCall>,
    round: u8,
}

/// One command of a round: an item's `SET NX PX`, or a script call for some items.
enum RoundCall {
    Set(usize),
    Script(Vec<usize>),
}

impl<'a> AcquireRounds<'a> {
    pub(crate) fn new(items: &'a [AcquireItem], by_slot: bool) -> Self {
        Self {
            items,
            by_slot,
            replies: (0..items.len()).map(|_| None).collect(),
            to_script: Vec::new(),
            sent: Vec::with_capacity(items.len()),
            round: 0,
        }
    }

    /// The commands of the next round, or `None` when every item has its answer.
    pub(crate) fn next_round(&mut self) -> Option<Pipe> {
        self.round += 1;
        self.sent.clear();
        let scripted = match self.round {
            1 if self.items.is_empty() => return None,
            1 => {
                // No list of the fast ones: an uncontended batch is all of them.
                let fast = self.items.iter().filter(|item| item.is_fast()).count();
                let mut pipe = Pipe::with_capacity(fast + 1);
                for (i, item) in self.items.iter().enumerate() {
                    if item.is_fast() {
                        pipe.plain(set_nx(item));
                        self.sent.push(RoundCall::Set(i));
                    }
                }
                let scripted: Vec<usize> = if fast == self.items.len() {
                    Vec::new()
                } else {
                    (0..self.items.len())
                        .filter(|&i| !self.items[i].is_fast())
                        .collect()
                };
                return Some(self.with_scripts(pipe, scripted));
            }
            2 => std::mem::take(&mut self.to_script),
            _ => return None,
        };
        if scripted.is_empty() {
            return None;
        }
        Some(self.with_scripts(Pipe::with_capacity(1), scripted))
    }

    /// `pipe` with the script calls for `scripted` appended.
    fn with_scripts(&mut self, mut pipe: Pipe, scripted: Vec<usize>) -> Pipe {
        for group in self.groups(scripted) {
            let refs: Vec<&AcquireItem> = group.iter().map(|&i| &self.items[i]).collect();
            let (script, cmd) = Acquires.encode(&refs);
            pipe.script(script, cmd);
            self.sent.push(RoundCall::Script(group));
        }
        pipe
    }

    /// The script calls for `items`: one, or one per hash slot (in the order of first use).
    fn groups(&self, items: Vec<usize>) -> Vec<Vec<usize>> {
        if items.is_empty() {
            return Vec::new();
        }
        if !self.by_slot {
            return vec![items];
        }
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for i in items {
            let slot = slot_of(&self.items[i].keys.lock);
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, group)) => group.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        groups.into_iter().map(|(_, group)| group).collect()
    }

    /// The answers to the round last sent, one per command, in order.
    pub(crate) fn answer(&mut self, answers: Vec<Result<Value, StoreError>>) {
        let sent = std::mem::take(&mut self.sent);
        if answers.len() != sent.len() {
            let err = StoreError::Protocol {
                message: format!(
                    "an acquire round of {} commands got {} answers",
                    sent.len(),
                    answers.len()
                ),
            };
            for call in sent {
                for i in call.items() {
                    self.replies[i] = Some(Err(err.clone()));
                }
            }
            return;
        }
        for (call, answer) in sent.into_iter().zip(answers) {
            let answer = answer.and_then(|value| match value {
                Value::ServerError(err) => Err(redis::RedisError::from(err).into()),
                value => Ok(value),
            });
            match call {
                RoundCall::Set(i) => match answer {
                    Ok(Value::Nil) => self.to_script.push(i),
                    Ok(Value::Okay) => {
                        self.replies[i] = Some(Ok(AcquireReply::Granted { fence: None }))
                    }
                    Ok(Value::SimpleString(ok)) if ok == "OK" => {
                        self.replies[i] = Some(Ok(AcquireReply::Granted { fence: None }));
                    }
                    Ok(other) => {
                        self.replies[i] = Some(Err(StoreError::Protocol {
                            message: format!("SET NX answered {other:?}"),
                        }));
                    }
                    Err(err) => self.replies[i] = Some(Err(err)),
                },
                RoundCall::Script(group) => {
                    let refs: Vec<&AcquireItem> = group.iter().map(|&i| &self.items[i]).collect();
                    match answer.and_then(|value| Acquires.decode(value, &refs)) {
                        Ok(replies) => {
                            for (i, reply) in group.into_iter().zip(replies) {
                                self.replies[i] = Some(Ok(reply));
                            }
                        }
                        Err(err) => {
                            for i in group {
                                self.replies[i] = Some(Err(err.clone()));
                            }
                        }
                    }
                }
            }
        }
    }

    /// Every item's answer, in order.
    pub(crate) fn replies(self) -> Vec<Result<AcquireReply, StoreError>> {
        self.replies
            .into_iter()
            .map(|reply| {
                reply.unwrap_or_else(|| {
                    Err(StoreError::Protocol {
                        message: "an acquire was not answered".to_owned(),
                    })
                })
            })
            .collect()
    }
}

/// `SET key token NX PX ttl`: what a raw client sends to take a lock, sized at once.
fn set_nx(item: &AcquireItem) -> Cmd {
    let mut cmd = Cmd::with_capacity(6, item.keys.lock.len() + item.token.as_str().len() + 32);
    cmd.arg("SET")
        .arg(&item.keys.lock)
        .arg(item.token.as_str())
        .arg("NX")
        .arg("PX")
        .arg(item.ttl_ms);
    cmd
}

impl RoundCall {
    fn items(self) -> Vec<usize> {
        match self {
            Self::Set(i) => vec![i],
            Self::Script(group) => group,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn acquire_codes_decode_to_grants_with_or_without_fence_and_busy_replies() {
        let busy = |ms| AcquireReply::Busy {
            pttl: Some(Duration::from_millis(ms)),
        };
        assert_eq!(
            AcquireReply::from_acquire_code(1_700_000_000_000_001),
            AcquireReply::Granted {
                fence: Some(1_700_000_000_000_001)
            }
        );
        assert_eq!(
            AcquireReply::from_acquire_code(0),
            AcquireReply::Granted { fence: None },
            "a grant that leaves its fence to the lease"
        );
        assert_eq!(
            AcquireReply::from_acquire_code(-1),
            AcquireReply::Busy { pttl: None },
            "a key without expiry"
        );
        assert_eq!(AcquireReply::from_acquire_code(-2), busy(0));
        assert_eq!(AcquireReply::from_acquire_code(-30_002), busy(30_000));
        assert_eq!(
            AcquireReply::from_acquire_code(i64::MIN),
            busy(i64::MAX as u64 - 1)
        );
    }

    #[test]
    fn codes_of_the_scripts_that_always_mint_decode_to_grants_and_busy_replies() {
        let busy = |ms| AcquireReply::Busy {
            pttl: Some(Duration::from_millis(ms)),
        };
        assert_eq!(
            AcquireReply::from_code(1_700_000_000_000_001),
            AcquireReply::Granted {
                fence: Some(1_700_000_000_000_001)
            }
        );
        assert_eq!(
            AcquireReply::from_code(1),
            AcquireReply::Granted { fence: Some(1) }
        );
        assert_eq!(AcquireReply::from_code(-1), busy(0));
        assert_eq!(AcquireReply::from_code(-30_001), busy(30_000));
        assert_eq!(
            AcquireReply::from_code(0),
            AcquireReply::Busy { pttl: None },
            "a key without expiry"
        );
        assert_eq!(AcquireReply::from_code(i64::MIN), busy(i64::MAX as u64));
    }

    fn item(name: &str, waits: Waits, mint: bool) -> AcquireItem {
        let fences = crate::keys::Fences::shared("p");
        AcquireItem {
            keys: LockKeys::new("p", &fences, name).expect("name"),
            token: Token::generate(),
            ttl_ms: 30_000,
            waits,
            replicas: None,
            mint,
        }
    }

    fn commands(pipe: &Pipe) -> Vec<String> {
        pipe.commands()
            .map(|cmd| {
                let first = cmd.args_iter().next();
                match first {
                    Some(redis::Arg::Simple(arg)) => String::from_utf8_lossy(arg).into_owned(),
                    _ => String::new(),
                }
            })
            .collect()
    }

    /// An uncontended lazy acquire is a plain `SET NX PX`; a waiter's and an eager one go to
    /// the script at once; a `SET` answered nil goes to the script in a second round, which
    /// decides between busy and a retried grant.
    #[test]
    fn rounds_send_the_plain_command_first_and_only_a_nil_to_the_script() {
        let items = [
            item("free", Waits::No, false),
            item("taken", Waits::No, false),
            item("waited", Waits::Listening, false),
            item("eager", Waits::No, true),
        ];
        assert!(items[0].is_fast() && !items[2].is_fast() && !items[3].is_fast());
        let mut rounds = AcquireRounds::new(&items, false);
        let first = rounds.next_round().expect("round 1");
        assert_eq!(commands(&first), ["SET", "SET", "EVALSHA"]);
        rounds.answer(vec![
            Ok(Value::Okay),
            Ok(Value::Nil),
            Ok(Value::Array(vec![Value::Int(-20_002), Value::Int(7)])),
        ]);
        let second = rounds.next_round().expect("round 2: the nil");
        assert_eq!(commands(&second), ["EVALSHA"]);
        rounds.answer(vec![Ok(Value::Int(-10_002))]);
        assert!(rounds.next_round().is_none(), "two rounds at most");
        let replies: Vec<AcquireReply> = rounds
            .replies()
            .into_iter()
            .map(|r| r.expect("answered"))
            .collect();
        let busy = |ms| AcquireReply::Busy {
            pttl: Some(Duration::from_millis(ms)),
        };
        assert_eq!(
            replies,
            [
                AcquireReply::Granted { fence: None },
                busy(10_000),
                busy(20_000),
                AcquireReply::Granted { fence: Some(7) },
            ]
        );
    }

    /// A batch with nothing contended is one round; an error answers the items of its call.
    #[test]
    fn an_uncontended_batch_is_one_round_and_errors_stay_with_their_call() {
        let items = [item("a", Waits::No, false), item("b", Waits::No, false)];
        let mut rounds = AcquireRounds::new(&items, false);
        let first = rounds.next_round().expect("round 1");
        assert_eq!(commands(&first), ["SET", "SET"]);
        rounds.answer(vec![Ok(Value::Okay), Err(StoreError::unreachable("down"))]);
        assert!(rounds.next_round().is_none());
        let replies = rounds.replies();
        assert_eq!(
            replies[0].as_ref().ok(),
            Some(&AcquireReply::Granted { fence: None })
        );
        assert!(replies[1].is_err());
    }

    /// On a cluster node, the script items go in one call per hash slot.
    #[test]
    fn by_slot_rounds_make_one_script_call_per_slot() {
        let items = [
            item("x", Waits::Listening, false),
            item("y", Waits::Listening, false),
            item("x", Waits::Starving, false),
        ];
        let mut rounds = AcquireRounds::new(&items, true);
        let first = rounds.next_round().expect("round 1");
        assert_eq!(commands(&first), ["EVALSHA", "EVALSHA"]);
        let mut single = AcquireRounds::new(&items, false);
        assert_eq!(
            commands(&single.next_round().expect("round 1")),
            ["EVALSHA"]
        );
    }
}
