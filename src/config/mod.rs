//! Configuration from files (feature `serde`): the client ([`ClientConfig`]), rate limiters
//! ([`LimiterConfig`]) and locks ([`LockConfig`]) as a service keeps them in TOML, YAML or
//! JSON, next to its own settings.
//!
//! Each type deserialises from a table whose fields are its builder's options, with the
//! same names: durations as text (`"250ms"`, `"1h 30min"`), policies in their
//! [one-line or table form](crate::ratelimit::Policy#from-configuration), an
//! [`Outage`](crate::ratelimit::Outage) by name (`"fail-open"`). Every setting is optional
//! except the store and the policies; an unset one is the builder's default. An unknown field,
//! a field given twice, a value of the wrong type or out of bounds is an error that names the
//! field (``field `ttl`: 5ms is out of range: ...``), with the position the format adds.
//! The TLS files a [`ClientConfig`] names are read when it connects.
//!
//! [`Config`] gathers them as a service's `[client]`, `[lock]` and `[limiters.<name>]`. With
//! the `toml` feature, [`Config::from_file`] and [`Config::loader`] read it from a TOML file
//! or text, with environment overrides ([`ConfigLoader`]), and return a typed
//! [`ConfigError`]: its [`FieldErrorKind`], the field's path, and the line and column or the
//! variable it came from. Without it, any of these types deserialises inside an
//! application's own configuration, from any self-describing serde format.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use distlock::config::{ClientConfig, LimiterConfig, LockConfig};
//!
//! let client: ClientConfig = toml::from_str("memory = true\nprefix = \"shop\"")?;
//! let client = client.connect().await?;
//!
//! let api: LimiterConfig = toml::from_str(r#"policies = "api: 100/s burst 20""#)?;
//! let api = api.build(&client)?;
//! assert!(api.check("user:7").await?.allowed);
//!
//! let checkout: LockConfig = toml::from_str(r#"ttl = "10s""#)?;
//! let lease = checkout.lock(&client, "order:42").acquire().await?;
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! The guide's [From a file](crate::guide::configuration#from-a-file) has a whole service's
//! configuration.

mod client;
mod de;
mod error;
mod file;
mod limiter;
mod lock;

use std::path::PathBuf;

pub use self::client::{
    ClientConfig, Credentials, QuorumConfig, ReplicasConfig, SentinelConfig, StoreConfig, TlsFiles,
};
pub use self::error::{ConfigError, FieldErrorKind, Location, Origin};
pub use self::file::Config;
#[cfg(feature = "toml")]
pub use self::file::ConfigLoader;
pub use self::limiter::{BreakerConfig, HybridConfig, LimiterConfig, RateCacheConfig};
pub use self::lock::{BackoffConfig, LockConfig};
use crate::error::StoreError;

/// Why [`ClientConfig::connect`] made no client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// Settings that cannot work together (refused when a configuration is parsed; built
    /// in code, they are refused here).
    #[error(transparent)]
    Invalid(#[from] InvalidField),
    /// A file the configuration names could not be read.
    #[error("field `{field}`: cannot read {}: {source}", path.display())]
    ReadFile {
        /// The field that names it: `tls.ca_file`, `tls.cert_file` or `tls.key_file`.
        field: &'static str,
        /// The path, as configured.
        path: PathBuf,
        /// What reading it returned.
        source: std::io::Error,
    },
    /// `tls` is set, and distlock was built without TLS.
    #[error(
        "field `tls`: distlock was built without TLS; enable its `tls` (or `tls-native-roots`) \
         feature"
    )]
    TlsUnavailable,
    /// Connecting failed, or the builder refused a setting
    /// ([`StoreError::Config`]).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A configuration value that is well formed but cannot be used: which field, and why.
/// Parsing reports it as the format's error with the same message; [`ClientConfig::connect`]
/// returns it for a configuration built in code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {reason}")]
pub struct InvalidField {
    field: String,
    reason: String,
}

impl InvalidField {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The field's path in its table: `ttl`, `sentinel.master`.
    #[must_use]
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong with it.
    #[must_use]
    pub fn reason(&self) -> &str {
        &self.reason
    }
}
