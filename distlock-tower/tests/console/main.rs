//! The operator console (`distlock_tower::console`, issue 29 §6): its JSON API through
//! `ServiceExt::oneshot` on both stores, and its page in a real headless Chromium over TCP,
//! showing a lock another process holds and, after a click on force-unlock, its absence.

#[path = "../../../tests/support/mod.rs"]
mod support;

mod api;
mod browser;
mod chromium;
mod closed;
mod mounted;
