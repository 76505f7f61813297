//! [`LockConfig`]: a lock's options as a service keeps them in its configuration, applied to
//! a [`LockBuilder`].

use std::time::Duration;

use distlock_grammar::MAX_BACKOFF;
use serde::de::{Deserialize, Deserializer, MapAccess};

use super::InvalidField;
use super::client::ReplicasConfig;
use super::de::{OrForever, ReadTable, Table, above_zero, deserialize_table};
use crate::client::Client;
use crate::lock::{LockBuilder, MAX_TTL, MIN_TTL};

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
///
/// The bounds that do not depend on the client's store are checked when the configuration is
/// read, so a bad value stops the service at start-up rather than failing every acquire;
/// whether the store can acknowledge replicas is the builder's to say, at `acquire`.
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
    pub fn apply(&self, mut lock: LockBuilder) -> LockBuilder {
        if let Some(ttl) = self.ttl {
            lock = lock.ttl(ttl);
        }
        if let Some(wait) = self.wait {
            lock = lock.wait(wait);
        }
        if let Some(patience) = self.store_patience {
            lock = lock.store_patience(patience);
        }
        if let Some(on) = self.watchdog {
            lock = lock.watchdog(on);
        }
        if let Some(max_hold) = self.max_hold {
            lock = lock.max_hold(max_hold);
        }
        if let Some(min_hold) = self.min_hold {
            lock = lock.min_hold(min_hold);
        }
        if let Some(on) = self.reentrant {
            lock = lock.reentrant(on);
        }
        if let Some(replicas) = self.replicas {
            lock = lock.replicas(replicas.count, replicas.timeout);
        }
        if let Some(attempts) = self.max_attempts {
            lock = lock.max_attempts(attempts);
        }
        if let Some(backoff) = self.retry_backoff {
            lock = lock.retry_backoff(backoff.first, backoff.largest);
        }
        if self.fenced == Some(true) {
            lock = lock.fenced();
        }
        lock
    }

    /// The lock `name` of `client` with these options: `self.apply(client.lock(name))`.
    pub fn lock(&self, client: &Client, name: impl Into<String>) -> LockBuilder {
        self.apply(client.lock(name))
    }

    /// The bounds [`LockBuilder::acquire`] checks that do not depend on the store, with the
    /// same limits (the guide's [configuration](crate::guide::configuration#locks) table).
    fn check(&self) -> Result<(), InvalidField> {
        if let Some(ttl) = &self.ttl {
            check_ttl(ttl).map_err(|reason| InvalidField::new("ttl", reason))?;
        }
        if let Some(max) = &self.max_hold {
            above_zero(max).map_err(|reason| InvalidField::new("max_hold", reason))?;
        }
        if let Some(min) = self.min_hold.filter(|min| !min.is_zero()) {
            check_min_hold(&min).map_err(|reason| InvalidField::new("min_hold", reason))?;
            if let Some(max) = self.max_hold
                && min > max
            {
                return Err(InvalidField::new(
                    "min_hold",
                    format!("{} is longer than max_hold, {}", Shown(min), Shown(max)),
                ));
            }
        }
        if let Some(replicas) = self.replicas.filter(|r| r.count > 0) {
            let ttl = self.ttl.unwrap_or(crate::lock::DEFAULT_TTL);
            if replicas.timeout >= ttl {
                return Err(InvalidField::new(
                    "replicas.timeout",
                    format!(
                        "{} is not below the ttl, {}",
                        Shown(replicas.timeout),
                        Shown(ttl)
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A ttl within [`MIN_TTL`] and [`MAX_TTL`].
fn check_ttl(ttl: &Duration) -> Result<(), String> {
    match distlock_grammar::check_ttl(*ttl) {
        Ok(_) => Ok(()),
        Err(_) => Err(format!(
            "{} is out of range: a ttl is {} to {}",
            Shown(*ttl),
            Shown(MIN_TTL),
            Shown(MAX_TTL)
        )),
    }
}

/// `max_attempts`: 0 would never try.
fn at_least_one(attempts: &u32) -> Result<(), String> {
    if *attempts == 0 {
        Err("0 would never try; 1 tries once".to_owned())
    } else {
        Ok(())
    }
}

/// A `min_hold` no longer than [`MAX_TTL`].
fn check_min_hold(min: &Duration) -> Result<(), String> {
    if *min > MAX_TTL {
        Err(format!(
            "{} is longer than the longest ttl, {}",
            Shown(*min),
            Shown(MAX_TTL)
        ))
    } else {
        Ok(())
    }
}

/// A duration as configuration writes it (`10ms`, `7days`).
struct Shown(Duration);

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        distlock_grammar::DurationText(self.0).fmt(f)
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
    ];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let mut config = Self::default();
        while let Some(key) = table.next_key(map)? {
            match key {
                "ttl" => config.ttl = Some(table.value_checked(map, key, check_ttl)?),
                "wait" => config.wait = Some(table.value::<OrForever, _>(map, key)?.0),
                "store_patience" => config.store_patience = Some(table.value(map, key)?),
                "watchdog" => config.watchdog = Some(table.value(map, key)?),
                "max_hold" => config.max_hold = Some(table.value_checked(map, key, above_zero)?),
                "min_hold" => {
                    config.min_hold = Some(table.value_checked(map, key, check_min_hold)?);
                }
                "reentrant" => config.reentrant = Some(table.value(map, key)?),
                "replicas" => config.replicas = Some(table.value(map, key)?),
                "max_attempts" => {
                    config.max_attempts = Some(table.value_checked(map, key, at_least_one)?);
                }
                "retry_backoff" => config.retry_backoff = Some(table.value(map, key)?),
                "fenced" => config.fenced = Some(table.value(map, key)?),
                _ => return Err(table.unhandled(key)),
            }
        }
        config
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
                "first" => first = Some(table.value_checked(map, key, above_zero)?),
                "largest" => largest = Some(table.value::<Duration, _>(map, key)?),
                _ => return Err(table.unhandled(key)),
            }
        }
        let first: Duration = first.ok_or_else(|| table.missing("first"))?;
        let largest = largest.ok_or_else(|| table.missing("largest"))?;
        if largest > MAX_BACKOFF {
            return Err(table.error(
                "largest",
                format!("{} is longer than {}", Shown(largest), Shown(MAX_BACKOFF)),
            ));
        }
        if first > largest {
            return Err(table.error(
                "first",
                format!(
                    "{} is longer than largest, {}",
                    Shown(first),
                    Shown(largest)
                ),
            ));
        }
        Ok(Self { first, largest })
    }
}
