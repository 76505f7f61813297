//! [`LimiterConfig`]: a rate limiter's policies and options as a service keeps them in its
//! configuration, built through [`RateLimiterBuilder`].

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::de::{
    FieldValue, OrForever, ReadTable, Table, checked, deserialize_table, invalid, note, parsed,
    reading,
};
use super::{FieldErrorKind, InvalidField};
use crate::client::Client;
use crate::error::{InvalidPolicy, RateLimitError};
use crate::ratelimit::{
    CircuitBreaker, DEFAULT_BREAKER_MAX_OPEN, DEFAULT_BREAKER_OPEN, DEFAULT_RATE_CACHE_SUBJECTS,
    DEFAULT_RATE_CACHE_TTL, LimiterOptions, MAX_POLICIES, Outage, Policy, RateLimiter,
    RateLimiterBuilder,
};

/// A rate limiter's policies and options, each option optional (unset: the
/// [`RateLimiterBuilder`]'s default). Deserialises from a table whose fields are the
/// builder's options; [`build`](Self::build) makes the limiter.
///
/// | field | value | builder option |
/// |---|---|---|
/// | `policies` | one [policy](Policy#from-configuration) (`"api: 100/s burst 20"` or a table of `name`, `algorithm`, `rate` and optionally `lockout = { steps = ["1m", "5m", "1h"], remember = "24h" }`) or a list of them (checked all or nothing) | [`Client::rate_limiter`], [`Client::rate_limiter_all`], [`Policy::with_lockout`] |
/// | `outage` | `"fail-closed"`, `"fail-open"` or `"local-fallback"` | [`on_outage`](RateLimiterBuilder::on_outage) |
/// | `deadline` | a duration | [`deadline`](RateLimiterBuilder::deadline) |
/// | `deny_cache` | a number of subjects; 0: off | [`deny_cache`](RateLimiterBuilder::deny_cache) |
/// | `deny_cache_max_age` | a duration; `"0s"`: off | [`deny_cache_max_age`](RateLimiterBuilder::deny_cache_max_age) |
/// | `max_in_flight` | a number of checks | [`max_in_flight`](RateLimiterBuilder::max_in_flight) |
/// | `shadow` | `true` or `false` | [`shadow`](RateLimiterBuilder::shadow) |
/// | `max_wait` | a duration, or `"forever"` | [`max_wait`](RateLimiterBuilder::max_wait) |
/// | `circuit_breaker` | `false` (none), `true` (the default one), or `{ trip_after = 3, open_for = "100ms", max_open = "500ms" }` | [`circuit_breaker`](RateLimiterBuilder::circuit_breaker) |
/// | `rate_cache` | `{ ttl = "60s", subjects = 10000 }`, either optional | [`rate_cache`](RateLimiterBuilder::rate_cache) |
/// | `keep_logs_for` | a duration above zero, at most 366 days | [`keep_logs_for`](RateLimiterBuilder::keep_logs_for) |
/// | `hybrid` | `{ share = 500, sync = "100ms" }`: a share above zero, a sync above zero and at most 366 days | [`hybrid`](RateLimiterBuilder::hybrid) |
///
/// The options map into a [`LimiterOptions`] ([`options`](Self::options)), whose
/// [`check`](LimiterOptions::check) (the one place their bounds are checked) runs when the
/// configuration is read, so a bad value stops the service at start-up and names its field
/// as the builder would. More than eight policies or one name twice are refused when it is
/// read too; a store that cannot count, by [`build`](Self::build) with the builder's error.
/// The circuit breaker's bounds, and a lockout's (the [`InvalidPolicy`] of
/// [`Policy::with_lockout`], as the policy's error), are checked when the configuration is
/// read.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::config::LimiterConfig;
/// use distlock::ratelimit::Outage;
///
/// let api: LimiterConfig = toml::from_str(
///     r#"
///     policies = ["api: 100/s burst 20", "api-hourly: fixed-window 5000/h"]
///     outage = "local-fallback"
///     deadline = "50ms"
///     "#,
/// )?;
/// assert_eq!(api.outage, Some(Outage::LocalFallback));
///
/// let client = distlock::Client::in_memory();
/// let limiter = api.build(&client)?;
/// assert!(limiter.check("user:7").await?.allowed);
///
/// let err = toml::from_str::<LimiterConfig>("policies = \"api: 100/s\"\ndeadline = \"50\"")
///     .unwrap_err();
/// assert!(err.message().starts_with("field `deadline`: invalid duration \"50\""));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimiterConfig {
    /// The policies, checked all or nothing.
    pub policies: Vec<Policy>,
    /// [`RateLimiterBuilder::on_outage`].
    pub outage: Option<Outage>,
    /// [`RateLimiterBuilder::deadline`].
    pub deadline: Option<Duration>,
    /// [`RateLimiterBuilder::deny_cache`].
    pub deny_cache: Option<usize>,
    /// [`RateLimiterBuilder::deny_cache_max_age`].
    pub deny_cache_max_age: Option<Duration>,
    /// [`RateLimiterBuilder::max_in_flight`].
    pub max_in_flight: Option<usize>,
    /// [`RateLimiterBuilder::shadow`].
    pub shadow: Option<bool>,
    /// [`RateLimiterBuilder::max_wait`]; [`Duration::MAX`] (`"forever"`): no bound.
    pub max_wait: Option<Duration>,
    /// [`RateLimiterBuilder::circuit_breaker`].
    pub circuit_breaker: Option<BreakerConfig>,
    /// [`RateLimiterBuilder::rate_cache`].
    pub rate_cache: Option<RateCacheConfig>,
    /// [`RateLimiterBuilder::keep_logs_for`].
    pub keep_logs_for: Option<Duration>,
    /// [`RateLimiterBuilder::hybrid`].
    pub hybrid: Option<HybridConfig>,
}

