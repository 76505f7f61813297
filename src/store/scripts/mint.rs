//! `mint.lua`, after `fence.lua`: mint the fence of a lease that asks for it after its grant,
//! only while its lock key still holds its token (contract in the `.lua` header).

use std::sync::LazyLock;

use redis::{Cmd, Value};

use super::{Calls, Lua, Ownership, codes};
use crate::error::StoreError;
use crate::keys::LockKeys;
use crate::token::Token;

pub(crate) static SCRIPT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(concat!(include_str!("fence.lua"), include_str!("mint.lua"))));

/// One lease whose fence to mint, owned so it can wait in a batch.
#[derive(Clone)]
pub(crate) struct MintItem {
    pub(crate) keys: LockKeys,
    pub(crate) token: Token,
}

impl MintItem {
    /// The mint of `token`'s lease on the lock of `keys`, owned.
    pub(crate) fn of(keys: &LockKeys, token: &Token) -> Self {
        Self {
            keys: keys.clone(),
            token: token.clone(),
        }
    }
}

/// What a mint found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MintReply {
    /// The key held the token: the lease's fence.
    Minted(u64),
    /// The key was gone, or held another token: nothing was minted.
    Not(Ownership),
}

impl MintReply {
    /// One item of `mint.lua`'s reply.
    pub(crate) fn from_code(code: i64) -> Result<Self, StoreError> {
        match u64::try_from(code) {
            Ok(fence) if fence > 0 => Ok(Self::Minted(fence)),
            _ => Ownership::from_reply(code).map(Self::Not),
        }
    }
}

/// Mints, many per call.
#[derive(Clone)]
pub(crate) struct Mints;

impl Calls for Mints {
    type Item = MintItem;
    type Reply = MintReply;
    /// Mints come one per lease that asks, at most as often as acquires.
    const FLUSH_AT: usize = 16;

    fn slot_key(item: &MintItem) -> &str {
        &item.keys.lock
    }

    fn encode(&self, items: &[&MintItem]) -> (&'static Lua, Cmd) {
        let mut cmd = SCRIPT.call(2 * items.len(), items.len(), 128 * items.len());
        for item in items {
            cmd.arg(&item.keys.lock).arg(&*item.keys.fence);
        }
        for item in items {
            cmd.arg(item.token.as_str());
        }
        (&SCRIPT, cmd)
    }

    fn decode(&self, reply: Value, items: &[&MintItem]) -> Result<Vec<MintReply>, StoreError> {
        codes(reply, items.len(), "mint")?
            .into_iter()
            .map(MintReply::from_code)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_decode_to_fences_and_refusals() {
        assert_eq!(
            MintReply::from_code(1_700_000_000_000_001).ok(),
            Some(MintReply::Minted(1_700_000_000_000_001))
        );
        assert_eq!(
            MintReply::from_code(0).ok(),
            Some(MintReply::Not(Ownership::Expired))
        );
        assert_eq!(
            MintReply::from_code(-1).ok(),
            Some(MintReply::Not(Ownership::Theirs))
        );
        assert!(MintReply::from_code(-2).is_err());
    }
}
