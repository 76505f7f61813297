//! [`LockConfig`]: a lock's options as a service keeps them in its configuration, applied to
//! a [`LockBuilder`].

use std::time::Duration;

use serde::de::{Deserialize, Deserializer, MapAccess};

use super::client::ReplicasConfig;
use super::de::{OrForever, ReadTable, Table, checked, deserialize_table};
use crate::client::Client;
use crate::lock::{LockBuilder, LockOptions};

/// A lock's options, each optional (unset: the [`LockBuilder`]'s default). Deserialises from
/// a table whose fields are the builder's options; [`apply`](Self::apply) sets them on a
/// builder.
///
/// | field | value | builder option |
/// |---|---|---|
/// | `ttl` | a duration, 10 ms to 7 days | [`LockBuilder::ttl`] |
/// | `wait` | a duration, or `"forever"` | [`LockBuilder::wait`], [`wait_forever`](LockBuilder::wait_forever) |
/// | `store_patience` | a duration | [`LockBuilder::store_patience`] |
/// | `watchdog` | `true` or `false` | [`LockBuilder::watchdog`] |
/// | `max_hold` | a duration above zero | [`LockBuilder::max_hold`] |
/// | `min_hold` | a duration, at most 7 days and `max_hold` | [`LockBuilder::min_hold`] |
/// | `reentrant` | `true` or `false` | [`LockBuilder::reentrant`] |
/// | `replicas` | `{ count = 1, timeout = "50ms" }`, the timeout below the ttl | [`LockBuilder::replicas`] |
/// | `max_attempts` | at least 1 | [`LockBuilder::max_attempts`] |
/// | `retry_backoff` | `{ first = "5ms", largest = "500ms" }`: `first` above zero and at most `largest`, `largest` at most 60 s | [`LockBuilder::retry_backoff`] |
/// | `fenced` | `true` or `false` (default): mint the fence with the grant | [`LockBuilder::fenced`] |
/// | `fair` | `true` or `false` (default): grant in arrival order | [`LockBuilder::fair`] |
///
/// The bounds that do not depend on the client's store are checked when the configuration is
/// read, by [`LockOptions::check`] (the one place they are checked), so a bad value stops the
/// service at start-up rather than failing every acquire; whether the store can acknowledge
/// replicas is the builder's to say, at `acquire`. [`options`](Self::options) gives the
/// whole set as a [`LockOptions`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::config::LockConfig;
///
/// let checkout: LockConfig = toml::from_str("ttl = \"10s\"\nwait = \"2s\"\nmax_hold = \"1min\"")?;
/// let client = distlock::Client::in_memory();
/// let lease = checkout.lock(&client, "order:42").acquire().await?;
/// lease.release().await?;
///
/// let err = toml::from_str::<LockConfig>("ttl = \"5ms\"").unwrap_err();
/// assert!(err.message().contains("field `ttl`: 5ms is out of range"));
/// let err = toml::from_str::<LockConfig>("ttl = \"10s\"\nwiat = \"2s\"").unwrap_err();
/// assert!(err.message().starts_with("unknown field `wiat`, expected `ttl`, `wait`"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockConfig {
    /// [`LockBuilder::ttl`].
    pub ttl: Option<Duration>,
    /// [`LockBuilder::wait`]; [`Duration::MAX`] (`"forever"`) waits as long as it takes.
    pub wait: Option<Duration>,
    /// [`LockBuilder::store_patience`].
    pub store_patience: Option<Duration>,
    /// [`LockBuilder::watchdog`].
    pub watchdog: Option<bool>,
    /// [`LockBuilder::max_hold`].
    pub max_hold: Option<Duration>,
    /// [`LockBuilder::min_hold`].
    pub min_hold: Option<Duration>,
    /// [`LockBuilder::reentrant`].
    pub reentrant: Option<bool>,
    /// [`LockBuilder::replicas`]; unset: the client's.
    pub replicas: Option<ReplicasConfig>,
    /// [`LockBuilder::max_attempts`].
    pub max_attempts: Option<u32>,
    /// [`LockBuilder::retry_backoff`].
    pub retry_backoff: Option<BackoffConfig>,
    /// [`LockBuilder::fenced`] when `true`.
    pub fenced: Option<bool>,
    /// [`LockBuilder::fair`] when `true`.
    pub fair: Option<bool>,
}

/// The sleeps between attempts that no release wakes: `{ first = "5ms", largest = "500ms" }`;
/// see [`LockBuilder::retry_backoff`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackoffConfig {
    /// The first sleep: above zero and at most `largest`.
    pub first: Duration,
    /// The largest sleep: at most 60 s.
    pub largest: Duration,
}

impl BackoffConfig {
    /// `first`, doubling up to `largest` (checked when it is read from a file, and by
    /// [`LockBuilder::acquire`] when set in code).
    #[must_use]
    pub fn new(first: Duration, largest: Duration) -> Self {
        Self { first, largest }
    }
}