/// The hybrid mode: `{ share = 500, sync = "100ms" }`, both required (see
/// [`RateLimiterBuilder::hybrid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HybridConfig {
    /// Units each replica takes from the store at a time: above zero.
    pub share: u32,
    /// The longest a replica counts on its own before it syncs: above zero, at most
    /// [`MAX_PERIOD`](crate::ratelimit::MAX_PERIOD).
    pub sync: Duration,
}

impl HybridConfig {
    /// A share of `share` units, synced at least every `sync` (checked when it is read from
    /// a file, and by [`RateLimiterBuilder::build`] when set in code).
    #[must_use]
    pub fn new(share: u32, sync: Duration) -> Self {
        Self { share, sync }
    }
}

/// The circuit breaker: `false` (`Off`), `true` (the default breaker) or a table of
/// `trip_after`, `open_for` and `max_open`, each optional (see
/// [`CircuitBreaker::trip_after`] and [`CircuitBreaker::open_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BreakerConfig {
    /// No breaker: every check asks the store.
    Off,
    /// A breaker of the limiter's own (its clones share it).
    On {
        /// Failures in a row that open it (unset: [`DEFAULT_BREAKER_FAILURES`](crate::ratelimit::DEFAULT_BREAKER_FAILURES)).
        trip_after: Option<u32>,
        /// How long it first stays open (unset: [`DEFAULT_BREAKER_OPEN`], or `max_open` if
        /// shorter).
        open_for: Option<Duration>,
        /// The longest it stays open as the interval doubles (unset:
        /// [`DEFAULT_BREAKER_MAX_OPEN`], or `open_for` if longer).
        max_open: Option<Duration>,
    },
}

/// How long, and for how many subjects, looked-up rates are kept:
/// `{ ttl = "60s", subjects = 10000 }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateCacheConfig {
    /// Unset: [`DEFAULT_RATE_CACHE_TTL`].
    pub ttl: Option<Duration>,
    /// Unset: [`DEFAULT_RATE_CACHE_SUBJECTS`].
    pub subjects: Option<usize>,
}

