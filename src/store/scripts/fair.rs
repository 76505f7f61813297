//! `fair.lua`, after `fence.lua` and `holders.lua`: the queue of a fair lock (take in arrival
//! order, leave, count; contract in the `.lua` header). The lock key itself is a lock's, so a
//! fair lease renews, mints its fence and releases as any lock's lease does.

use std::sync::LazyLock;
use std::time::Duration;

use super::acquire::AcquireReply;
use super::{Conn, Lua, Publish, Replicas, millis, publish_prelude};
use crate::error::StoreError;
use crate::keys::FairKeys;
use crate::token::Token;

static PLAIN: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        publish_prelude!(Plain),
        include_str!("fence.lua"),
        include_str!("holders.lua"),
        include_str!("fair.lua")
    ))
});
static SHARDED: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        publish_prelude!(Sharded),
        include_str!("fence.lua"),
        include_str!("holders.lua"),
        include_str!("fair.lua")
    ))
});

/// Why a store refuses fair locks: a Redlock quorum has no single store to keep the queue.
pub(crate) const UNSUPPORTED: &str = "a fair lock keeps its queue of waiters on one store: \
    connect a single primary (Client::connect, or Client::connect_sentinel) or a Cluster \
    (Client::connect_cluster); a Redlock quorum's independent primaries would each order the \
    waiters differently";

/// How long a waiter keeps its place in a fair lock's queue without asking again. A waiter
/// asks at least every third of it (see `src/lock/fair.rs`), so only a waiter that vanished
/// (killed, partitioned, its runtime stalled) loses its place, and it holds the queue up for
/// at most this long.
pub(crate) const FAIR_CLAIM: Duration = Duration::from_secs(3);

/// One call on a fair lock's queue.
#[derive(Debug)]
pub(crate) enum FairCall<'a> {
    /// Take the lock, or a place in the queue.
    Take(FairTake<'a>),
    /// `waiter` gives its place up.
    Leave { keys: &'a FairKeys, waiter: &'a str },
    /// How many waiters hold a place.
    Count { keys: &'a FairKeys },
}

/// A fair lock's take: the lock if it is free and `waiter` is first (or nobody queues); else,
/// if `joins`, keep (or take) `waiter`'s place in the queue.
#[derive(Debug)]
pub(crate) struct FairTake<'a> {
    pub(crate) keys: &'a FairKeys,
    pub(crate) token: &'a Token,
    pub(crate) ttl: Duration,
    pub(crate) waiter: &'a str,
    pub(crate) joins: bool,
    pub(crate) mint: bool,
    pub(crate) replicas: Option<Replicas>,
}

/// What a [`FairCall`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FairReply {
    /// A take's answer, and how many waiters queue ahead of a waiter it answered busy.
    Take { reply: AcquireReply, ahead: u64 },
    /// A waiter left.
    Left,
    /// How many waiters queue.
    Count(u64),
}

impl FairCall<'_> {
    /// The keys of the fair lock the call is on.
    pub(crate) fn keys(&self) -> &FairKeys {
        match self {
            Self::Take(FairTake { keys, .. }) | Self::Leave { keys, .. } | Self::Count { keys } => {
                keys
            }
        }
    }
}

/// Runs `call` on the lock's node. Not batched: a fair lock's every attempt is a script call.
pub(crate) async fn run<C: Conn>(
    conn: &C,
    publish: Publish,
    call: &FairCall<'_>,
) -> Result<FairReply, StoreError> {
    let script = match publish {
        Publish::Plain => &PLAIN,
        Publish::Sharded => &SHARDED,
    };
    let keys = call.keys();
    let mut cmd = script.call(4, 7, 320);
    cmd.arg(&keys.lock.lock)
        .arg(&*keys.queue)
        .arg(&*keys.claims)
        .arg(&*keys.lock.fence);
    match *call {
        FairCall::Take(ref take) => {
            cmd.arg("take")
                .arg(take.token.as_str())
                .arg(millis(take.ttl))
                .arg(take.waiter)
                .arg(if take.joins { "1" } else { "0" })
                .arg(if take.mint { "1" } else { "0" })
                .arg(millis(FAIR_CLAIM));
            let Some(wanted) = take.replicas else {
                let (code, ahead): (i64, u64) = script.invoke(&cmd, conn).await?;
                let reply = AcquireReply::from_acquire_code(code);
                return Ok(FairReply::Take { reply, ahead });
            };
            let ((code, ahead), acked): ((i64, u64), u32) =
                script.invoke_then_wait(&cmd, wanted, conn).await?;
            let reply = match AcquireReply::from_acquire_code(code) {
                AcquireReply::Granted { .. } if acked < wanted.count => {
                    AcquireReply::Unreplicated {
                        acked,
                        wanted: wanted.count,
                    }
                }
                reply => reply,
            };
            Ok(FairReply::Take { reply, ahead })
        }
        FairCall::Leave { waiter, .. } => {
            cmd.arg("leave").arg(waiter).arg(&keys.lock.channel);
            let _: i64 = script.invoke(&cmd, conn).await?;
            Ok(FairReply::Left)
        }
        FairCall::Count { .. } => {
            cmd.arg("count");
            let count: u64 = script.invoke(&cmd, conn).await?;
            Ok(FairReply::Count(count))
        }
    }
}
