//! [`Config`]: a whole service's distlock configuration (the client, the lock defaults, the
//! named limiters), and with the `toml` feature its [loader](ConfigLoader): a TOML file or
//! text, environment overrides, typed errors.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, Visitor};

use super::de::{ReadTable, Table, deserialize_table, note, reading};
use super::limiter::read_limiter;
use super::{ClientConfig, ConfigError, ConnectError, FieldErrorKind, LimiterConfig, LockConfig};
use crate::client::Client;
use crate::lock::LockBuilder;
use crate::ratelimit::RateLimiter;

/// A service's distlock configuration: `[client]` (required: the store), `[lock]` (the
/// defaults of every lock taken through [`lock`](Self::lock)) and `[limiters.<name>]` (named
/// rate limiters, built by [`limiter`](Self::limiter)).
///
/// ```toml
/// [client]
/// url = "redis://127.0.0.1:6379/"
/// prefix = "shop"
///
/// [lock]
/// ttl = "30s"
/// wait = "5s"
///
/// [limiters.api]
/// policies = "100/s burst 20"        # named `api`, after the limiter
/// outage = "local-fallback"
///
/// [limiters.login]
/// policies = ["login: 5/min", "login-daily: fixed-window 50/d"]
/// ```
///
/// A policy line without a name (`"100/s burst 20"`) takes its limiter's name. The tables'
/// fields are those of [`ClientConfig`], [`LockConfig`] and [`LimiterConfig`]; everything a
/// file can get wrong is refused when it is read, with the field's path
/// (`limiters.api.deadline`). With the `toml` feature, [`from_file`](Self::from_file),
/// [`from_toml_str`](Self::from_toml_str) and [`loader`](Self::loader) (environment
/// overrides, a section of a larger file) read it and return a typed [`ConfigError`];
/// without, it deserialises from any self-describing serde format.
///
/// ```
/// # #[cfg(feature = "toml")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::config::{Config, ConfigError, FieldErrorKind};
///
/// let config = Config::from_toml_str(
///     r#"
///     [client]
///     memory = true
///
///     [lock]
///     ttl = "10s"
///
///     [limiters.api]
///     policies = "100/s burst 20"
///     "#,
/// )?;
/// let client = config.connect().await?;
/// let api = config.limiter(&client, "api")?;
/// assert!(api.check("user:7").await?.allowed);
/// let lease = config.lock(&client, "order:42").acquire().await?;
/// lease.release().await?;
///
/// let err = Config::from_toml_str("[client]\nmemory = true\n[lock]\nttl = \"5ms\"").unwrap_err();
/// assert_eq!(err.field_kind(), Some(FieldErrorKind::InvalidValue));
/// assert_eq!(err.field(), Some("lock.ttl"));
/// assert_eq!(
///     err.to_string(),
///     "configuration:4:7: field `lock.ttl`: 5ms is out of range: a ttl is 10ms to 7days"
/// );
/// # Ok(()) }
/// # #[cfg(not(feature = "toml"))]
/// # fn main() {}
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// `[client]`: the store and the client's settings.
    pub client: ClientConfig,
    /// `[lock]`: options every lock taken through [`lock`](Self::lock) starts with.
    pub lock: LockConfig,
    /// `[limiters.<name>]`: the rate limiters, by name.
    pub limiters: BTreeMap<String, LimiterConfig>,
}

impl Config {
    /// A configuration of `client` with no lock options and no limiters.
    #[must_use]
    pub fn new(client: ClientConfig) -> Self {
        Self {
            client,
            lock: LockConfig::default(),
            limiters: BTreeMap::new(),
        }
    }

    /// The client: [`ClientConfig::connect`].
    ///
    /// # Errors
    /// As [`ClientConfig::connect`].
    pub async fn connect(&self) -> Result<Client, ConnectError> {
        self.client.connect().await
    }

    /// The lock `name` of `client` with the `[lock]` options; the builder's own setters
    /// change them for this lock.
    pub fn lock(&self, client: &Client, name: impl Into<String>) -> LockBuilder {
        self.lock.lock(client, name)
    }