impl LimiterConfig {
    /// A configuration of `policies` with every option at the builder's default.
    #[must_use]
    pub fn new(policies: impl IntoIterator<Item = Policy>) -> Self {
        Self {
            policies: policies.into_iter().collect(),
            outage: None,
            deadline: None,
            deny_cache: None,
            deny_cache_max_age: None,
            max_in_flight: None,
            shadow: None,
            max_wait: None,
            circuit_breaker: None,
            rate_cache: None,
            keep_logs_for: None,
            hybrid: None,
        }
    }

    /// A [`RateLimiterBuilder`] on `client` with these policies and options, for what a file
    /// cannot hold (such as [`rates_by_subject`](RateLimiterBuilder::rates_by_subject)).
    ///
    /// # Errors
    /// [`RateLimitError::InvalidPolicy`] for a circuit breaker out of bounds (what parsing
    /// refuses, for a configuration built in code).
    pub fn builder(&self, client: &Client) -> Result<RateLimiterBuilder, RateLimitError> {
        Ok(client
            .rate_limiter_all(self.policies.iter().cloned())
            .options(self.options()?))
    }

    /// These options over the defaults: what [`RateLimiterBuilder::options`] takes, and what
    /// [`LimiterOptions::check`] checks (as reading the configuration did).
    ///
    /// # Errors
    /// [`InvalidPolicy::CircuitBreaker`] for a circuit breaker out of bounds (what parsing
    /// refuses, for a configuration built in code).
    pub fn options(&self) -> Result<LimiterOptions, InvalidPolicy> {
        let mut options = LimiterOptions::new();
        if let Some(outage) = self.outage {
            options = options.on_outage(outage);
        }
        if let Some(deadline) = self.deadline {
            options = options.deadline(deadline);
        }
        if let Some(subjects) = self.deny_cache {
            options = options.deny_cache(subjects);
        }
        if let Some(age) = self.deny_cache_max_age {
            options = options.deny_cache_max_age(age);
        }
        if let Some(checks) = self.max_in_flight {
            options = options.max_in_flight(checks);
        }
        if let Some(shadow) = self.shadow {
            options = options.shadow(shadow);
        }
        if let Some(max_wait) = self.max_wait {
            options = options.max_wait(max_wait);
        }
        if let Some(breaker) = self.circuit_breaker {
            options = options.circuit_breaker(breaker.breaker()?);
        }
        if let Some(cache) = self.rate_cache {
            options = options.rate_cache(
                cache.ttl.unwrap_or(DEFAULT_RATE_CACHE_TTL),
                cache.subjects.unwrap_or(DEFAULT_RATE_CACHE_SUBJECTS),
            );
        }
        if let Some(keep) = self.keep_logs_for {
            options = options.keep_logs_for(keep);
        }
        if let Some(hybrid) = self.hybrid {
            options = options.hybrid(hybrid.share, hybrid.sync);
        }
        Ok(options)
    }

    /// The limiter on `client`: `self.builder(client)?.build()`.
    ///
    /// # Errors
    /// As [`RateLimiterBuilder::build`] (no policy, more than
    /// [`MAX_POLICIES`](crate::ratelimit::MAX_POLICIES), a name twice, a store that cannot
    /// count), and a circuit breaker out of bounds.
    pub fn build(&self, client: &Client) -> Result<RateLimiter, RateLimitError> {
        self.builder(client)?.build()
    }
}

impl BreakerConfig {
    /// A fresh breaker with these settings (`None` for [`Off`](Self::Off)).
    fn breaker(self) -> Result<Option<CircuitBreaker>, InvalidPolicy> {
        let Self::On {
            trip_after,
            open_for,
            max_open,
        } = self
        else {
            return Ok(None);
        };
        let mut breaker = CircuitBreaker::new();
        if let Some(failures) = trip_after {
            breaker = breaker.trip_after(failures)?;
        }
        if open_for.is_some() || max_open.is_some() {
            let first =
                open_for.unwrap_or(DEFAULT_BREAKER_OPEN.min(max_open.unwrap_or(Duration::MAX)));
            let max = max_open.unwrap_or(DEFAULT_BREAKER_MAX_OPEN.max(first));
            breaker = breaker.open_for(first, max)?;
        }
        Ok(Some(breaker))
    }
}

