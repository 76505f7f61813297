//! `release.lua`: compare-and-delete many locks, publishing a wake-up where a waiter marked
//! the lock, and reserving it where one starves (contract in the `.lua` header).

use std::sync::LazyLock;
use std::time::Duration;

use redis::Value;

use super::{Conn, Held, Lua, Publish, codes, publish_prelude};
use crate::error::StoreError;
use crate::keys::LockKeys;
use crate::store::batch::Batch;
use crate::token::Token;

static PLAIN: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        publish_prelude!(Plain),
        include_str!("release.lua")
    ))
});
static SHARDED: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        publish_prelude!(Sharded),
        include_str!("release.lua")
    ))
});

fn script(publish: Publish) -> &'static Lua {
    match publish {
        Publish::Plain => &PLAIN,
        Publish::Sharded => &SHARDED,
    }
}

/// How long a lock reserved for the waiters that waited long stays reserved if none of them
/// takes it (they vanished): the most a vanished waiter can block the lock for. The scripts
/// hold the same figure as `CLAIM_MS` (`release.lua`, `handoff.lua`; a test checks it).
pub(crate) const CLAIM: Duration = Duration::from_millis(250);

/// One lock to release, owned so it can wait in a batch.
pub(crate) struct ReleaseItem {
    pub(crate) keys: LockKeys,
    pub(crate) token: Token,
}

/// Releases, many per call, on one connection target.
#[derive(Clone)]
pub(crate) struct Releases<C> {
    pub(crate) conn: C,
    pub(crate) publish: Publish,
}

impl<C: Conn> Releases<C> {
    /// Releases one lock in the background, best effort (a grant nobody wants any more).
    pub(crate) fn in_background(self, keys: LockKeys, token: Token) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let item = ReleaseItem { keys, token };
            if let Err(err) = self.run(std::slice::from_ref(&item)).await {
                tracing::debug!(error = %err, "releasing an abandoned grant failed; it expires with its ttl");
            }
        });
    }
}

impl<C: Conn> Batch for Releases<C> {
    type Item = ReleaseItem;
    type Reply = Held;
    /// As acquires (the same tasks alternate between the two).
    const FLUSH_AT: usize = 16;

    async fn run(&self, items: &[ReleaseItem]) -> Result<Vec<Held>, StoreError> {
        let script = script(self.publish);
        let mut cmd = script.call(items.len(), 2 * items.len(), 128 * items.len());
        for item in items {
            cmd.arg(&item.keys.lock);
        }
        for item in items {
            cmd.arg(item.token.as_str()).arg(&item.keys.channel);
        }
        let reply: Value = script.invoke(&cmd, &self.conn).await?;
        codes(reply, items.len(), "release")?
            .into_iter()
            .map(Held::from_reply)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_claim_is_the_one_documented_here() {
        let line = format!("local CLAIM_MS = {}", CLAIM.as_millis());
        assert!(
            include_str!("release.lua").contains(&line),
            "release.lua: {line}"
        );
        for (name, text) in [
            ("handoff.lua", include_str!("handoff.lua")),
            ("acquire_permits.lua", include_str!("acquire_permits.lua")),
            ("acquire_read.lua", include_str!("acquire_read.lua")),
            ("acquire_write.lua", include_str!("acquire_write.lua")),
        ] {
            assert!(text.contains(&line), "{name}: {line}");
        }
    }
}
