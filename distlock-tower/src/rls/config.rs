//! The rate-limit service's configuration: envoyproxy/ratelimit's YAML (one domain per file,
//! nested descriptors), read and checked into a lookup tree of limits, each with the
//! distlock policies that count it.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use distlock::ratelimit::{Algorithm, Lockout, Policy, Rate};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

/// A configuration mistake: which file, where in it, and what is wrong. Reported when the
/// files are read (at start, and at every reload, where the configuration in use is kept).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {at}{reason}", at = at.as_ref().map_or(String::new(), |a| format!("{a}: ")))]
#[non_exhaustive]
pub struct RlsConfigError {
    /// The file (or the name given to text read directly).
    pub file: String,
    /// Where in it: the YAML parser's line and column, or the descriptor's path
    /// (`domain.key_value.key`).
    pub at: Option<String>,
    /// What is wrong.
    pub reason: String,
}

impl RlsConfigError {
    fn new(file: &str, at: Option<String>, reason: impl Into<String>) -> Self {
        Self {
            file: file.to_owned(),
            at,
            reason: reason.into(),
        }
    }
}

/// The unit of a `rate_limit`, as envoyproxy/ratelimit reads it (case-insensitive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Unit {
    /// 1 s.
    Second,
    /// 60 s.
    Minute,
    /// 3,600 s.
    Hour,
    /// 86,400 s.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    fn parse(text: &str) -> Option<Self> {
        Some(match text.to_ascii_lowercase().as_str() {
            "second" => Self::Second,
            "minute" => Self::Minute,
            "hour" => Self::Hour,
            "day" => Self::Day,
            "week" => Self::Week,
            "month" => Self::Month,
            "year" => Self::Year,
            _ => return None,
        })
    }

    /// The unit's length (a month is 30 days, a year 365, as envoyproxy/ratelimit counts).
    #[must_use]
    pub fn period(self) -> Duration {
        let secs = match self {
            Self::Second => 1,
            Self::Minute => 60,
            Self::Hour => 3_600,
            Self::Day => 86_400,
            Self::Week => 7 * 86_400,
            Self::Month => 30 * 86_400,
            Self::Year => 365 * 86_400,
        };
        Duration::from_secs(secs)
    }

    /// The protobuf enum's value (`RateLimitResponse.RateLimit.Unit`).
    pub(crate) fn proto(self) -> i32 {
        match self {
            Self::Second => 1,
            Self::Minute => 2,
            Self::Hour => 3,
            Self::Day => 4,
            Self::Month => 5,
            Self::Year => 6,
            Self::Week => 7,
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Second => "second",
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::Day => "day",
            Self::Week => "week",
            Self::Month => "month",
            Self::Year => "year",
        })
    }
}

/// What a matched descriptor is held to.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Bound {
    /// `unlimited: true`: always `OK`, nothing counted.
    Unlimited,
    /// `requests_per_unit: 0`: always `OVER_LIMIT`, nothing counted (as envoyproxy/ratelimit
    /// answers it).
    Nothing,
    /// Counted by these policies (the first is the `rate_limit`'s own; more come from the
    /// `distlock` extension's `extra_limits`), all of which must allow (or any one, with
    /// `any_of`).
    Policies {
        /// The policies, the `rate_limit`'s first.
        policies: Vec<Policy>,
        /// Whether any one policy may let a request through.
        any_of: bool,
    },
}

/// One configured limit: a descriptor node's `rate_limit`, with its options.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Limit {
    /// The descriptor's full key, `domain.key_value.key...`, as envoyproxy/ratelimit names
    /// it in its stats.
    pub full_key: String,
    /// The `rate_limit`'s `name`, if it has one (what `replaces` refers to).
    pub name: Option<String>,
    /// The names of the limits this one replaces when both apply to one request.
    pub replaces: Vec<String>,
    /// `requests_per_unit` and `unit` as written (for `current_limit` in responses); `None`
    /// for an unlimited descriptor.
    pub rate: Option<(u32, Unit)>,
    /// What it is held to.
    pub bound: Bound,
    /// `shadow_mode`: counted, but never `OVER_LIMIT`.
    pub shadow: bool,
    /// `detailed_metric`: a key-only descriptor's stats carry the request's value.
    pub detailed_metric: bool,
    /// The `distlock` extension's `hidden`: left out of the response headers.
    pub hidden: bool,
}