impl<'de> Deserialize<'de> for LimiterConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_table(deserializer)
    }
}

impl ReadTable for HybridConfig {
    const WHAT: &'static str = "hybrid mode";
    const FIELDS: &'static [&'static str] = &["share", "sync"];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let mut share = None;
        let mut sync = None;
        while let Some(key) = table.next_key(map)? {
            match key {
                "share" => share = Some(table.value::<u32, _>(map, key)?),
                "sync" => sync = Some(table.value::<Duration, _>(map, key)?),
                _ => return Err(table.unhandled(key)),
            }
        }
        let share = share.ok_or_else(|| table.missing("share"))?;
        let sync = sync.ok_or_else(|| table.missing("sync"))?;
        if let Err(invalid) = LimiterOptions::new().hybrid(share, sync).check() {
            let field = invalid.field();
            return Err(table.error(
                field.strip_prefix("hybrid.").unwrap_or(field),
                invalid.reason(),
            ));
        }
        Ok(Self { share, sync })
    }
}

impl ReadTable for LimiterConfig {
    const WHAT: &'static str = "rate limiter settings";
    const FIELDS: &'static [&'static str] = &[
        "policies",
        "outage",
        "deadline",
        "deny_cache",
        "deny_cache_max_age",
        "max_in_flight",
        "shadow",
        "max_wait",
        "circuit_breaker",
        "rate_cache",
        "keep_logs_for",
        "hybrid",
    ];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        read_limiter(table, map, None)
    }
}

/// A limiter's table; `default_name` names the policies whose line has no name (a limiter of
/// [`Config::limiters`](super::Config::limiters): its own name).
pub(super) fn read_limiter<'de, A: MapAccess<'de>>(
    table: &mut Table<'_>,
    map: &mut A,
    default_name: Option<&str>,
) -> Result<LimiterConfig, A::Error> {
    let mut policies: Option<Vec<Policy>> = None;
    let mut config = LimiterConfig::new([]);
    while let Some(key) = table.next_key(map)? {
        match key {
            "policies" => {
                policies = Some(map.next_value_seed(PoliciesSeed {
                    path: &table.path(key),
                    default_name,
                })?);
            }
            "outage" => config.outage = Some(table.value::<OutageField, _>(map, key)?.0),
            "deadline" => {
                config.deadline = Some(table.value_checked(map, key, |d: &Duration| {
                    checked(LimiterOptions::new().deadline(*d).check())
                })?);
            }
            "deny_cache" => config.deny_cache = Some(table.value(map, key)?),
            "deny_cache_max_age" => config.deny_cache_max_age = Some(table.value(map, key)?),
            "max_in_flight" => {
                config.max_in_flight = Some(table.value_checked(map, key, |n: &usize| {
                    checked(LimiterOptions::new().max_in_flight(*n).check())
                })?);
            }
            "shadow" => config.shadow = Some(table.value(map, key)?),
            "max_wait" => {
                config.max_wait = Some(
                    table
                        .value_checked(map, key, |wait: &OrForever| {
                            checked(LimiterOptions::new().max_wait(wait.0).check())
                        })?
                        .0,
                );
            }
            "circuit_breaker" => config.circuit_breaker = Some(table.value(map, key)?),
            "rate_cache" => config.rate_cache = Some(table.value(map, key)?),
            "keep_logs_for" => {
                config.keep_logs_for = Some(table.value_checked(map, key, |keep: &Duration| {
                    checked(LimiterOptions::new().keep_logs_for(*keep).check())
                })?);
            }
            "hybrid" => config.hybrid = Some(table.value(map, key)?),
            _ => return Err(table.unhandled(key)),
        }
    }
    config.policies = policies.ok_or_else(|| table.missing("policies"))?;
    config
        .check()
        .map_err(|invalid| table.error(invalid.field(), invalid.reason()))?;
    Ok(config)
}

