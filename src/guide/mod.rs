//! The guide: everything the README leaves out, one page per topic. Its examples run as
//! doctests.
//!
//! | page | what it covers |
//! |---|---|
//! | [`guarantees`] | what a lease and a rate limit promise, and where that ends: paused holders, failover, replica acknowledgement, outages, the in-memory store |
//! | [`coordination`] | semaphores, read-write locks, multi-locks, scheduled-job locks, fenced writes, leader election and a graceful drain on shutdown |
//! | [`rate_limiting`] | limiters, the five algorithms and which to pick, reset / refund / penalize, the circuit breaker, waiting for a turn |
//! | [`layers`] | `LockLayer`, `RateLimitLayer`, `ConcurrencyLimitLayer` and `IdempotencyLayer` in depth, key extractors and what a name may be, layer order, how do I... |
//! | [`bloom_filters`] | sizing, sharding, the RedisBloom module |
//! | [`configuration`] | every option of the client, the primitives, the limiters, the macro and the layers, with defaults and bounds |
//! | [`cluster`] | a Redis Cluster: one slot per operation, redirects, failover, TLS |
//! | [`redlock`] | a majority of independent primaries: when to use it, what it does and does not promise |
//! | [`deployment`] | Redis versions, Sentinel, TLS, ACL users |
//! | [`operations`] | inspecting and freeing locks, logs, metrics, key layout |
//! | [`behind_envoy`] | the rate-limit service for Envoy and meshes (`distlock-rls`): running it, Envoy's side, what differs from envoyproxy/ratelimit |
//!
//! The pages are the Markdown files next to this module (`src/guide/*.md`), each included as
//! the documentation of an empty module, so they render on docs.rs (and locally with `cargo
//! doc --open`) and their examples are compiled and run by `cargo test --doc`.
//!
//! # Where each kind of fact lives
//!
//! A fact is written in one place, the one that is checked; the others point there.
//!
//! | kind of fact | its one place | kept true by |
//! |---|---|---|
//! | benchmark figures: throughput, latency, cost per operation and their ratios | `BENCHMARKS.md` (dated runs) | the benchmark tool (`examples/bench`); these pages quote none |
//! | server compatibility: which version passed which suite | `docs/version-results.tsv` | written by `scripts/version-matrix.sh` (CI runs its CI length) |
//! | where each primitive runs, per kind of store | the README's "Where it runs" table | `tests/docs`, which builds each row on each store |
//! | what a lease, a limit or a layer promises | [`guarantees`] and each topic's page | a test per promise, named where the page states it |
//! | every option, its default and its bounds | [`configuration`] | the builders' checks and `tests/config` |
//! | what changed, and why | `CHANGELOG.md` | review |
//!
//! Examples live in these pages and the crates' docs, where `cargo test --doc` runs them; a
//! page with Rust that no crate includes fails `tests/docs`.

// Where new material goes: primitives built on the leases (leader election, fenced writes,
// lockouts, partial grants) in coordination.md; new layers (idempotency) in layers.md; the
// Redis/Valkey version matrix in deployment.md ("Redis versions"); the operator's console in
// operations.md. A page of its own is one more `.md` file, a module below and a row above.

#[doc = include_str!("guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("coordination.md")]
pub mod coordination {}

#[doc = include_str!("rate_limiting.md")]
pub mod rate_limiting {}

#[doc = include_str!("layers.md")]
pub mod layers {}

#[doc = include_str!("bloom_filters.md")]
pub mod bloom_filters {}

#[doc = include_str!("configuration.md")]
pub mod configuration {}

#[doc = include_str!("cluster.md")]
pub mod cluster {}

#[doc = include_str!("redlock.md")]
pub mod redlock {}

#[doc = include_str!("deployment.md")]
pub mod deployment {}

#[doc = include_str!("operations.md")]
pub mod operations {}

#[doc = include_str!("behind_envoy.md")]
pub mod behind_envoy {}