/// A descriptor level: its children by `key_value` or `key`, the keys ending in `*`
/// (prefix matches), and its own limit.
#[derive(Debug, Default)]
pub(crate) struct Node {
    children: HashMap<String, Node>,
    wildcards: Vec<String>,
    limit: Option<Arc<Limit>>,
}

/// One descriptor entry of a request.
pub(crate) struct Entry<'a> {
    pub(crate) key: &'a str,
    pub(crate) value: &'a str,
}

impl Node {
    /// The limit a request's descriptor gets (envoyproxy/ratelimit's `GetLimit`): walk the
    /// entries level by level, preferring `key_value`, then a `key_value*` prefix, then the
    /// bare `key`; the limit is that of the node the last entry reaches, if the walk gets
    /// that far.
    pub(crate) fn limit_for(&self, entries: &[Entry<'_>]) -> Option<Arc<Limit>> {
        let mut level = self;
        let mut found = None;
        for (i, entry) in entries.iter().enumerate() {
            let exact = format!("{}_{}", entry.key, entry.value);
            let next = level
                .children
                .get(&exact)
                .or_else(|| {
                    level
                        .wildcards
                        .iter()
                        .find(|w| exact.starts_with(w.trim_end_matches('*')))
                        .and_then(|w| level.children.get(w))
                })
                .or_else(|| level.children.get(entry.key));
            let Some(next) = next else {
                break;
            };
            if i == entries.len() - 1 {
                found.clone_from(&next.limit);
            }
            if next.children.is_empty() {
                break;
            }
            level = next;
        }
        found
    }

    /// Every limit under this node.
    pub(crate) fn limits(&self) -> Vec<Arc<Limit>> {
        let mut out: Vec<Arc<Limit>> = self.limit.iter().cloned().collect();
        let mut keys: Vec<&String> = self.children.keys().collect();
        keys.sort();
        for key in keys {
            out.extend(self.children[key].limits());
        }
        out
    }
}

/// The service's configuration: the domains of every file read.
#[derive(Debug, Default)]
pub struct RlsConfig {
    pub(crate) domains: HashMap<String, Node>,
    /// The files it was read from, in order.
    pub(crate) sources: Vec<String>,
}

impl RlsConfig {
    /// Reads every `*.yaml` and `*.yml` file of `dir` (in name order), each one domain, as
    /// envoyproxy/ratelimit reads its `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config`.
    ///
    /// # Errors
    /// The first [`RlsConfigError`]: a file that cannot be read, a YAML error (with line and
    /// column), an unknown key, an empty or repeated domain or key, a bad unit, a rate
    /// distlock cannot count, an extension out of range.
    pub fn from_dir(dir: &Path) -> Result<Self, RlsConfigError> {
        let shown = dir.display().to_string();
        let entries = std::fs::read_dir(dir)
            .map_err(|e| RlsConfigError::new(&shown, None, format!("cannot list: {e}")))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.is_file()
                    && p.extension().is_some_and(|x| {
                        x.eq_ignore_ascii_case("yaml") || x.eq_ignore_ascii_case("yml")
                    })
            })
            .collect();
        files.sort();
        let mut texts = Vec::with_capacity(files.len());
        for file in files {
            let name = file.display().to_string();
            let text = std::fs::read_to_string(&file)
                .map_err(|e| RlsConfigError::new(&name, None, format!("cannot read: {e}")))?;
            texts.push((name, text));
        }
        Self::from_texts(texts)
    }

    /// Reads configuration texts, each `(name, YAML)` one domain; `name` is what errors call
    /// it.
    ///
    /// # Errors
    /// As [`from_dir`](Self::from_dir).
    pub fn from_texts<N, T>(texts: impl IntoIterator<Item = (N, T)>) -> Result<Self, RlsConfigError>
    where
        N: AsRef<str>,
        T: AsRef<str>,
    {
        let mut config = Self::default();
        for (name, text) in texts {
            let name = name.as_ref();
            let root: YamlRoot = serde_norway::from_str(text.as_ref()).map_err(|e| {
                let at = e
                    .location()
                    .map(|l| format!("line {}, column {}", l.line(), l.column()));
                RlsConfigError::new(name, at, e.to_string())
            })?;
            if root.domain.is_empty() {
                return Err(RlsConfigError::new(name, None, "the domain is empty"));
            }
            if config.domains.contains_key(&root.domain) {
                return Err(RlsConfigError::new(
                    name,
                    None,
                    format!("domain {:?} is configured twice", root.domain),
                ));
            }
            let mut node = Node::default();
            load(name, &root.domain, &root.descriptors, &mut node)?;
            config.domains.insert(root.domain, node);
            config.sources.push(name.to_owned());
        }
        Ok(config)
    }

    /// The domains configured.
    #[must_use]
    pub fn domains(&self) -> Vec<&str> {
        let mut domains: Vec<&str> = self.domains.keys().map(String::as_str).collect();
        domains.sort_unstable();
        domains
    }

    /// Every configured limit, by domain then key.
    #[must_use]
    pub fn limits(&self) -> Vec<Arc<Limit>> {
        let mut domains: Vec<&String> = self.domains.keys().collect();
        domains.sort();
        domains
            .into_iter()
            .flat_map(|d| self.domains[d].limits())
            .collect()
    }

    /// The limit a descriptor of `domain` gets (`(key, value)` entries), if any.
    #[must_use]
    pub fn limit_for(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Arc<Limit>> {
        let entries: Vec<Entry<'_>> = entries
            .iter()
            .map(|(key, value)| Entry { key, value })
            .collect();
        self.domains.get(domain)?.limit_for(&entries)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRoot {
    domain: String,
    #[serde(default)]
    descriptors: Vec<YamlDescriptor>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlDescriptor {
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    rate_limit: Option<YamlRateLimit>,
    #[serde(default)]
    descriptors: Vec<YamlDescriptor>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    /// distlock's own settings, under a name of their own.
    #[serde(default)]
    distlock: Option<YamlExtension>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRateLimit {
    #[serde(default)]
    requests_per_unit: u32,
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    replaces: Vec<YamlReplaces>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlReplaces {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlExtension {
    #[serde(default)]
    algorithm: Option<String>,
    #[serde(default)]
    burst: Option<u32>,
    #[serde(default)]
    lockout: Vec<String>,
    #[serde(default)]
    extra_limits: Vec<YamlExtraLimit>,
    #[serde(default)]
    any_of: bool,
    #[serde(default)]
    hidden: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlExtraLimit {
    unit: String,
    requests_per_unit: u32,
    #[serde(default)]
    burst: Option<u32>,
}

/// Loads `descriptors` into `node`, whose full key is `parent`.
fn load(
    file: &str,
    parent: &str,
    descriptors: &[YamlDescriptor],
    node: &mut Node,
) -> Result<(), RlsConfigError> {
    for d in descriptors {
        if d.key.is_empty() {
            return Err(RlsConfigError::new(
                file,
                Some(parent.to_owned()),
                "a descriptor has an empty key",
            ));
        }
        let final_key = match d.value.as_deref() {
            Some(value) if !value.is_empty() => format!("{}_{value}", d.key),
            _ => d.key.clone(),
        };
        let full_key = format!("{parent}.{final_key}");
        if node.children.contains_key(&final_key) {
            return Err(RlsConfigError::new(
                file,
                Some(full_key),
                "this descriptor is configured twice",
            ));
        }
        let err = |reason: String| RlsConfigError::new(file, Some(full_key.clone()), reason);
        let limit = match &d.rate_limit {
            None => {
                if d.distlock.is_some() {
                    return Err(err("`distlock` settings need a `rate_limit`".to_owned()));
                }
                None
            }
            Some(rate_limit) => Some(Arc::new(limit(d, rate_limit, &full_key).map_err(err)?)),
        };
        let mut child = Node {
            limit,
            ..Node::default()
        };
        load(file, &full_key, &d.descriptors, &mut child)?;
        if final_key.ends_with('*') {
            node.wildcards.push(final_key.clone());
        }
        node.children.insert(final_key, child);
    }
    Ok(())
}

/// The limit of descriptor `d`, whose full key is `full_key`.
fn limit(d: &YamlDescriptor, rl: &YamlRateLimit, full_key: &str) -> Result<Limit, String> {
    let unit = match rl.unit.as_deref() {
        None | Some("") => None,
        Some(text) => Some(Unit::parse(text).ok_or_else(|| {
            format!(
                "invalid rate limit unit {text:?}: second, minute, hour, day, week, month or year"
            )
        })?),
    };
    for replaced in &rl.replaces {
        if replaced.name.is_empty() {
            return Err("a `replaces` entry has an empty name".to_owned());
        }
        if rl.name.as_deref() == Some(replaced.name.as_str()) {
            return Err("a limit cannot replace itself".to_owned());
        }
    }
    let ext = d.distlock.as_ref();
    let base = |bound, rate| Limit {
        full_key: full_key.to_owned(),
        name: rl.name.clone().filter(|n| !n.is_empty()),
        replaces: rl.replaces.iter().map(|r| r.name.clone()).collect(),
        rate,
        bound,
        shadow: d.shadow_mode,
        detailed_metric: d.detailed_metric,
        hidden: ext.is_some_and(|e| e.hidden),
    };
    if rl.unlimited {
        if unit.is_some() {
            return Err("an unlimited rate limit takes no unit".to_owned());
        }
        return Ok(base(Bound::Unlimited, None));
    }
    let unit = unit.ok_or_else(|| "a rate limit needs a unit (or `unlimited: true`)".to_owned())?;
    if rl.requests_per_unit == 0 {
        if ext.is_some_and(|e| !e.extra_limits.is_empty()) {
            return Err("`extra_limits` on a limit of 0 requests".to_owned());
        }
        return Ok(base(Bound::Nothing, Some((0, unit))));
    }
    let algorithm = match ext.and_then(|e| e.algorithm.as_deref()) {
        // envoyproxy/ratelimit counts in fixed windows aligned to the epoch: so does the
        // default here, so a config moves over with the same answers.
        None | Some("fixed_window") => Algorithm::FixedWindow,
        Some("gcra") => Algorithm::Gcra,
        Some("token_bucket") => Algorithm::TokenBucket,
        Some("sliding_window") => Algorithm::SlidingWindow,
        Some("sliding_log") => Algorithm::SlidingLog,
        Some(other) => {
            return Err(format!(
                "unknown algorithm {other:?}: fixed_window, gcra, token_bucket, sliding_window or \
                 sliding_log"
            ));
        }
    };
    let name = policy_name(full_key);
    let rate = |count: u32, unit: Unit, burst: Option<u32>| {
        let rate = Rate::per(count, unit.period()).map_err(|e| e.to_string())?;
        match burst {
            Some(burst) => rate.burst(burst).map_err(|e| e.to_string()),
            None => Ok(rate),
        }
    };
    let mut first = Policy::new(
        name.clone(),
        algorithm,
        rate(rl.requests_per_unit, unit, ext.and_then(|e| e.burst))?,
    )
    .map_err(|e| e.to_string())?;
    if let Some(ext) = ext
        && !ext.lockout.is_empty()
    {
        let steps = ext
            .lockout
            .iter()
            .map(|s| {
                distlock_grammar::parse_duration(s).map_err(|e| format!("lockout step {s:?}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        first = first
            .with_lockout(Lockout::after_breach(steps))
            .map_err(|e| e.to_string())?;
    }
    let mut policies = vec![first];
    if let Some(ext) = ext {
        for (i, extra) in ext.extra_limits.iter().enumerate() {
            let unit = Unit::parse(&extra.unit)
                .ok_or_else(|| format!("extra limit {i}: invalid unit {:?}", extra.unit))?;
            let policy = Policy::new(
                format!("{}.{}", truncate(&name, 60), i + 1),
                algorithm,
                rate(extra.requests_per_unit, unit, extra.burst)
                    .map_err(|e| format!("extra limit {i}: {e}"))?,
            )
            .map_err(|e| format!("extra limit {i}: {e}"))?;
            policies.push(policy);
        }
    }
    let any_of = ext.is_some_and(|e| e.any_of);
    if any_of && policies.len() < 2 {
        return Err("`any_of` needs `extra_limits`".to_owned());
    }
    Ok(base(
        Bound::Policies { policies, any_of },
        Some((rl.requests_per_unit, unit)),
    ))
}

/// The policy name of the limit at `full_key`: the key itself when it is a valid policy name
/// (1 to 64 of `A-Z a-z 0-9 . _ -`), else `rls-` and 32 hex digits of its SHA-256. The name is
/// where the limit's counts live, so it stays the same across reloads.
pub(crate) fn policy_name(full_key: &str) -> String {
    let valid = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    if full_key.len() <= 60 && full_key.bytes().all(valid) {
        return full_key.to_owned();
    }
    let digest = Sha256::digest(full_key.as_bytes());
    let mut name = String::from("rls-");
    for b in &digest[..16] {
        use std::fmt::Write as _;
        let _ = write!(name, "{b:02x}");
    }
    name
}

fn truncate(text: &str, max: usize) -> &str {
    &text[..text.len().min(max)]
}

/// `key_value.key_value...`, as envoyproxy/ratelimit keys a descriptor.
pub(crate) fn descriptor_key(descriptor: &RateLimitDescriptor) -> String {
    let mut key = String::new();
    for entry in &descriptor.entries {
        if !key.is_empty() {
            key.push('.');
        }
        key.push_str(&entry.key);
        if !entry.value.is_empty() {
            key.push('_');
            key.push_str(&entry.value);
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: SECOND
      requests_per_unit: 500
    shadow_mode: true
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 10
    descriptors:
      - key: path
        value: /foo
        rate_limit:
          unit: hour
          requests_per_unit: 3
  - key: path
    value: /api/*
    rate_limit:
      unit: second
      requests_per_unit: 7
  - key: generic_key
    value: free
    rate_limit:
      unlimited: true
  - key: generic_key
    value: closed
    rate_limit:
      unit: second
      requests_per_unit: 0
"#;

    fn config() -> RlsConfig {
        RlsConfig::from_texts([("example.yaml", EXAMPLE)]).expect("valid")
    }

    fn found(config: &RlsConfig, entries: &[(&str, &str)]) -> Option<String> {
        config
            .limit_for("mongo_cps", entries)
            .map(|l| l.full_key.clone())
    }

    #[test]
    fn descriptors_match_as_envoyproxy_ratelimit_matches_them() {
        let c = config();
        assert_eq!(
            found(&c, &[("database", "users")]).as_deref(),
            Some("mongo_cps.database_users")
        );
        assert_eq!(
            found(&c, &[("database", "other")]),
            None,
            "no key-only entry"
        );
        // A key-only entry takes any value; a deeper level needs the whole descriptor.
        assert_eq!(
            found(&c, &[("remote_address", "10.0.0.1")]).as_deref(),
            Some("mongo_cps.remote_address")
        );
        assert_eq!(
            found(&c, &[("remote_address", "10.0.0.1"), ("path", "/foo")]).as_deref(),
            Some("mongo_cps.remote_address.path_/foo")
        );
        assert_eq!(
            found(&c, &[("remote_address", "10.0.0.1"), ("path", "/bar")]),
            None
        );
        // More entries than the config is deep: no limit.
        assert_eq!(
            found(&c, &[("database", "users"), ("x", "y")]),
            None,
            "deeper than the config"
        );
        // A value ending in `*` matches by prefix.
        assert_eq!(
            found(&c, &[("path", "/api/v1/orders")]).as_deref(),
            Some("mongo_cps.path_/api/*")
        );
        assert!(c.limit_for("other", &[("database", "users")]).is_none());
        let shadow = c
            .limit_for("mongo_cps", &[("database", "default")])
            .expect("limit");
        assert!(shadow.shadow);
        assert!(matches!(
            c.limit_for("mongo_cps", &[("generic_key", "free")])
                .expect("limit")
                .bound,
            Bound::Unlimited
        ));
        assert!(matches!(
            c.limit_for("mongo_cps", &[("generic_key", "closed")])
                .expect("limit")
                .bound,
            Bound::Nothing
        ));
        assert_eq!(c.limits().len(), 7);
    }

    #[test]
    fn mistakes_are_typed_errors_with_where() {
        let cases: &[(&str, &str)] = &[
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
                "invalid rate limit unit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second, requests_per_unit: 1}\n",
                "unknown field",
            ),
            ("domain: ''\n", "the domain is empty"),
            ("domain: d\ndescriptors:\n  - key: ''\n", "empty key"),
            (
                "domain: d\ndescriptors:\n  - key: k\n  - key: k\n",
                "configured twice",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
                "takes no unit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 3}\n",
                "needs a unit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n",
                "replace itself",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n    distlock: {algorithm: leaky}\n",
                "unknown algorithm",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n    distlock: {algorithm: fixed_window, burst: 9}\n",
                "burst",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n    distlock: {lockout: [soon]}\n",
                "lockout step",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    distlock: {hidden: true}\n",
                "need a `rate_limit`",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n    distlock: {any_of: true}\n",
                "needs `extra_limits`",
            ),
            ("domain: [\n", "line"),
        ];
        for (text, expected) in cases {
            let err = RlsConfig::from_texts([("bad.yaml", *text)]).expect_err(text);
            let shown = err.to_string();
            assert!(shown.starts_with("bad.yaml: "), "{shown}");
            assert!(shown.contains(expected), "{text:?}: {shown}");
        }
        let twice = RlsConfig::from_texts([("a.yaml", "domain: d\n"), ("b.yaml", "domain: d\n")])
            .expect_err("two files, one domain");
        assert_eq!(twice.file, "b.yaml");
    }

    #[test]
    fn extensions_make_distlock_policies() {
        let text = r#"
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 10}
    distlock:
      algorithm: gcra
      burst: 20
      lockout: ["1m", "10m"]
      extra_limits: [{unit: hour, requests_per_unit: 1000}]
      hidden: true
"#;
        let c = RlsConfig::from_texts([("api.yaml", text)]).expect("valid");
        let limit = c.limit_for("api", &[("api_key", "k1")]).expect("limit");
        assert!(limit.hidden);
        let Bound::Policies { policies, any_of } = &limit.bound else {
            panic!("{limit:?}");
        };
        assert!(!any_of);
        assert_eq!(policies.len(), 2);
        assert_eq!(policies[0].algorithm(), Algorithm::Gcra);
        assert_eq!(policies[0].rate().capacity(), 20);
        assert!(policies[0].lockout().is_some());
        assert_eq!(policies[0].name(), "api.api_key");
        assert_eq!(policies[1].name(), "api.api_key.1");
        assert_eq!(policy_name("d.path_/api/*").len(), 36);
    }
}