impl LimiterConfig {
    /// What the builder would refuse that does not depend on the store: more than
    /// [`MAX_POLICIES`] policies or a name twice, a circuit breaker out of bounds, and
    /// whatever [`LimiterOptions::check`] refuses.
    fn check(&self) -> Result<(), InvalidField> {
        if self.policies.len() > MAX_POLICIES {
            return Err(InvalidField::new(
                "policies",
                format!(
                    "{} policies; a limiter checks at most {MAX_POLICIES}",
                    self.policies.len()
                ),
            ));
        }
        for (i, policy) in self.policies.iter().enumerate() {
            if self.policies[..i].iter().any(|p| p.name() == policy.name()) {
                return Err(InvalidField::new(
                    format!("policies[{i}]"),
                    format!(
                        "the name `{}` is taken by an earlier policy; each needs its own",
                        policy.name()
                    ),
                ));
            }
        }
        let options = self
            .options()
            .map_err(|e| InvalidField::new("circuit_breaker", e.to_string()))?;
        options
            .check()
            .map_err(|invalid| InvalidField::new(invalid.field(), invalid.reason()))
    }
}

/// An [`Outage`] by name.
struct OutageField(Outage);

impl FieldValue for OutageField {
    fn read<'de, D: Deserializer<'de>>(path: &str, deserializer: D) -> Result<Self, D::Error> {
        parsed(
            path,
            deserializer,
            "\"fail-closed\", \"fail-open\" or \"local-fallback\"",
            FieldErrorKind::InvalidValue,
        )
        .map(Self)
    }
}

/// `policies`: one policy (its line or its table) or a list of them.
struct PoliciesSeed<'a> {
    path: &'a str,
    default_name: Option<&'a str>,
}

impl<'de> DeserializeSeed<'de> for PoliciesSeed<'_> {
    type Value = Vec<Policy>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<Policy>, D::Error> {
        reading(self.path, || deserializer.deserialize_any(self))
    }
}

const POLICIES_LOOK_LIKE: &str = "a policy such as \"api: 100/s burst 20\" (or a table of \
                                  `name`, `algorithm` and `rate`), or a list of them";

impl<'de> Visitor<'de> for PoliciesSeed<'_> {
    type Value = Vec<Policy>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        note(FieldErrorKind::WrongType, self.path);
        write!(f, "field `{}`: {POLICIES_LOOK_LIKE}", self.path)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Vec<Policy>, E> {
        one_policy(self.path, text, self.default_name).map(|policy| vec![policy])
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Vec<Policy>, A::Error> {
        policy_table(self.path, map).map(|policy| vec![policy])
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Policy>, A::Error> {
        let mut policies = Vec::new();
        loop {
            let path = format!("{}[{}]", self.path, policies.len());
            let seed = OnePolicySeed {
                path: &path,
                default_name: self.default_name,
            };
            match seq.next_element_seed(seed)? {
                Some(policy) => policies.push(policy),
                None => break,
            }
            if policies.len() > MAX_POLICIES {
                // Read no further into a hostile list.
                return Err(invalid(
                    self.path,
                    format_args!(
                        "more than {MAX_POLICIES} policies; a limiter checks at most {MAX_POLICIES}"
                    ),
                ));
            }
        }
        if policies.is_empty() {
            return Err(invalid(
                self.path,
                "an empty list; give at least one policy",
            ));
        }
        Ok(policies)
    }
}

/// A policy's line at `path`; without a name (`"100/s burst 20"`), `default_name`'s.
fn one_policy<E: de::Error>(
    path: &str,
    text: &str,
    default_name: Option<&str>,
) -> Result<Policy, E> {
    let parsed = match default_name {
        Some(name) if !text.contains(':') => format!("{name}: {text}").parse::<Policy>(),
        _ => text.parse(),
    };
    parsed.map_err(|e| {
        note(FieldErrorKind::InvalidPolicy, path);
        E::custom(format_args!("field `{path}`: {e}"))
    })
}

/// A policy's table at `path` (errors name the table's field, as [`Policy`]'s own
/// `Deserialize` does).
fn policy_table<'de, A: MapAccess<'de>>(path: &str, map: A) -> Result<Policy, A::Error> {
    Policy::deserialize(de::value::MapAccessDeserializer::new(map))
        .inspect_err(|_| note(FieldErrorKind::InvalidPolicy, path))
}

/// One policy of a list of `policies`: its line or its table.
struct OnePolicySeed<'a> {
    path: &'a str,
    default_name: Option<&'a str>,
}

