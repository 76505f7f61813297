//! `acquire_all.lua`, after `fence.lua`: take several locks of one node (one hash slot on a
//! cluster) all or nothing, for a multi-lock (contract in the `.lua` header).

use std::sync::LazyLock;
use std::time::Duration;

use redis::Value;

use super::acquire::Waits;
use super::{Conn, Lua, millis};
use crate::error::StoreError;
use crate::store::requests::AcquireAll;

static SCRIPT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("fence.lua"),
        include_str!("acquire_all.lua")
    ))
});

/// The answer to an all-or-nothing acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AllReply {
    /// Every lock is taken; their fences, in order.
    Granted { fences: Vec<u64> },
    /// Nothing was taken: lock `index` is held for `pttl` more.
    Busy {
        index: usize,
        pttl: Option<Duration>,
    },
}

impl AllReply {
    fn decode(reply: &[i64], items: usize) -> Result<Self, StoreError> {
        let protocol = || StoreError::Protocol {
            message: format!("acquire_all answered {reply:?} for {items} locks"),
        };
        match reply {
            [code, index] if *code < 0 => Ok(Self::Busy {
                index: usize::try_from(*index)
                    .ok()
                    .and_then(|i| i.checked_sub(1))
                    .filter(|i| *i < items)
                    .ok_or_else(protocol)?,
                pttl: u64::try_from(-(code + 1)).ok().map(Duration::from_millis),
            }),
            fences if fences.len() == items && fences.iter().all(|f| *f > 0) => Ok(Self::Granted {
                fences: fences.iter().map(|f| f.unsigned_abs()).collect(),
            }),
            _ => Err(protocol()),
        }
    }
}

/// Takes every lock of `req.keys` (each with its token of `req.tokens`) for `req.ttl`, or
/// none. Not batched: one call per group.
pub(crate) async fn run<C: Conn>(conn: &C, req: &AcquireAll<'_>) -> Result<AllReply, StoreError> {
    let keys = req.keys;
    let mut cmd = SCRIPT.call(2 * keys.len(), keys.len() + 2, 160 * keys.len());
    for k in keys {
        cmd.arg(&k.lock).arg(&*k.fence);
    }
    for token in req.tokens {
        cmd.arg(token.as_str());
    }
    cmd.arg(millis(req.ttl))
        .arg(if req.waits == Waits::No { "0" } else { "1" });
    let reply: Value = SCRIPT.invoke(&cmd, conn).await?;
    let codes = match reply {
        Value::Array(values) => values
            .into_iter()
            .map(|v| match v {
                Value::Int(code) => Ok(code),
                other => Err(StoreError::Protocol {
                    message: format!(
                        "acquire_all answered {other:?} where an integer was expected"
                    ),
                }),
            })
            .collect::<Result<Vec<i64>, _>>()?,
        other => {
            return Err(StoreError::Protocol {
                message: format!("acquire_all answered {other:?}"),
            });
        }
    };
    AllReply::decode(&codes, keys.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_decode_to_grants_and_busy_locks() {
        assert!(matches!(
            AllReply::decode(&[5, 6, 7], 3),
            Ok(AllReply::Granted { fences }) if fences == [5, 6, 7]
        ));
        assert!(matches!(
            AllReply::decode(&[-1501, 2], 3),
            Ok(AllReply::Busy { index: 1, pttl: Some(p) }) if p == Duration::from_millis(1500)
        ));
        // Two locks granted look like a busy reply only if the first is negative.
        assert!(matches!(
            AllReply::decode(&[9, 10], 2),
            Ok(AllReply::Granted { fences }) if fences == [9, 10]
        ));
        assert!(AllReply::decode(&[-1, 3], 2).is_err(), "index out of range");
        assert!(AllReply::decode(&[1], 2).is_err());
    }
}
