//! Task-scoped reentrancy: the leases held by the scoped `run` calls the current tokio task is
//! inside of, innermost first. A nested `run` on the same lock of the same client with
//! reentrancy on joins the outer lease instead of waiting for itself.
//!
//! The list is immutable and shared (`Arc`), so entering a scope costs one small allocation
//! and no lock. It follows the future, not the thread: a task spawned inside a scope does not
//! inherit it.

use std::sync::Arc;

use super::lease::LeaseHandle;

tokio::task_local! {
    static HELD: Held;
}

#[derive(Clone, Default)]
struct Held(Option<Arc<Node>>);

struct Node {
    client: u64,
    key: String,
    handle: LeaseHandle,
    outer: Held,
}

fn current() -> Held {
    HELD.try_with(Clone::clone).unwrap_or_default()
}

/// The lease on `key` of client `client` held by an enclosing scope of this task, if any.
pub(crate) fn find(client: u64, key: &str) -> Option<LeaseHandle> {
    let mut node = current().0;
    while let Some(n) = node {
        if n.client == client && n.key == key {
            return Some(n.handle.clone());
        }
        node = n.outer.0.clone();
    }
    None
}

/// The innermost lease held by an enclosing scope of this task.
pub(crate) fn innermost() -> Option<LeaseHandle> {
    current().0.map(|n| n.handle.clone())
}

/// Runs `fut` with `handle` pushed on this task's list.
pub(crate) async fn scope<F: Future>(
    client: u64,
    key: String,
    handle: LeaseHandle,
    fut: F,
) -> F::Output {
    let held = Held(Some(Arc::new(Node {
        client,
        key,
        handle,
        outer: current(),
    })));
    HELD.scope(held, fut).await
}
