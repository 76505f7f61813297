//! What the lock floor needs of a client: its [`Core`] (store, prefix, fence keys, id), plus
//! the per-client machinery every lease shares, the watchdog that renews them and the queue of
//! waiters a releaser can hand a lock to. Builders, attempts and leases hold this, never the
//! [`Client`](crate::Client).

use std::sync::Arc;

use super::handoff::Handoffs;
use super::watchdog::Watchdog;
use crate::core::Core;
use crate::store::Store;

/// A client's lock machinery. Cheap to clone: clones share one watchdog and one hand-off
/// registry.
#[derive(Clone)]
pub(crate) struct LockContext(Arc<Shared>);

struct Shared {
    core: Core,
    watchdog: Watchdog,
    /// This client's waiters that a releaser can hand a lock to.
    handoffs: Handoffs,
}

impl std::fmt::Debug for LockContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.core.fmt(f)
    }
}

impl LockContext {
    /// The lock machinery of a client over `core`: a watchdog of its own (its task starts
    /// with the first lease) and an empty hand-off registry.
    pub(crate) fn new(core: Core) -> Self {
        let watchdog = Watchdog::new(
            core.store().clone(),
            core.revocation_channels().to_vec(),
            core.closing().clone(),
        );
        Self(Arc::new(Shared {
            core,
            watchdog,
            handoffs: Handoffs::default(),
        }))
    }

    pub(crate) fn core(&self) -> &Core {
        &self.0.core
    }

    pub(crate) fn store(&self) -> &Store {
        self.0.core.store()
    }

    pub(crate) fn watchdog(&self) -> &Watchdog {
        &self.0.watchdog
    }

    pub(crate) fn handoffs(&self) -> &Handoffs {
        &self.0.handoffs
    }
}
