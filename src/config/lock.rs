//! [`LockConfig`]: a lock's options as a service keeps them in its configuration, applied to
//! a [`LockBuilder`].

use std::time::Duration;

use serde::de::{Deserialize, Deserializer, MapAccess};
use serde::ser::{Serialize, SerializeMap, Serializer};

use super::client::ReplicasConfig;
use distlock_grammar::{DurationText, LOCK_OPTIONS, OptionKind, lock_option};

use super::de::{FieldValue, OrForever, ReadTable, Table, checked, deserialize_table};
use crate::client::Client;
use crate::lock::{LockBuilder, LockOptions, OptionValue};

/// A lock's options, each optional (unset: the [`LockBuilder`]'s default). Deserialises from
/// a table whose fields are the builder's options; [`apply`](Self::apply) sets them on a
/// builder, [`options`](Self::options) gives them as a [`LockOptions`] (read a value with its
/// getter, `config.options().get_ttl()`), and [`sets`](Self::sets) says which it sets.
///
/// The fields are read from the table of lock options the macro also reads
/// ([`distlock_grammar::LOCK_OPTIONS`]), so an option added to [`LockOptions`] and to that
/// table is a field here without code of its own; `replicas` and `retry_backoff`, whose values
/// are tables, are read here.
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
pub struct LockConfig {
    /// The options of the table of lock options ([`distlock_grammar::LOCK_OPTIONS`]) this
    /// configuration sets, in the order they were read (each name once).
    set: Vec<(&'static str, OptionValue)>,
    /// [`LockBuilder::replicas`]; unset: the client's.
    replicas: Option<ReplicasConfig>,
    /// [`LockBuilder::retry_backoff`].
    retry_backoff: Option<BackoffConfig>,
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

    /// Whether this configuration sets the option `field` (a field of its table: `"ttl"`,
    /// `"replicas"`, ...); the others keep the builder's value.
    #[must_use]
    pub fn sets(&self, field: &str) -> bool {
        match field {
            "replicas" => self.replicas.is_some(),
            "retry_backoff" => self.retry_backoff.is_some(),
            _ => self.set.iter().any(|(name, _)| *name == field),
        }
    }

    /// `options` with every option this configuration sets; the others keep their value
    /// (what [`apply`](Self::apply) does to a builder's, for a value of your own: a layer's
    /// lease options, say).
    pub fn over(&self, options: LockOptions) -> LockOptions {
        self.onto(options)
    }

    /// `options` with every option this configuration sets.
    fn onto(&self, mut options: LockOptions) -> LockOptions {
        for (name, value) in &self.set {
            options = options
                .clone()
                .with_named(name, value.clone())
                .unwrap_or(options);
        }
        if let Some(replicas) = self.replicas {
            options = options.replicas(replicas.count, replicas.timeout);
        }
        if let Some(backoff) = self.retry_backoff {
            options = options.retry_backoff(backoff.first, backoff.largest);
        }
        options
    }
}

/// Writes the options it sets as the table it reads (durations as text, `"forever"` for
/// [`Duration::MAX`]), so a configuration survives a round trip.
impl Serialize for LockConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let tables =
            usize::from(self.replicas.is_some()) + usize::from(self.retry_backoff.is_some());
        let mut map = serializer.serialize_map(Some(self.set.len() + tables))?;
        for (name, value) in &self.set {
            match value {
                OptionValue::Flag(on) => map.serialize_entry(name, on)?,
                OptionValue::Count(n) => map.serialize_entry(name, n)?,
                OptionValue::Duration(d) => map.serialize_entry(name, &Text(*d))?,
                OptionValue::Text(text) => map.serialize_entry(name, text)?,
            }
        }
        if let Some(replicas) = &self.replicas {
            map.serialize_entry("replicas", replicas)?;
        }
        if let Some(backoff) = &self.retry_backoff {
            map.serialize_entry("retry_backoff", backoff)?;
        }
        map.end()
    }
}

/// A duration as a configuration writes it: text the reader parses, `"forever"` for
/// [`Duration::MAX`].
struct Text(Duration);

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0 == Duration::MAX {
            serializer.serialize_str("forever")
        } else {
            serializer.collect_str(&DurationText(self.0))
        }
    }
}

