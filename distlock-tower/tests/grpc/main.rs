//! The layers in front of a real gRPC service (feature `tonic`): tonic's server and client over
//! TCP on 127.0.0.1, with `grpc.health.v1.Health` (generated code that `tonic-health` ships,
//! so no protoc) as the service, on a real `redis-server` and on the in-memory store (the
//! same test bodies on both).
//!
//! * a rate-limited service answers `RESOURCE_EXHAUSTED` with a `RetryInfo` once the budget
//!   is spent, and tonic's client decodes it;
//! * one layer in front of an HTTP route and the gRPC service (one listener, HTTP/1.1 and
//!   HTTP/2) spends one budget for both, and answers each in its own protocol;
//! * the lock layer answers a call on a held lock `ABORTED`, with the holder's ttl;
//! * the concurrency limit answers a call while a server stream holds the key's permit
//!   `UNAVAILABLE`, with the layer's `retry_after`, and lets it in once the stream is gone.

#[path = "../../../tests/support/mod.rs"]
mod support;

#[path = "../common/mod.rs"]
mod common;

mod calls;
