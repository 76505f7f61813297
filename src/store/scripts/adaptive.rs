//! `adaptive.lua`: one vote on a concurrency limit shared by every replica, or a read of it
//! (contract in the `.lua` header). The in-memory store answers the same calls.

use std::sync::LazyLock;
use std::time::Duration;

use super::{Conn, Lua, millis};
use crate::error::StoreError;

pub(crate) static SCRIPT: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("adaptive.lua")));

/// Which way a replica says the limit should move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vote {
    Increase,
    Decrease,
    Read,
}

/// One vote (or read) on the limit under `key`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdaptiveCall<'a> {
    pub(crate) key: &'a str,
    pub(crate) vote: Vote,
    pub(crate) initial: u32,
    pub(crate) min: u32,
    pub(crate) max: u32,
    pub(crate) window: Duration,
    /// Thousandths.
    pub(crate) backoff: u32,
    pub(crate) step: u32,
    pub(crate) keep: Duration,
}

pub(crate) async fn run<C: Conn>(conn: &C, call: &AdaptiveCall<'_>) -> Result<u32, StoreError> {
    let mut cmd = SCRIPT.call(1, 8, call.key.len() + 96);
    cmd.arg(call.key)
        .arg(match call.vote {
            Vote::Increase => "+",
            Vote::Decrease => "-",
            Vote::Read => "=",
        })
        .arg(call.initial)
        .arg(call.min)
        .arg(call.max)
        .arg(
            u64::try_from(call.window.as_micros())
                .unwrap_or(u64::MAX)
                .max(1),
        )
        .arg(call.backoff)
        .arg(call.step)
        .arg(millis(call.keep).max(1));
    let limit: i64 = SCRIPT.invoke(&cmd, conn).await?;
    u32::try_from(limit).map_err(|_| StoreError::Protocol {
        message: format!("adaptive.lua answered a limit of {limit}"),
    })
}

/// The same decision in Rust, for the in-memory store: the limit after `vote` in `window`,
/// given the state (`limit`, the window it last rose in, the one it last fell in).
pub(crate) fn decide(
    call: &AdaptiveCall<'_>,
    state: Option<(u32, Option<u64>, Option<u64>)>,
    window: u64,
) -> (u32, Option<u64>, Option<u64>) {
    let (limit, mut rose, mut fell) = state.unwrap_or((call.initial, None, None));
    let mut limit = limit.clamp(call.min, call.max.max(call.min));
    match call.vote {
        Vote::Decrease if fell != Some(window) => {
            let backed = u32::try_from(u64::from(limit) * u64::from(call.backoff) / 1000)
                .unwrap_or(u32::MAX);
            limit = call.min.max(backed.min(limit.saturating_sub(1)));
            fell = Some(window);
        }
        Vote::Increase if rose != Some(window) && fell != Some(window) => {
            limit = call.max.min(limit.saturating_add(call.step));
            rose = Some(window);
        }
        _ => {}
    }
    (limit, rose, fell)
}