    /// The limiter `name` (`[limiters.<name>]`) on `client`.
    ///
    /// # Errors
    /// [`ConfigError::NoLimiter`] when there is none of that name;
    /// [`ConfigError::Limiter`] when the builder refuses it (a store that cannot count, a
    /// configuration built in code that breaks a bound).
    pub fn limiter(&self, client: &Client, name: &str) -> Result<RateLimiter, ConfigError> {
        let config = self
            .limiters
            .get(name)
            .ok_or_else(|| ConfigError::NoLimiter {
                name: name.to_owned(),
                known: self.limiters.keys().cloned().collect(),
            })?;
        config.build(client).map_err(|source| ConfigError::Limiter {
            name: name.to_owned(),
            source,
        })
    }

    /// Every limiter, by name, so that a service finds a limiter its store refuses when it
    /// starts.
    ///
    /// # Errors
    /// [`ConfigError::Limiter`] for the first the builder refuses.
    pub fn limiters(&self, client: &Client) -> Result<BTreeMap<String, RateLimiter>, ConfigError> {
        self.limiters
            .keys()
            .map(|name| Ok((name.clone(), self.limiter(client, name)?)))
            .collect()
    }
}

impl<'de> Deserialize<'de> for Config {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_table(deserializer)
    }
}

impl ReadTable for Config {
    const WHAT: &'static str = "distlock settings";
    const FIELDS: &'static [&'static str] = &["client", "lock", "limiters"];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let mut client = None;
        let mut lock = None;
        let mut limiters = None;
        while let Some(key) = table.next_key(map)? {
            match key {
                "client" => client = Some(table.value(map, key)?),
                "lock" => lock = Some(table.value(map, key)?),
                "limiters" => {
                    limiters = Some(map.next_value_seed(LimitersSeed(&table.path(key)))?);
                }
                _ => return Err(table.unhandled(key)),
            }
        }
        Ok(Self {
            client: client.ok_or_else(|| table.missing("client"))?,
            lock: lock.unwrap_or_default(),
            limiters: limiters.unwrap_or_default(),
        })
    }
}

/// `limiters`: a table of limiter tables, by name.
struct LimitersSeed<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for LimitersSeed<'_> {
    type Value = BTreeMap<String, LimiterConfig>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        reading(self.0, || deserializer.deserialize_map(self))
    }
}

impl<'de> Visitor<'de> for LimitersSeed<'_> {
    type Value = BTreeMap<String, LimiterConfig>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        note(FieldErrorKind::WrongType, self.0);
        write!(
            f,
            "field `{}`: a table of limiters by name (`[{}.api]`)",
            self.0, self.0
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut limiters = BTreeMap::new();
        while let Some(name) = map.next_key::<String>()? {
            let path = format!("{}.{name}", self.0);
            if limiters.contains_key(&name) {
                note(FieldErrorKind::DuplicateField, &path);
                return Err(de::Error::custom(format_args!(
                    "field `{path}` is given twice"
                )));
            }
            let limiter = map.next_value_seed(LimiterSeed {
                path: &path,
                name: &name,
            })?;
            limiters.insert(name, limiter);
        }
        Ok(limiters)
    }
}

/// One limiter of `limiters`, named.
struct LimiterSeed<'a> {
    path: &'a str,
    name: &'a str,
}

impl<'de> DeserializeSeed<'de> for LimiterSeed<'_> {
    type Value = LimiterConfig;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        reading(self.path, || deserializer.deserialize_map(self))
    }
}

impl<'de> Visitor<'de> for LimiterSeed<'_> {
    type Value = LimiterConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        note(FieldErrorKind::WrongType, self.path);
        write!(
            f,
            "field `{}`: a table of rate limiter settings (`policies`, `outage`, ...)",
            self.path
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut table = Table::new(self.path, LimiterConfig::FIELDS);
        read_limiter(&mut table, &mut map, Some(self.name))
    }
}

#[cfg(feature = "toml")]
pub use self::loader::ConfigLoader;

#[cfg(feature = "toml")]
mod loader {
    use std::path::{Path, PathBuf};

    use serde::de::DeserializeSeed;

    use std::fmt;

    use serde::de::{self, Deserializer, MapAccess, Visitor};

    use super::Config;
    use crate::config::de::{FieldValue, ReadTable, note, take_note, take_reading};
    use crate::config::{ConfigError, FieldErrorKind, Location, Origin};

