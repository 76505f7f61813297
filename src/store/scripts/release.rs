//! `release.lua`: compare-and-delete many locks, publishing a wake-up where a waiter marked
//! the lock, and reserving it where one starves (contract in the `.lua` header).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Cmd, Value};

use super::{Calls, Conn, Lua, Ownership, Publish, codes, publish_prelude};
use crate::error::StoreError;
use crate::keys::LockKeys;
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

impl ReleaseItem {
    /// The release of `token`'s lease on the lock of `keys`, owned.
    pub(crate) fn of(keys: &LockKeys, token: &Token) -> Self {
        Self {
            keys: keys.clone(),
            token: token.clone(),
        }
    }
}

/// Releases, many per call, publishing their wake-ups as `publish` says.
#[derive(Clone)]
pub(crate) struct Releases {
    pub(crate) publish: Publish,
}

impl Calls for Releases {
    type Item = ReleaseItem;
    type Reply = Ownership;
    /// As acquires (the same tasks alternate between the two).
    const FLUSH_AT: usize = 16;

    fn slot_key(item: &ReleaseItem) -> &str {
        &item.keys.lock
    }

    fn encode(&self, items: &[&ReleaseItem]) -> (&'static Lua, Cmd) {
        let script = script(self.publish);
        let bytes = items
            .iter()
            .map(|i| i.keys.lock.len() + i.token.as_str().len() + i.keys.channel.len())
            .sum();
        let mut cmd = script.call(items.len(), 2 * items.len(), bytes);
        for item in items {
            cmd.arg(&item.keys.lock);
        }
        for item in items {
            cmd.arg(item.token.as_str()).arg(&item.keys.channel);
        }
        (script, cmd)
    }

    fn decode(&self, reply: Value, items: &[&ReleaseItem]) -> Result<Vec<Ownership>, StoreError> {
        // One lock (the common case): a bare integer, read as it is.
        if let (Value::Int(code), 1) = (&reply, items.len()) {
            return Ok(vec![Ownership::from_reply(*code)?]);
        }
        codes(reply, items.len(), "release")?
            .into_iter()
            .map(Ownership::from_reply)
            .collect()
    }
}

/// Releases one lock on `conn` in the background, best effort (a grant nobody wants any more;
/// what cannot be released expires with its ttl).
pub(crate) fn in_background<C: Conn>(conn: C, publish: Publish, item: ReleaseItem) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let releases = Releases { publish };
        if let Err(err) = super::call(&releases, &conn, std::slice::from_ref(&item)).await {
            tracing::debug!(error = %err, "releasing an abandoned grant failed; it expires with its ttl");
        }
    });
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