impl<'de> DeserializeSeed<'de> for OnePolicySeed<'_> {
    type Value = Policy;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Policy, D::Error> {
        reading(self.path, || deserializer.deserialize_any(self))
    }
}

impl<'de> Visitor<'de> for OnePolicySeed<'_> {
    type Value = Policy;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        note(FieldErrorKind::WrongType, self.path);
        write!(
            f,
            "field `{}`: a policy such as \"api: 100/s burst 20\", or a table of `name`, \
             `algorithm` and `rate`",
            self.path
        )
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Policy, E> {
        one_policy(self.path, text, self.default_name)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Policy, A::Error> {
        policy_table(self.path, map)
    }
}

/// `circuit_breaker`: `true`, `false` or the table.
impl FieldValue for BreakerConfig {
    fn read<'de, D: Deserializer<'de>>(path: &str, deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BreakerVisitor(path))
    }
}

struct BreakerVisitor<'a>(&'a str);

impl<'de> Visitor<'de> for BreakerVisitor<'_> {
    type Value = BreakerConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        note(FieldErrorKind::WrongType, self.0);
        write!(
            f,
            "field `{}`: false (no breaker), true (the default one), or a table of \
             `trip_after`, `open_for` and `max_open`",
            self.0
        )
    }

    fn visit_bool<E: de::Error>(self, on: bool) -> Result<BreakerConfig, E> {
        Ok(if on {
            BreakerConfig::On {
                trip_after: None,
                open_for: None,
                max_open: None,
            }
        } else {
            BreakerConfig::Off
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<BreakerConfig, A::Error> {
        <BreakerTable as FieldValue>::read(self.0, de::value::MapAccessDeserializer::new(map))
            .map(|table| table.0)
    }
}

/// The table form of `circuit_breaker`.
struct BreakerTable(BreakerConfig);

impl ReadTable for BreakerTable {
    const WHAT: &'static str = "circuit breaker settings";
    const FIELDS: &'static [&'static str] = &["trip_after", "open_for", "max_open"];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let (mut trip_after, mut open_for, mut max_open) = (None, None, None);
        while let Some(key) = table.next_key(map)? {
            match key {
                "trip_after" => trip_after = Some(table.value(map, key)?),
                "open_for" => open_for = Some(table.value(map, key)?),
                "max_open" => max_open = Some(table.value(map, key)?),
                _ => return Err(table.unhandled(key)),
            }
        }
        Ok(Self(BreakerConfig::On {
            trip_after,
            open_for,
            max_open,
        }))
    }
}

impl ReadTable for RateCacheConfig {
    const WHAT: &'static str = "rate cache settings";
    const FIELDS: &'static [&'static str] = &["ttl", "subjects"];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let mut cache = Self {
            ttl: None,
            subjects: None,
        };
        while let Some(key) = table.next_key(map)? {
            match key {
                "ttl" => cache.ttl = Some(table.value(map, key)?),
                "subjects" => {
                    cache.subjects = Some(table.value_checked(map, key, |n: &usize| {
                        let options = LimiterOptions::new().rate_cache(DEFAULT_RATE_CACHE_TTL, *n);
                        checked(options.check())
                    })?);
                }
                _ => return Err(table.unhandled(key)),
            }
        }
        Ok(cache)
    }
}
