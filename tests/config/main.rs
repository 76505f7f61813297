//! `distlock::config`: a configuration read from TOML (and the environment), checked when it
//! is read, and run against real servers.
//!
//! * `parse`: what a file can get wrong, each a typed [`ConfigError`] naming the field, and
//!   hostile input (empty, huge, deep, binary) that must never panic.
//! * `env`: environment overrides.
//! * `servers`: each store's configuration connecting to a real `redis-server` (a single
//!   primary, a Redlock quorum, Sentinel, a Cluster), and `examples/distlock.toml` run as a
//!   service would.
#![cfg(feature = "toml")]

#[path = "../support/mod.rs"]
mod support;

mod env;
mod parse;
mod servers;

use distlock::LockOptions;
use distlock::config::{Config, ConfigError, FieldErrorKind};

/// The path of the example configuration in the repository.
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/distlock.toml");

/// `text`'s error, which must be a [`ConfigError::Field`] of `kind` about `field`; returns
/// its `Display`.
#[track_caller]
fn field_error(text: &str, kind: FieldErrorKind, field: &str) -> String {
    let err = match Config::from_toml_str(text) {
        Ok(config) => panic!("expected an error about `{field}`, got {config:#?}"),
        Err(err) => err,
    };
    assert_eq!(
        (err.field_kind(), err.field()),
        (Some(kind), Some(field)),
        "{text}\n=> {err}"
    );
    err.to_string()
}

/// `text`'s error, which must be a syntax error.
#[track_caller]
fn syntax_error(text: &str) -> String {
    match Config::from_toml_str(text) {
        Err(err @ ConfigError::Syntax { .. }) => err.to_string(),
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

/// What the configuration's `[lock]` table sets `field` to (`None`: not set), read through
/// the options it gives.
fn lock_set<T>(config: &Config, field: &str, get: impl FnOnce(&LockOptions) -> T) -> Option<T> {
    config.lock.sets(field).then(|| get(&config.lock.options()))
}