impl LockConfig {
    /// `lock` with every option this configuration sets; the others keep what `lock` has.
    pub fn apply(&self, lock: LockBuilder) -> LockBuilder {
        let options = self.onto(lock.current_options().clone());
        lock.options(options)
    }

    /// The lock `name` of `client` with these options: `self.apply(client.lock(name))`.
    pub fn lock(&self, client: &Client, name: impl Into<String>) -> LockBuilder {
        self.apply(client.lock(name))
    }

    /// These options over the defaults: what [`LockBuilder::options`] takes, and what
    /// [`LockOptions::check`] checks (as reading the configuration did).
    pub fn options(&self) -> LockOptions {
        self.onto(LockOptions::new())
    }

    /// `options` with every option this configuration sets.
    fn onto(&self, mut options: LockOptions) -> LockOptions {
        if let Some(ttl) = self.ttl {
            options = options.ttl(ttl);
        }
        if let Some(wait) = self.wait {
            options = options.wait(wait);
        }
        if let Some(patience) = self.store_patience {
            options = options.store_patience(patience);
        }
        if let Some(on) = self.watchdog {
            options = options.watchdog(on);
        }
        if let Some(max_hold) = self.max_hold {
            options = options.max_hold(max_hold);
        }
        if let Some(min_hold) = self.min_hold {
            options = options.min_hold(min_hold);
        }
        if let Some(on) = self.reentrant {
            options = options.reentrant(on);
        }
        if let Some(replicas) = self.replicas {
            options = options.replicas(replicas.count, replicas.timeout);
        }
        if let Some(attempts) = self.max_attempts {
            options = options.max_attempts(attempts);
        }
        if let Some(backoff) = self.retry_backoff {
            options = options.retry_backoff(backoff.first, backoff.largest);
        }
        if let Some(on) = self.fenced {
            options = options.fenced(on);
        }
        if let Some(on) = self.fair {
            options = options.fair(on);
        }
        options
    }
}

impl<'de> Deserialize<'de> for LockConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_table(deserializer)
    }
}

impl ReadTable for LockConfig {
    const WHAT: &'static str = "lock options";
    const FIELDS: &'static [&'static str] = &[
        "ttl",
        "wait",
        "store_patience",
        "watchdog",
        "max_hold",
        "min_hold",
        "reentrant",
        "replicas",
        "max_attempts",
        "retry_backoff",
        "fenced",
        "fair",
    ];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let mut config = Self::default();
        while let Some(key) = table.next_key(map)? {
            match key {
                "ttl" => {
                    config.ttl = Some(table.value_checked(map, key, |ttl: &Duration| {
                        checked(LockOptions::new().ttl(*ttl).check())
                    })?);
                }
                "wait" => config.wait = Some(table.value::<OrForever, _>(map, key)?.0),
                "store_patience" => config.store_patience = Some(table.value(map, key)?),
                "watchdog" => config.watchdog = Some(table.value(map, key)?),
                "max_hold" => {
                    config.max_hold = Some(table.value_checked(map, key, |max: &Duration| {
                        checked(LockOptions::new().max_hold(*max).check())
                    })?);
                }
                "min_hold" => {
                    config.min_hold = Some(table.value_checked(map, key, |min: &Duration| {
                        checked(LockOptions::new().min_hold(*min).check())
                    })?);
                }
                "reentrant" => config.reentrant = Some(table.value(map, key)?),
                "replicas" => config.replicas = Some(table.value(map, key)?),
                "max_attempts" => {
                    config.max_attempts = Some(table.value_checked(map, key, |n: &u32| {
                        checked(LockOptions::new().max_attempts(*n).check())
                    })?);
                }
                "retry_backoff" => config.retry_backoff = Some(table.value(map, key)?),
                "fenced" => config.fenced = Some(table.value(map, key)?),
                "fair" => config.fair = Some(table.value(map, key)?),
                _ => return Err(table.unhandled(key)),
            }
        }
        config
            .options()
            .check()
            .map_err(|invalid| table.error(invalid.field(), invalid.reason()))?;
        Ok(config)
    }
}

impl<'de> Deserialize<'de> for BackoffConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_table(deserializer)
    }
}

impl ReadTable for BackoffConfig {
    const WHAT: &'static str = "retry backoff";
    const FIELDS: &'static [&'static str] = &["first", "largest"];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let mut first = None;
        let mut largest = None;
        while let Some(key) = table.next_key(map)? {
            match key {
                "first" => first = Some(table.value::<Duration, _>(map, key)?),
                "largest" => largest = Some(table.value::<Duration, _>(map, key)?),
                _ => return Err(table.unhandled(key)),
            }
        }
        let first = first.ok_or_else(|| table.missing("first"))?;
        let largest = largest.ok_or_else(|| table.missing("largest"))?;
        if let Err(invalid) = LockOptions::new().retry_backoff(first, largest).check() {
            let field = invalid.field();
            return Err(table.error(
                field.strip_prefix("retry_backoff.").unwrap_or(field),
                invalid.reason(),
            ));
        }
        Ok(Self { first, largest })
    }
}