impl Serialize for ReplicasConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("count", &self.count)?;
        map.serialize_entry("timeout", &Text(self.timeout))?;
        map.end()
    }
}

impl Serialize for BackoffConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("first", &Text(self.first))?;
        map.serialize_entry("largest", &Text(self.largest))?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for LockConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_table(deserializer)
    }
}

/// The table's fields: every option of [`LOCK_OPTIONS`], then those whose value is a table.
const FIELDS: [&str; LOCK_OPTIONS.len() + 2] = {
    let mut fields = [""; LOCK_OPTIONS.len() + 2];
    let mut i = 0;
    while i < LOCK_OPTIONS.len() {
        fields[i] = LOCK_OPTIONS[i].name;
        i += 1;
    }
    fields[i] = "replicas";
    fields[i + 1] = "retry_backoff";
    fields
};

impl ReadTable for LockConfig {
    const WHAT: &'static str = "lock options";
    const FIELDS: &'static [&'static str] = &FIELDS;

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let mut config = Self::default();
        while let Some(key) = table.next_key(map)? {
            match key {
                "replicas" => config.replicas = Some(table.value(map, key)?),
                "retry_backoff" => config.retry_backoff = Some(table.value(map, key)?),
                _ => {
                    let Some(option) = lock_option(key) else {
                        return Err(table.unhandled(key));
                    };
                    let name = option.name;
                    let value = match option.kind {
                        OptionKind::Flag => read_option(table, map, name, OptionValue::Flag)?,
                        OptionKind::DurationOrForever => {
                            read_option(table, map, name, |d: OrForever| {
                                OptionValue::Duration(d.0)
                            })?
                        }
                        OptionKind::Count => read_option(table, map, name, OptionValue::Count)?,
                        OptionKind::Text => read_option(table, map, name, OptionValue::Text)?,
                        _ => read_option(table, map, name, OptionValue::Duration)?,
                    };
                    config.set.push((option.name, value));
                }
            }
        }
        config
            .options()
            .check()
            .map_err(|invalid| table.error(invalid.field(), invalid.reason()))?;
        Ok(config)
    }
}

/// The value of the lock option `name`, refused if [`LockOptions::check`] refuses it alone.
fn read_option<'de, T, A>(
    table: &Table<'_>,
    map: &mut A,
    name: &'static str,
    value_of: impl Fn(T) -> OptionValue,
) -> Result<OptionValue, A::Error>
where
    T: FieldValue + Clone,
    A: MapAccess<'de>,
{
    let set = |value: T| LockOptions::new().with_named(name, value_of(value));
    let value = table.value_checked(map, name, |value: &T| match set(value.clone()) {
        Some(options) => checked(options.check()),
        None => Err(format!(
            "is not a value of `{name}` (a distlock bug; please report it)"
        )),
    })?;
    Ok(value_of(value))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_survives_a_round_trip() {
        let mut text = String::new();
        for option in LOCK_OPTIONS {
            let value = match option.kind {
                OptionKind::Flag => "true",
                OptionKind::Count => "3",
                OptionKind::Text => "\"billing-worker\"",
                OptionKind::DurationOrForever => "\"forever\"",
                _ => "\"1m 30s\"",
            };
            text.push_str(&format!("{} = {value}\n", option.name));
        }
        text.push_str(
            "replicas = { count = 1, timeout = \"50ms\" }\n\
             retry_backoff = { first = \"5ms\", largest = \"1s\" }\n",
        );
        let config: LockConfig = toml::from_str(&text).expect(&text);
        assert_eq!(
            config.set.len(),
            LOCK_OPTIONS.len(),
            "every option of the table"
        );
        let written = toml::to_string(&config).expect("written");
        let again: LockConfig = toml::from_str(&written).expect(&written);
        assert_eq!(again, config, "{written}");
        assert_eq!(again.options(), config.options());
        assert_eq!(config.options().get_wait(), Duration::MAX);
        assert!(
            config.sets("retry_backoff")
                && config.sets("fair")
                && !LockConfig::default().sets("ttl")
        );
    }
}