    /// The file's top: [`Config`] at its root, or in the table `section` (other keys ignored).
    struct Root<'a> {
        section: Option<&'a str>,
    }

    impl<'de> DeserializeSeed<'de> for Root<'_> {
        type Value = Config;

        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Config, D::Error> {
            match self.section {
                None => <Config as FieldValue>::read("", deserializer),
                Some(_) => deserializer.deserialize_map(self),
            }
        }
    }

    impl<'de> Visitor<'de> for Root<'_> {
        type Value = Config;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Config, A::Error> {
            let section = self.section.unwrap_or_default();
            let mut config = None;
            while let Some(key) = map.next_key::<String>()? {
                if key == section && config.is_none() {
                    config = Some(map.next_value_seed(ConfigAt(section))?);
                } else {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
            config.ok_or_else(|| {
                note(FieldErrorKind::MissingField, section);
                de::Error::custom(format_args!("missing table `{section}`"))
            })
        }
    }

    /// [`Config`] under the path `.0`.
    struct ConfigAt<'a>(&'a str);

    impl<'de> DeserializeSeed<'de> for ConfigAt<'_> {
        type Value = Config;

        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Config, D::Error> {
            <Config as FieldValue>::read(self.0, deserializer)
        }
    }

    /// The store fields of `[client]`: an override of one replaces the file's store.
    const STORE_FIELDS: [&str; 5] = ["url", "cluster", "sentinel", "quorum", "memory"];

    impl Config {
        /// Reads the TOML file at `path`: `Config::loader().file(path).load()`.
        ///
        /// # Errors
        /// [`ConfigError::Read`], [`ConfigError::Syntax`] or [`ConfigError::Field`], with the
        /// file's path, line and column.
        pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
            Self::loader().file(path).load()
        }

        /// Reads TOML text: `Config::loader().toml(text).load()`.
        ///
        /// # Errors
        /// [`ConfigError::Syntax`] or [`ConfigError::Field`], with the line and column.
        pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
            Self::loader().toml(text).load()
        }

        /// A loader: a file or text, a section of it, environment overrides.
        pub fn loader() -> ConfigLoader {
            ConfigLoader::default()
        }
    }

    /// Reads a [`Config`] from a TOML file or text (or from nothing: the environment alone),
    /// applies environment overrides, and checks the result (feature `toml`).
    ///
    /// # Environment overrides
    ///
    /// With [`env`](Self::env)`("DISTLOCK")`, a variable `DISTLOCK__<PATH>` sets the field at
    /// `<PATH>`: the prefix, then the path's parts, each after a double underscore, matched
    /// to the file's keys regardless of case (a `-` in a key is matched by `_`):
    ///
    /// | variable | sets |
    /// |---|---|
    /// | `DISTLOCK__CLIENT__URL=redis://cache:6379/` | `client.url` (and drops the file's store, if another) |
    /// | `DISTLOCK__CLIENT__RESPONSE_TIMEOUT=500ms` | `client.response_timeout` |
    /// | `DISTLOCK__LOCK__TTL=30s` | `lock.ttl` |
    /// | `DISTLOCK__LIMITERS__API__POLICIES=200/s` | `limiters.api.policies` |
    /// | `DISTLOCK__CLIENT__CLUSTER=["redis://a:7000/", "redis://b:7000/"]` | `client.cluster` |
    ///
    /// The configuration's variables are exactly those that start with the prefix and a
    /// double underscore. Other variables that merely start with the prefix
    /// (`DISTLOCK_HOME`, a deployment's or a tool's own `DISTLOCK_...`) are not configuration
    /// and change nothing; only the old spelling of a configuration variable, one underscore
    /// before a top-level table (`DISTLOCK_LOCK__TTL`), is refused, with the new name, so
    /// that an override is never dropped silently.
    ///
    /// A value that is a TOML value (`true`, `3`, `[...]`, `{ ... }`, `"quoted"`) is taken as
    /// one; anything else is text, so `500ms` and URLs need no quotes (quote text that would
    /// read as a number or a boolean: `'"123"'`). Overrides are checked as the file is, and
    /// an error in one names the variable. Setting one of `client`'s store fields (`url`,
    /// `cluster`, `sentinel`, `quorum`, `memory`) replaces the file's store, so an
    /// environment can point a service elsewhere.
    ///
    /// ```
    /// # fn main() -> Result<(), distlock::config::ConfigError> {
    /// use distlock::config::{Config, StoreConfig};
    ///
    /// let config = Config::loader()
    ///     .toml("[client]\nmemory = true\n[lock]\nttl = \"10s\"")
    ///     .env_vars("APP", [
    ///         ("APP__CLIENT__URL", "redis://cache:6379/"),
    ///         ("APP__LOCK__TTL", "30s"),
    ///         ("APP_HOME", "/srv/app"), // not configuration
    ///         ("OTHER__LOCK__TTL", "1s"),
    ///     ])
    ///     .load()?;
    /// assert!(matches!(&config.client.store, StoreConfig::Redis(url) if url == "redis://cache:6379/"));
    /// assert!(config.lock.sets("ttl"));
    /// assert_eq!(config.lock.options().get_ttl(), std::time::Duration::from_secs(30));
    /// # Ok(()) }
    /// ```
    #[derive(Debug, Clone, Default)]
    #[must_use]
    pub struct ConfigLoader {
        source: Source,
        section: Option<String>,
        env: Option<Env>,
    }

    #[derive(Debug, Clone, Default)]
    enum Source {
        #[default]
        Nothing,
        Text(String),
        File(PathBuf),
    }

    #[derive(Debug, Clone)]
    struct Env {
        prefix: String,
        /// `None`: the process's environment, read by `load`.
        vars: Option<Vec<(String, String)>>,
    }

    impl ConfigLoader {
        /// Reads the TOML file at `path` (replacing a file or text given before).
        pub fn file(mut self, path: impl AsRef<Path>) -> Self {
            self.source = Source::File(path.as_ref().to_owned());
            self
        }

        /// Reads TOML `text` (replacing a file or text given before).
        pub fn toml(mut self, text: impl Into<String>) -> Self {
            self.source = Source::Text(text.into());
            self
        }

        /// Reads the configuration from the table `name` of the file (`[distlock.client]`,
        /// `[distlock.lock]`...), ignoring the rest, which is the application's own. Paths in
        /// errors start with it (`distlock.lock.ttl`); environment overrides are relative to
        /// it (`DISTLOCK__LOCK__TTL`).
        pub fn section(mut self, name: impl Into<String>) -> Self {
            self.section = Some(name.into());
            self
        }

        /// Applies the process's environment variables that start with `prefix` and `__`
        /// (`DISTLOCK__LOCK__TTL` for `"DISTLOCK"`), read when [`load`](Self::load) runs;
        /// see [Environment overrides](Self#environment-overrides). Variables that start
        /// with the prefix and one underscore (`DISTLOCK_REDIS_SOURCES`) are not read. A
        /// configuration variable whose name or value is not UTF-8 is an error.
        pub fn env(mut self, prefix: impl Into<String>) -> Self {
            self.env = Some(Env {
                prefix: prefix.into(),
                vars: None,
            });
            self
        }

        /// As [`env`](Self::env), from `vars` instead of the process's environment (for
        /// tests, or variables from elsewhere). Variables outside the prefix's namespace are
        /// ignored, as `env` ignores them.
        pub fn env_vars<K, V>(
            mut self,
            prefix: impl Into<String>,
            vars: impl IntoIterator<Item = (K, V)>,
        ) -> Self
        where
            K: Into<String>,
            V: Into<String>,
        {
            self.env = Some(Env {
                prefix: prefix.into(),
                vars: Some(
                    vars.into_iter()
                        .map(|(k, v)| (k.into(), v.into()))
                        .collect(),
                ),
            });
            self
        }

        /// Reads, overrides and checks the configuration.
        ///
        /// # Errors
        /// [`ConfigError::Read`] for a file that cannot be read, [`ConfigError::Syntax`] for
        /// text that is not TOML, [`ConfigError::Env`] for an override that names no field,
        /// and [`ConfigError::Field`] for what the configuration gets wrong, with its kind
        /// and path.
        pub fn load(self) -> Result<Config, ConfigError> {
            let (text, origin) = match &self.source {
                Source::Nothing => (String::new(), Origin::Text),
                Source::Text(text) => (text.clone(), Origin::Text),
                Source::File(path) => match std::fs::read_to_string(path) {
                    Ok(text) => (text, Origin::File(path.clone())),
                    Err(source) => {
                        return Err(ConfigError::Read {
                            path: path.clone(),
                            source,
                        });
                    }
                },
            };
            let syntax = |e: toml::de::Error| ConfigError::Syntax {
                origin: origin.clone(),
                location: e.span().map(|span| Location::of(&text, span.start)),
                message: e.message().trim_end().to_owned(),
            };
            let section = self.section.as_deref();
            let overrides = match &self.env {
                Some(env) => env.vars()?,
                None => Vec::new(),
            };
            // Clear what an earlier parse on this thread left.
            drop((take_note(), take_reading()));
            let (result, applied) = if overrides.is_empty() {
                // Straight from the text: errors keep their line and column.
                let deserializer = toml::Deserializer::parse(&text).map_err(syntax)?;
                (Root { section }.deserialize(deserializer), Vec::new())
            } else {
                let mut table: toml::Table = toml::from_str(&text).map_err(syntax)?;
                drop(take_note());
                let applied = apply(&mut table, section, &overrides)?;
                (Root { section }.deserialize(table), applied)
            };
            result.map_err(|e| {
                let mut message = e.message().trim_end().to_owned();
                let (kind, field) = match (take_note(), take_reading()) {
                    (Some((kind, path)), _) => (kind, Some(path)),
                    // The format's own error about a value (an integer beyond 128 bits):
                    // the value being read.
                    (None, Some(path)) => {
                        message = format!("field `{path}`: {message}");
                        (FieldErrorKind::InvalidValue, Some(path))
                    }
                    (None, None) => (FieldErrorKind::InvalidValue, None),
                };
                let field = field.filter(|path| !path.is_empty());
                // A field an override set (or is under one) came from the environment.
                let by_env = field.as_deref().and_then(|field| {
                    applied.iter().find(|(path, _)| {
                        field == path
                            || field
                                .strip_prefix(path.as_str())
                                .is_some_and(|rest| rest.starts_with(['.', '[']))
                    })
                });
                let (origin, location) = match by_env {
                    Some((_, var)) => (Origin::Env(var.clone()), None),
                    None if applied.is_empty() => (
                        origin.clone(),
                        e.span().map(|span| Location::of(&text, span.start)),
                    ),
                    None => (origin.clone(), None),
                };
                ConfigError::Field {
                    kind,
                    field,
                    origin,
                    location,
                    message,
                }
            })
        }
    }

    /// What a variable's name is to a loader with a given prefix.
    enum Name<'a> {
        /// In the configuration's namespace (`<PREFIX>__<PATH>`): the path.
        Config(&'a str),
        /// The old spelling of one (`<PREFIX>_LOCK__TTL`): refused, with the new name.
        OldSpelling(&'a str),
        /// Anything else, the tooling's and the deployment's own `<PREFIX>_...` included.
        Other,
    }

    impl Env {
        /// What `name` is under this loader's prefix.
        fn classify<'a>(&self, name: &'a str) -> Name<'a> {
            let Some(rest) = name.strip_prefix(self.prefix.as_str()) else {
                return Name::Other;
            };
            if let Some(path) = rest.strip_prefix("__") {
                return Name::Config(path);
            }
            let Some(path) = rest.strip_prefix('_') else {
                return Name::Other;
            };
            // Only a top-level table of the configuration, followed by the end or `__`.
            let first = path.split("__").next().unwrap_or_default();
            if <Config as ReadTable>::FIELDS
                .iter()
                .any(|field| field.eq_ignore_ascii_case(first))
            {
                Name::OldSpelling(path)
            } else {
                Name::Other
            }
        }

        /// The configuration's variables, sorted by name: (name, path, value).
        fn vars(&self) -> Result<Vec<(String, String, String)>, ConfigError> {
            let mut found = Vec::new();
            let mut take = |name: &str, value: Option<&str>| match self.classify(name) {
                Name::Other => Ok(()),
                Name::OldSpelling(path) => Err(ConfigError::Env {
                    var: name.to_owned(),
                    reason: format!(
                        "configuration variables start with `{prefix}__` (two underscores): \
                         write {prefix}__{path}",
                        prefix = self.prefix
                    ),
                }),
                Name::Config(path) => match value {
                    Some(value) => {
                        found.push((name.to_owned(), path.to_owned(), value.to_owned()));
                        Ok(())
                    }
                    None => Err(ConfigError::Env {
                        var: name.to_owned(),
                        reason: "its value is not UTF-8".to_owned(),
                    }),
                },
            };
            match &self.vars {
                Some(vars) => {
                    for (name, value) in vars {
                        take(name, Some(value))?;
                    }
                }
                None => {
                    for (name, value) in std::env::vars_os() {
                        match name.to_str() {
                            Some(name) => take(name, value.to_str())?,
                            // Not UTF-8: an error only inside the namespace.
                            None => {
                                let lossy = name.to_string_lossy();
                                if matches!(self.classify(&lossy), Name::Config(_)) {
                                    return Err(ConfigError::Env {
                                        var: lossy.into_owned(),
                                        reason: "its name is not UTF-8".to_owned(),
                                    });
                                }
                            }
                        }
                    }
                }
            }
            found.sort();
            Ok(found)
        }
    }

    /// Applies `overrides` (variable, path, value) to `table` (under `section`); returns
    /// each field's dotted path (with the section) and the variable that set it.
    fn apply(
        table: &mut toml::Table,
        section: Option<&str>,
        overrides: &[(String, String, String)],
    ) -> Result<Vec<(String, String)>, ConfigError> {
        let mut applied = Vec::new();
        for (var, path, value) in overrides {
            let env_error = |reason: String| ConfigError::Env {
                var: var.clone(),
                reason,
            };
            let parts: Vec<&str> = path.split("__").collect();
            if parts.iter().any(|part| part.is_empty()) {
                return Err(env_error(
                    "names no field: write its path with `__` before each part, as in \
                     PREFIX__LOCK__TTL for `lock.ttl`"
                        .to_owned(),
                ));
            }
            // The section is named exactly; the variable's parts match keys loosely.
            let mut keys: Vec<String> = section.map(str::to_owned).into_iter().collect();
            let mut at = &mut *table;
            if let Some(section) = section {
                at = descend(at, section, &keys, parts[0]).map_err(env_error)?;
            }
            let (field, parents) = parts.split_last().unwrap_or((&"", &[]));
            for (i, part) in parents.iter().enumerate() {
                let key = matching_key(at, part);
                keys.push(key.clone());
                at = descend(at, &key, &keys, parts[i + 1]).map_err(env_error)?;
            }
            let key = matching_key(at, field);
            if parents.len() == 1
                && keys.last().is_some_and(|parent| parent == "client")
                && STORE_FIELDS.contains(&key.as_str())
            {
                at.retain(|k, _| !STORE_FIELDS.contains(&k));
            }
            at.insert(key.clone(), env_value(value));
            keys.push(key);
            applied.push((keys.join("."), var.clone()));
        }
        Ok(applied)
    }

    /// The table at `key` of `table` (made if there is none), whose path is `keys`; an error
    /// if it is another value, which has no field `next`.
    fn descend<'t>(
        table: &'t mut toml::Table,
        key: &str,
        keys: &[String],
        next: &str,
    ) -> Result<&'t mut toml::Table, String> {
        let value = table
            .entry(key.to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        match value {
            toml::Value::Table(inner) => Ok(inner),
            _ => Err(format!(
                "`{}` is not a table, so it has no field `{}`",
                keys.join("."),
                next.to_ascii_lowercase()
            )),
        }
    }

    /// The key of `table` that `part` names: an existing one equal to it regardless of case
    /// and of `-` for `_`, or `part` in lower case.
    fn matching_key(table: &toml::Table, part: &str) -> String {
        let loose = |key: &str| key.to_ascii_lowercase().replace('-', "_");
        let wanted = loose(part);
        table
            .keys()
            .find(|key| loose(key) == wanted)
            .cloned()
            .unwrap_or_else(|| part.to_ascii_lowercase())
    }

    /// A variable's value: a TOML value when it is one, else text.
    fn env_value(text: &str) -> toml::Value {
        let parsed: Option<toml::Table> = toml::from_str(&format!("v = {text}")).ok();
        match parsed {
            Some(mut table) if table.len() == 1 => table
                .remove("v")
                .unwrap_or_else(|| toml::Value::String(text.to_owned())),
            _ => toml::Value::String(text.to_owned()),
        }
    }
}
