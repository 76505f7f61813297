//! [`Policy`]: a named [`Rate`] enforced by one [`Algorithm`], and its text and `serde` forms
//! for configuration.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

pub use distlock_grammar::{MAX_LOG_LIMIT, MAX_POLICY_NAME_LEN};
use distlock_grammar::{Problem, check_policy, parse_policy};

use super::rate::{RateProblem, refused};
use super::{Lockout, Rate};
use crate::error::InvalidPolicy;
use crate::store::{LockoutParams, PolicyParams, ScriptAlgorithm};

/// How a [`Policy`] counts. All five run as one atomic script with one round trip on Redis,
/// read time from the server, and give every key a ttl.
///
/// The *boundary bound* is the most requests that can pass in any span of length `d`
/// (`L` = limit or burst, `P` = period, `T` = emission interval):
///
/// | algorithm | state per subject | any span `d ≤ P` lets through at most |
/// |---|---|---|
/// | [`Gcra`](Self::Gcra) | one integer (the TAT) | `burst + ⌊d / T⌋` |
/// | [`TokenBucket`](Self::TokenBucket) | two integers | `burst + ⌊d / T⌋` |
/// | [`FixedWindow`](Self::FixedWindow) | two integers | `2L` (`L` at the end of one window, `L` at the start of the next) |
/// | [`SlidingWindow`](Self::SlidingWindow) | three integers | `L + ⌊L·d / P⌋` |
/// | [`SlidingLog`](Self::SlidingLog) | one entry per request in the window (≤ `L`) | `L` (exact) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// The generic cell rate algorithm (leaky bucket as a meter), as redis-cell's
    /// `CL.THROTTLE`: one key holding the theoretical arrival time. The default.
    #[default]
    Gcra,
    /// A token bucket of `burst` tokens refilled one every emission interval. Same bounds as
    /// GCRA; state is the token count and the last refill time.
    TokenBucket,
    /// `count` per window of `period`, windows aligned to the Unix epoch. Cheap and easy to
    /// explain, but lets `2 × count` through around a window boundary.
    FixedWindow,
    /// The sliding window counter: this window's count plus the previous window's count
    /// weighted by how much of it still overlaps the sliding window (rounded up). An O(1)
    /// approximation of the sliding log.
    SlidingWindow,
    /// Exact: a sorted set of the allowed requests of the last `period` (rejected requests
    /// are never stored), at most `count` ≤ [`MAX_LOG_LIMIT`] entries per subject.
    SlidingLog,
}

impl Algorithm {
    /// A short lowercase name (`"gcra"`, `"token bucket"`, ...), for logs and messages.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Gcra => "gcra",
            Self::TokenBucket => "token bucket",
            Self::FixedWindow => "fixed window",
            Self::SlidingWindow => "sliding window",
            Self::SlidingLog => "sliding log",
        }
    }

    /// The algorithm's part of a key.
    pub(crate) fn key_part(self) -> &'static str {
        match self {
            Self::Gcra => "gcra",
            Self::TokenBucket => "tb",
            Self::FixedWindow => "fw",
            Self::SlidingWindow => "sw",
            Self::SlidingLog => "sl",
        }
    }

    /// Whether `burst` means anything to this algorithm (it does for GCRA and the token
    /// bucket; window algorithms allow `count` per window).
    fn has_burst(self) -> bool {
        distlock_grammar::Algorithm::from(self).has_burst()
    }

    /// The name in configuration: [`name`](Self::name) with `-` for spaces
    /// (`"token-bucket"`). [`FromStr`] also takes `_` or spaces and ignores case.
    fn config_name(self) -> &'static str {
        distlock_grammar::Algorithm::from(self).config_name()
    }

    #[cfg(test)]
    const ALL: [Self; 5] = [
        Self::Gcra,
        Self::TokenBucket,
        Self::FixedWindow,
        Self::SlidingWindow,
        Self::SlidingLog,
    ];
}

impl FromStr for Algorithm {
    type Err = ParsePolicyError;

    /// `gcra`, `token-bucket`, `fixed-window`, `sliding-window` or `sliding-log`; `_` or a
    /// space may stand for `-`, and case does not matter (`"Token bucket"`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        distlock_grammar::Algorithm::from_name(text)
            .map(Self::from)
            .ok_or_else(|| ParsePolicyError {
                input: text.to_owned(),
                problem: PolicyProblem::Algorithm(text.trim().to_owned()),
            })
    }
}

/// The two enums name the same algorithms: the grammar's is what text and the macros name.
impl From<distlock_grammar::Algorithm> for Algorithm {
    fn from(algorithm: distlock_grammar::Algorithm) -> Self {
        use distlock_grammar::Algorithm as Text;
        match algorithm {
            Text::Gcra => Self::Gcra,
            Text::TokenBucket => Self::TokenBucket,
            Text::FixedWindow => Self::FixedWindow,
            Text::SlidingWindow => Self::SlidingWindow,
            Text::SlidingLog => Self::SlidingLog,
        }
    }
}

impl From<Algorithm> for distlock_grammar::Algorithm {
    fn from(algorithm: Algorithm) -> Self {
        match algorithm {
            Algorithm::Gcra => Self::Gcra,
            Algorithm::TokenBucket => Self::TokenBucket,
            Algorithm::FixedWindow => Self::FixedWindow,
            Algorithm::SlidingWindow => Self::SlidingWindow,
            Algorithm::SlidingLog => Self::SlidingLog,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A named rate enforced by one algorithm. Its name is part of the keys and of the
/// `RateLimit-Policy` HTTP field, so two policies with different limits must have different
/// names (changing a policy's rate under the same name reuses the old state, which is what
/// you want for a deploy that raises a limit).
///
/// ```
/// use distlock::ratelimit::{Algorithm, Policy, Rate};
///
/// # fn main() -> Result<(), distlock::InvalidPolicy> {
/// let api = Policy::gcra("api", Rate::per_second(100)?.burst(20)?)?;
/// assert_eq!(api.limit(), 20);
///
/// let hourly = Policy::fixed_window("api-hourly", Rate::per_hour(1000)?)?;
/// assert_eq!(hourly.algorithm(), Algorithm::FixedWindow);
///
/// // A window allows `count` per window: a different burst is refused, not ignored.
/// assert!(Policy::fixed_window("w", Rate::per_second(10)?.burst(3)?).is_err());
/// # Ok(()) }
/// ```
///
/// # From configuration
///
/// A policy parses from one line of text ([`FromStr`]) and prints as one
/// ([`Display`](fmt::Display)): its name, a colon, the algorithm (GCRA when left out) and the
/// [rate's text form](Rate#text-form):
///
/// ```text
/// policy    = name ":" [algorithm] rate      "api: 100/s burst 20", "uploads: sliding-log 5/min"
/// algorithm = "gcra" | "token-bucket" | "fixed-window" | "sliding-window" | "sliding-log"
/// ```
///
/// (`_` or a space may stand for `-` in the algorithm, and case does not matter.) Errors are a
/// [`ParsePolicyError`] that says which part was wrong.
///
/// With the `serde` feature a policy deserialises from either form: the one line above, or a
/// table with the fields `name`, `algorithm` (optional, `"gcra"` by default), `rate` (its
/// text form) and `lockout` (optional, only in the table: see [`Lockout`], e.g.
/// `lockout = { steps = ["1m", "5m", "1h"], remember = "24h" }`, `remember` optional); it
/// serialises as the table, and an [`Algorithm`] as its name. Errors name the
/// part or the field that is wrong, as in
/// ``field `rate`: invalid rate "100/x": unknown unit `x`; use ms, s, min, h or d``. (Telling
/// the two forms apart needs a self-describing format: TOML, JSON, YAML.)
///
/// ```
/// use distlock::ratelimit::{Algorithm, Policy, Rate};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api: Policy = "api: 100/s burst 20".parse()?;
/// assert_eq!(api, Policy::gcra("api", Rate::per_second(100)?.burst(20)?)?);
/// assert_eq!(api.to_string(), "api: gcra 100/s burst 20");
///
/// let hourly: Policy = "hourly: fixed-window 1000/h".parse()?;
/// assert_eq!(hourly.algorithm(), Algorithm::FixedWindow);
///
/// let err = "api: 100/s burst".parse::<Policy>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "invalid rate \"100/s burst\" in policy \"api: 100/s burst\": `burst` needs a number \
///      after it (`burst 20`)"
/// );
/// # #[cfg(feature = "serde")] {
/// // With the `serde` feature, e.g. from TOML:
/// use std::collections::HashMap;
/// let config: HashMap<String, Vec<Policy>> = toml::from_str(
///     r#"
///     [[limits]]
///     name = "api"
///     rate = "100/s burst 20"
///
///     [[limits]]
///     name = "uploads"
///     algorithm = "sliding-log"
///     rate = "10 per 5min"
///     "#,
/// )?;
/// assert_eq!(config["limits"][0], api);
/// assert_eq!(config["limits"][1].algorithm(), Algorithm::SlidingLog);
///
/// // The one-line form, in a list or as a value.
/// let config: HashMap<String, Vec<Policy>> =
///     toml::from_str(r#"limits = ["api: 100/s burst 20", "uploads: sliding-log 10 per 5min"]"#)?;
/// assert_eq!(config["limits"][0], api);
/// assert_eq!(config["limits"][1].algorithm(), Algorithm::SlidingLog);
///
/// let err = toml::from_str::<Policy>("name = \"api\"\nrate = \"100/x\"").unwrap_err();
/// assert!(err.to_string().contains("field `rate`: invalid rate \"100/x\": unknown unit `x`"));
/// # }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Policy {
    name: Arc<str>,
    algorithm: Algorithm,
    rate: Rate,
    lockout: Option<Arc<Lockout>>,
}

impl Policy {
    /// A policy with any algorithm. Fails if the name is not 1 to 64 characters of
    /// `A-Z a-z 0-9 . _ -`, if a window algorithm is given a burst different from its count,
    /// or if a sliding log's count exceeds [`MAX_LOG_LIMIT`].
    pub fn new(
        name: impl Into<String>,
        algorithm: Algorithm,
        rate: Rate,
    ) -> Result<Self, InvalidPolicy> {
        let name = name.into();
        check_policy(&name, algorithm.into(), rate.text()).map_err(refused)?;
        Ok(Self {
            name: name.into(),
            algorithm,
            rate,
            lockout: None,
        })
    }

    /// This policy, blocking a subject that breaches it as `lockout` says (see [`Lockout`]):
    /// any algorithm. Fails if the lockout has no steps or more than
    /// [`MAX_LOCKOUT_STEPS`](super::MAX_LOCKOUT_STEPS), a step or the memory window outside
    /// [`MIN_LOCKOUT`](super::MIN_LOCKOUT)`..=`[`MAX_PERIOD`](super::MAX_PERIOD), or a step not
    /// longer than the one before.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use distlock::ratelimit::{Lockout, Policy, Rate};
    ///
    /// let minute = Duration::from_secs(60);
    /// let otp = Policy::fixed_window("otp", Rate::per_minute(3)?)?
    ///     .with_lockout(Lockout::after_breach([minute, 10 * minute]))?;
    /// let client = distlock::Client::in_memory();
    /// let limiter = client.rate_limiter(otp).build()?;
    /// for _ in 0..3 {
    ///     assert!(limiter.check("user:7").await?.allowed);
    /// }
    /// let breach = limiter.check("user:7").await?; // the 4th code within the minute
    /// assert!(!breach.allowed && breach.locked_out);
    /// assert_eq!(breach.retry_after, minute); // blocked for the first step
    /// # Ok(()) }
    /// ```
    pub fn with_lockout(mut self, lockout: Lockout) -> Result<Self, InvalidPolicy> {
        self.lockout = Some(Arc::new(lockout.checked(&self.name)?));
        Ok(self)
    }

    /// The lockout, if the policy has one.
    #[must_use]
    pub fn lockout(&self) -> Option<&Lockout> {
        self.lockout.as_deref()
    }

    /// The same policy (name, algorithm, lockout) at another rate, for a subject's own rate.
    pub(crate) fn with_rate(&self, rate: Rate) -> Result<Self, InvalidPolicy> {
        let mut policy = Self::new(self.name(), self.algorithm, rate)?;
        policy.lockout.clone_from(&self.lockout);
        Ok(policy)
    }

    /// A [GCRA](Algorithm::Gcra) policy (the default algorithm).
    pub fn gcra(name: impl Into<String>, rate: Rate) -> Result<Self, InvalidPolicy> {
        Self::new(name, Algorithm::Gcra, rate)
    }

    /// A [token bucket](Algorithm::TokenBucket) policy.
    pub fn token_bucket(name: impl Into<String>, rate: Rate) -> Result<Self, InvalidPolicy> {
        Self::new(name, Algorithm::TokenBucket, rate)
    }

    /// A [fixed window](Algorithm::FixedWindow) policy: `rate.count()` per `rate.period()`.
    pub fn fixed_window(name: impl Into<String>, rate: Rate) -> Result<Self, InvalidPolicy> {
        Self::new(name, Algorithm::FixedWindow, rate)
    }

    /// A [sliding window counter](Algorithm::SlidingWindow) policy.
    pub fn sliding_window(name: impl Into<String>, rate: Rate) -> Result<Self, InvalidPolicy> {
        Self::new(name, Algorithm::SlidingWindow, rate)
    }

    /// A [sliding log](Algorithm::SlidingLog) policy.
    pub fn sliding_log(name: impl Into<String>, rate: Rate) -> Result<Self, InvalidPolicy> {
        Self::new(name, Algorithm::SlidingLog, rate)
    }

    /// The policy's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// The algorithm.
    #[must_use]
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The rate.
    #[must_use]
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// How many requests (cost units) may go at once: the burst for GCRA and the token
    /// bucket, the count for window algorithms. A single request costing more than this is
    /// refused with [`RateLimitError::CostTooLarge`](crate::RateLimitError::CostTooLarge).
    #[must_use]
    pub fn limit(&self) -> u32 {
        self.rate.capacity()
    }

    /// The time in which [`limit`](Self::limit) requests become available again from empty:
    /// the period for window algorithms, burst × emission interval for GCRA and the token
    /// bucket. This is the `w` of the `RateLimit-Policy` HTTP field.
    #[must_use]
    pub fn window(&self) -> Duration {
        if self.algorithm.has_burst() {
            self.rate.emission_interval() * self.rate.capacity()
        } else {
            self.rate.period()
        }
    }

    /// The policy as the stores see it.
    pub(crate) fn params(&self) -> PolicyParams {
        let (unit, count) = if self.algorithm.has_burst() {
            (self.rate.interval_us(), self.rate.capacity())
        } else {
            (self.rate.period_us(), self.rate.count())
        };
        PolicyParams {
            kind: match self.algorithm {
                Algorithm::Gcra => ScriptAlgorithm::Gcra,
                Algorithm::TokenBucket => ScriptAlgorithm::TokenBucket,
                Algorithm::FixedWindow => ScriptAlgorithm::FixedWindow,
                Algorithm::SlidingWindow => ScriptAlgorithm::SlidingWindow,
                Algorithm::SlidingLog => ScriptAlgorithm::SlidingLog,
            },
            // Both fit: the unit is at most MAX_PERIOD in µs (< 2^45), the count a u32.
            unit_us: i64::try_from(unit).unwrap_or(i64::MAX),
            count: i64::from(count),
            // A sliding log is kept for its window unless the limiter says longer.
            keep_us: 0,
            lockout: self.lockout.as_deref().map(|lockout| {
                let (steps, memory_us) = lockout.micros();
                LockoutParams::new(&steps, memory_us)
            }),
        }
    }
}

/// `name` if it is 1 to 64 characters of `A-Z a-z 0-9 . _ -` (it goes into keys and HTTP
/// headers): a name read on its own, from a configuration table.
#[cfg(feature = "serde")]
fn checked_name(name: String) -> Result<String, InvalidPolicy> {
    distlock_grammar::check_policy_name(&name).map_err(refused)?;
    Ok(name)
}

impl fmt::Display for Policy {
    /// `name: algorithm rate`, e.g. `api: gcra 100/s burst 20`: text that [`FromStr`] parses
    /// back to an equal policy. A lockout has no place in that line: a policy with one adds
    /// it in brackets, for logs (`login: fixed-window 5/min [lockout 1min, 5min; remember
    /// 1d]`), which [`FromStr`] refuses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} {}",
            self.name,
            self.algorithm.config_name(),
            self.rate
        )?;
        if let Some(lockout) = &self.lockout {
            write!(f, " [{lockout}]")?;
        }
        Ok(())
    }
}

impl FromStr for Policy {
    type Err = ParsePolicyError;

    /// Parses `name: [algorithm] rate`, e.g. `"api: 100/s burst 20"` or
    /// `"hourly: fixed-window 1000/h"`; see [From configuration](Policy#from-configuration).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |problem| ParsePolicyError {
            input: text.to_owned(),
            problem,
        };
        let policy = parse_policy(text).map_err(|err| {
            fail(match (err.problem, err.rate) {
                (Problem::NoName, _) => PolicyProblem::NoName,
                (Problem::Algorithm(found), _) => PolicyProblem::Algorithm(found),
                (Problem::Refused(refusal), _) => PolicyProblem::Invalid(refused(refusal)),
                (problem, rate) => PolicyProblem::Rate {
                    rate: rate.map_or("", |rate| &text[rate]).to_owned(),
                    problem: RateProblem::from(problem),
                },
            })
        })?;
        // Checked by the grammar as the constructors check it, so this cannot fail.
        Self::new(
            policy.name,
            policy.algorithm.into(),
            Rate::from_text(policy.rate),
        )
        .map_err(|e| fail(PolicyProblem::Invalid(e)))
    }
}

/// Why a text is not a [`Policy`] or an [`Algorithm`]: which part was wrong, and what was
/// expected there.
///
/// A text that is well formed but names a policy that cannot work (a bad name, a burst for a
/// window algorithm, a zero count) carries the [`InvalidPolicy`] the constructors give;
/// [`invalid_policy`](Self::invalid_policy) returns it. The message includes it, so
/// [`source`](std::error::Error::source) is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsePolicyError {
    input: String,
    problem: PolicyProblem,
}

impl ParsePolicyError {
    /// The text that was parsed.
    #[must_use]
    pub fn input(&self) -> &str {
        &self.input
    }

    /// The constructor's refusal, when the text was well formed but the policy or its rate
    /// is invalid.
    #[must_use]
    pub fn invalid_policy(&self) -> Option<&InvalidPolicy> {
        match &self.problem {
            PolicyProblem::Invalid(invalid)
            | PolicyProblem::Rate {
                problem: RateProblem::Invalid(invalid),
                ..
            } => Some(invalid),
            _ => None,
        }
    }
}

impl fmt::Display for ParsePolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let input = &self.input;
        match &self.problem {
            PolicyProblem::NoName => write!(
                f,
                "invalid policy {input:?}: no name; write `<name>: [<algorithm>] <rate>`, \
                 e.g. \"api: 100/s burst 20\" or \"uploads: sliding-log 5/min\""
            ),
            PolicyProblem::Algorithm(found) => {
                write!(f, "unknown algorithm {found:?}")?;
                if input.trim() != found {
                    write!(f, " in policy {input:?}")?;
                }
                f.write_str("; use gcra, token-bucket, fixed-window, sliding-window or sliding-log")
            }
            PolicyProblem::Rate {
                problem: RateProblem::Invalid(invalid),
                ..
            }
            | PolicyProblem::Invalid(invalid) => write!(f, "{invalid} (from {input:?})"),
            PolicyProblem::Rate { rate, problem } => {
                write!(f, "invalid rate {rate:?} in policy {input:?}: {problem}")
            }
        }
    }
}

impl std::error::Error for ParsePolicyError {}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PolicyProblem {
    /// No `name:` in front.
    NoName,
    /// Not one of the algorithms' names.
    Algorithm(String),
    /// The rate part is not a rate.
    Rate { rate: String, problem: RateProblem },
    /// Well formed, refused by [`Policy::new`] or [`Rate`]'s constructors.
    Invalid(InvalidPolicy),
}

#[cfg(feature = "serde")]
mod serde_impl {
    //! `Algorithm` as its configuration name; `Policy` as a struct of `name`, `algorithm`
    //! (optional) and `rate` (text). Each field is checked as it is read, so an error names
    //! the field and formats that track positions (TOML, JSON) point at its value.

    use std::fmt;
    use std::marker::PhantomData;
    use std::str::FromStr;

    use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde::ser::SerializeStruct;
    use serde::{Deserialize, Serialize, Serializer};

    use super::{Algorithm, Lockout, Policy, Rate, checked_name};
    use crate::error::InvalidPolicy;
    use crate::ratelimit::lockout::LockoutSeed;
    use crate::ratelimit::text::deserialize_parsed;

    impl Serialize for Algorithm {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_str(self.config_name())
        }
    }

    impl<'de> Deserialize<'de> for Algorithm {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserialize_parsed(deserializer, ALGORITHM.looks_like)
        }
    }

    impl Serialize for Policy {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let fields = if self.lockout.is_some() { 4 } else { 3 };
            let mut policy = serializer.serialize_struct("Policy", fields)?;
            policy.serialize_field("name", self.name())?;
            policy.serialize_field("algorithm", &self.algorithm)?;
            policy.serialize_field("rate", &self.rate)?;
            match &self.lockout {
                Some(lockout) => policy.serialize_field("lockout", &**lockout)?,
                None => policy.skip_field("lockout")?,
            }
            policy.end()
        }
    }

    /// Either form: the one line (`"api: 100/s burst 20"`, through [`FromStr`]) or the
    /// table. Telling them apart needs a self-describing format (TOML, JSON, YAML...).
    impl<'de> Deserialize<'de> for Policy {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_any(PolicyVisitor)
        }
    }

    const FIELDS: &[&str] = &["name", "algorithm", "rate", "lockout"];

    /// A field's name and what its text looks like, for messages.
    #[derive(Clone, Copy)]
    struct Field {
        name: &'static str,
        looks_like: &'static str,
    }

    const NAME: Field = Field {
        name: "name",
        looks_like: "1 to 64 of A-Z a-z 0-9 . _ -, such as \"api\"",
    };
    const ALGORITHM: Field = Field {
        name: "algorithm",
        looks_like: "\"gcra\", \"token-bucket\", \"fixed-window\", \"sliding-window\" or \
                     \"sliding-log\"",
    };
    const RATE: Field = Field {
        name: "rate",
        looks_like: "a rate such as \"100/s burst 20\" or \"10 per 2s\"",
    };
    const LOCKOUT: Field = Field {
        name: "lockout",
        looks_like: "a table such as { steps = [\"1m\", \"5m\", \"1h\"], remember = \"24h\" }",
    };

    /// A policy's name, checked on its own.
    struct Name(String);

    impl FromStr for Name {
        type Err = InvalidPolicy;

        fn from_str(text: &str) -> Result<Self, InvalidPolicy> {
            checked_name(text.to_owned()).map(Name)
        }
    }

    /// Reads one field's text and parses it: a value of the wrong type, or text that does
    /// not parse, is refused with the field's name.
    struct Parsed<T>(Field, PhantomData<T>);

    fn parsed<T>(field: Field) -> Parsed<T> {
        Parsed(field, PhantomData)
    }

    impl<'de, T> DeserializeSeed<'de> for Parsed<T>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        type Value = T;

        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
            deserializer.deserialize_str(self)
        }
    }

    impl<T> Visitor<'_> for Parsed<T>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let Field { name, looks_like } = self.0;
            write!(f, "field `{name}`: text, {looks_like}")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
            text.parse()
                .map_err(|e| E::custom(format_args!("field `{}`: {e}", self.0.name)))
        }
    }

    /// Which of the fields a key names.
    enum Key {
        Name,
        Algorithm,
        Rate,
        Lockout,
    }

    impl<'de> Deserialize<'de> for Key {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_identifier(KeyVisitor)
        }
    }

    struct KeyVisitor;

    impl Visitor<'_> for KeyVisitor {
        type Value = Key;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("`name`, `algorithm`, `rate` or `lockout`")
        }

        fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
            match key {
                "name" => Ok(Key::Name),
                "algorithm" => Ok(Key::Algorithm),
                "rate" => Ok(Key::Rate),
                "lockout" => Ok(Key::Lockout),
                _ => Err(E::unknown_field(key, FIELDS)),
            }
        }
    }

    struct PolicyVisitor;

    impl<'de> Visitor<'de> for PolicyVisitor {
        type Value = Policy;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(
                "a rate-limit policy: one line such as \"api: 100/s burst 20\", or a table of \
                 `name`, `algorithm` (optional), `rate` and `lockout` (optional)",
            )
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Policy, E> {
            text.parse().map_err(E::custom)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Policy, A::Error> {
            let mut name: Option<Name> = None;
            let mut algorithm: Option<Algorithm> = None;
            let mut rate: Option<Rate> = None;
            let mut lockout: Option<Lockout> = None;
            while let Some(key) = map.next_key()? {
                let repeated = match key {
                    Key::Lockout => lockout
                        .replace(map.next_value_seed(LockoutSeed { prefix: "lockout." })?)
                        .map(|_| LOCKOUT),
                    Key::Name => name
                        .replace(map.next_value_seed(parsed(NAME))?)
                        .map(|_| NAME),
                    Key::Algorithm => algorithm
                        .replace(map.next_value_seed(parsed(ALGORITHM))?)
                        .map(|_| ALGORITHM),
                    Key::Rate => rate
                        .replace(map.next_value_seed(parsed(RATE))?)
                        .map(|_| RATE),
                };
                if let Some(field) = repeated {
                    return Err(de::Error::duplicate_field(field.name));
                }
            }
            let name = name.ok_or_else(|| de::Error::missing_field(NAME.name))?;
            let rate = rate.ok_or_else(|| de::Error::missing_field(RATE.name))?;
            with_lockout(build(name, algorithm.unwrap_or_default(), rate)?, lockout)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Policy, A::Error> {
            let name = seq
                .next_element_seed(parsed(NAME))?
                .ok_or_else(|| de::Error::invalid_length(0, &self))?;
            let algorithm = seq
                .next_element_seed(parsed(ALGORITHM))?
                .ok_or_else(|| de::Error::invalid_length(1, &self))?;
            let rate = seq
                .next_element_seed(parsed(RATE))?
                .ok_or_else(|| de::Error::invalid_length(2, &self))?;
            let lockout = seq.next_element_seed(LockoutSeed { prefix: "lockout." })?;
            with_lockout(build(name, algorithm, rate)?, lockout)
        }
    }

    /// `policy` with `lockout`, if there is one, checked.
    fn with_lockout<E: de::Error>(policy: Policy, lockout: Option<Lockout>) -> Result<Policy, E> {
        match lockout {
            None => Ok(policy),
            Some(lockout) => policy
                .with_lockout(lockout)
                .map_err(|e| E::custom(format_args!("field `{}`: {e}", LOCKOUT.name))),
        }
    }

    /// The policy of checked fields; what is left to refuse involves two of them.
    fn build<E: de::Error>(name: Name, algorithm: Algorithm, rate: Rate) -> Result<Policy, E> {
        Policy::new(name.0, algorithm, rate)
            .map_err(|e| E::custom(format_args!("fields `algorithm` and `rate`: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        let rate = Rate::per_second(1).expect("valid");
        assert!(Policy::gcra("api.v1_read-x", rate).is_ok());
        for bad in ["", "a b", "a:b", "{x}", "é", &"x".repeat(65)] {
            assert!(
                matches!(Policy::gcra(bad, rate), Err(InvalidPolicy::Name { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn windows_refuse_a_burst_and_logs_are_capped() {
        let rate = Rate::per_second(10).expect("valid");
        assert!(Policy::sliding_window("w", rate.burst(10).expect("valid")).is_ok());
        assert!(matches!(
            Policy::sliding_window("w", rate.burst(11).expect("valid")),
            Err(InvalidPolicy::BurstNotSupported { .. })
        ));
        assert!(Policy::sliding_log("l", Rate::per_second(10_000).expect("valid")).is_ok());
        assert!(matches!(
            Policy::sliding_log("l", Rate::per_second(10_001).expect("valid")),
            Err(InvalidPolicy::LogTooLarge { .. })
        ));
    }

    #[test]
    fn window_is_the_time_to_refill_the_limit() {
        let p = Policy::gcra(
            "g",
            Rate::per_second(100)
                .and_then(|r| r.burst(20))
                .expect("valid"),
        )
        .expect("valid");
        assert_eq!(p.window(), Duration::from_millis(200));
        let w = Policy::fixed_window("w", Rate::per_minute(10).expect("valid")).expect("valid");
        assert_eq!(w.window(), Duration::from_secs(60));
    }

    fn parse(text: &str) -> Policy {
        text.parse()
            .unwrap_or_else(|e| panic!("{text:?} should parse: {e}"))
    }

    fn parse_err(text: &str) -> ParsePolicyError {
        match text.parse::<Policy>() {
            Ok(policy) => panic!("{text:?} should not parse, got {policy:?}"),
            Err(e) => {
                assert_eq!(e.input(), text);
                e
            }
        }
    }

    fn policy(name: &str, algorithm: Algorithm, rate: &str) -> Policy {
        Policy::new(name, algorithm, rate.parse().expect("valid rate")).expect("valid policy")
    }

    #[test]
    fn parses_name_algorithm_and_rate() {
        assert_eq!(
            parse("api: 100/s burst 20"),
            policy("api", Algorithm::Gcra, "100/s burst 20")
        );
        assert_eq!(
            parse("uploads: sliding-log 5/min"),
            policy("uploads", Algorithm::SlidingLog, "5/min")
        );
        for text in [
            "hourly: fixed-window 1000/h",
            "hourly:fixed_window 1000/h",
            "hourly : Fixed Window 1000 per 1 hour",
            " hourly:FIXED-WINDOW 1000/h ",
        ] {
            assert_eq!(
                parse(text),
                policy("hourly", Algorithm::FixedWindow, "1000/h"),
                "{text:?}"
            );
        }
        assert_eq!(
            parse("b: token bucket 10/s burst 3").algorithm(),
            Algorithm::TokenBucket
        );
        assert_eq!(
            parse("w: sliding-window 10/s").algorithm(),
            Algorithm::SlidingWindow
        );
        assert_eq!(parse("g: gcra 1/s").algorithm(), Algorithm::Gcra);
    }

    #[test]
    fn prints_text_that_parses_back() {
        for algorithm in Algorithm::ALL {
            let p = policy("p.1_x-y", algorithm, "10 per 2s");
            assert_eq!(parse(&p.to_string()), p, "{p}");
            assert_eq!(
                p.to_string().parse::<Policy>().map(|p| p.algorithm()),
                Ok(algorithm)
            );
        }
        let api = policy("api", Algorithm::Gcra, "100/s burst 20");
        assert_eq!(api.to_string(), "api: gcra 100/s burst 20");
        let log = policy("uploads", Algorithm::SlidingLog, "5/min");
        assert_eq!(log.to_string(), "uploads: sliding-log 5/min");
    }

    #[test]
    fn algorithm_names() {
        for algorithm in Algorithm::ALL {
            assert_eq!(algorithm.config_name().parse(), Ok(algorithm));
            assert_eq!(algorithm.name().parse(), Ok(algorithm));
        }
        let err = "leaky bucket".parse::<Algorithm>().expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "unknown algorithm \"leaky bucket\"; use gcra, token-bucket, fixed-window, \
             sliding-window or sliding-log"
        );
        assert!("token--bucket".parse::<Algorithm>().is_ok());
        assert!("tokenbucket".parse::<Algorithm>().is_err());
        assert!("".parse::<Algorithm>().is_err());
    }

    #[test]
    fn says_which_part_is_wrong() {
        let cases = [
            (
                "100/s",
                "invalid policy \"100/s\": no name; write `<name>: [<algorithm>] <rate>`",
            ),
            (
                "api: leaky 10/s",
                "unknown algorithm \"leaky\" in policy \"api: leaky 10/s\"; use gcra",
            ),
            (
                "api: 100/x",
                "invalid rate \"100/x\" in policy \"api: 100/x\": unknown unit `x`",
            ),
            ("api:", "invalid rate \"\" in policy \"api:\": it is empty"),
            (
                "api: gcra",
                "invalid rate \"\" in policy \"api: gcra\": it is empty",
            ),
            (
                "a b: 10/s",
                "invalid policy name \"a b\": use 1 to 64 characters",
            ),
            (": 10/s", "invalid policy name \"\""),
            ("api:v2: 10/s", "invalid policy name \"api:v2\""),
            ("api: v2 10/s", "unknown algorithm \"v2\""),
        ];
        for (text, expected) in cases {
            let message = parse_err(text).to_string();
            assert!(message.contains(expected), "{text:?}: {message}");
        }
    }

    #[test]
    fn refuses_well_formed_policies_that_cannot_work() {
        let err = parse_err("w: fixed-window 10/s burst 3");
        assert!(matches!(
            err.invalid_policy(),
            Some(InvalidPolicy::BurstNotSupported { .. })
        ));
        assert!(
            err.to_string()
                .ends_with("(from \"w: fixed-window 10/s burst 3\")")
        );
        let err = parse_err("l: sliding-log 10001/s");
        assert!(matches!(
            err.invalid_policy(),
            Some(InvalidPolicy::LogTooLarge { .. })
        ));
        let err = parse_err("api: 0/s");
        assert_eq!(
            err.invalid_policy(),
            Some(&InvalidPolicy::Zero { what: "count" })
        );
        assert_eq!(
            err.to_string(),
            "invalid rate: the count must be at least 1 (from \"api: 0/s\")"
        );
        assert_eq!(parse_err("api: 1/x").invalid_policy(), None);
    }

    #[cfg(feature = "serde")]
    mod serde {
        use super::*;

        fn from_json(json: &str) -> Result<Policy, String> {
            serde_json::from_str(json).map_err(|e| e.to_string())
        }

        fn json_err(json: &str) -> String {
            match from_json(json) {
                Ok(policy) => panic!("{json} should not deserialise, got {policy:?}"),
                Err(message) => message,
            }
        }

        #[test]
        fn round_trips_through_json_and_toml() {
            for algorithm in Algorithm::ALL {
                let p = policy("api", algorithm, "10 per 2s");
                let json = serde_json::to_string(&p).expect("serialise");
                assert_eq!(from_json(&json), Ok(p.clone()), "{json}");
                let toml = toml::to_string(&p).expect("serialise");
                assert_eq!(toml::from_str::<Policy>(&toml).expect("round trip"), p);
            }
            let api = policy("api", Algorithm::Gcra, "100/s burst 20");
            assert_eq!(
                serde_json::to_string(&api).expect("serialise"),
                r#"{"name":"api","algorithm":"gcra","rate":"100/s burst 20"}"#
            );
            assert_eq!(
                serde_json::to_string(&Algorithm::TokenBucket).expect("serialise"),
                r#""token-bucket""#
            );
            // The algorithm is optional, and formats without field names use the order.
            assert_eq!(
                from_json(r#"{"rate":"100/s burst 20","name":"api"}"#),
                Ok(api.clone())
            );
            assert_eq!(
                from_json(r#"["api","gcra","100/s burst 20"]"#),
                Ok(api.clone())
            );
        }

        #[test]
        fn a_lockout_round_trips_as_a_table() {
            let minute = Duration::from_secs(60);
            let login = policy("login", Algorithm::FixedWindow, "5/min")
                .with_lockout(
                    Lockout::after_breach([minute, 5 * minute, 60 * minute])
                        .remember_for(Duration::from_secs(7 * 86_400)),
                )
                .expect("valid lockout");
            let json = serde_json::to_string(&login).expect("serialise");
            assert_eq!(
                json,
                r#"{"name":"login","algorithm":"fixed-window","rate":"5/min","lockout":{"steps":["1min","5min","1h"],"remember":"7d"}}"#
            );
            assert_eq!(from_json(&json), Ok(login.clone()));
            let toml = toml::to_string(&login).expect("serialise");
            assert_eq!(toml::from_str::<Policy>(&toml).expect("round trip"), login);
            // A policy without one has no `lockout` field.
            let plain = policy("api", Algorithm::Gcra, "10/s");
            assert!(
                !serde_json::to_string(&plain)
                    .expect("serialise")
                    .contains("lockout")
            );
            // The sequence form takes it fourth.
            assert_eq!(
                from_json(
                    r#"["login","fixed-window","5/min",{"steps":["1m","5m","1h"],"remember":"7d"}]"#
                ),
                Ok(login)
            );
            let err = json_err(r#"{"name":"l","rate":"1/s","lockout":{"steps":["1m","1m"]}}"#);
            assert!(
                err.contains("field `lockout`: invalid lockout of policy `l`: step 2 (60s)"),
                "{err}"
            );
        }

        #[test]
        fn the_one_line_form_deserialises_too() {
            let api = policy("api", Algorithm::Gcra, "100/s burst 20");
            assert_eq!(from_json(r#""api: 100/s burst 20""#), Ok(api.clone()));
            assert_eq!(
                from_json(r#""hourly: fixed-window 1000/h""#),
                Ok(policy("hourly", Algorithm::FixedWindow, "1000/h"))
            );
            let config: std::collections::HashMap<String, Vec<Policy>> = toml::from_str(
                "limits = [\"api: 100/s burst 20\", { name = \"up\", rate = \"5/min\" }]",
            )
            .expect("both forms in one list");
            assert_eq!(config["limits"][0], api);
            assert_eq!(config["limits"][1], policy("up", Algorithm::Gcra, "5/min"));
            // A line that does not parse says which part is wrong; a number is no policy.
            let err = json_err(r#""api: 100/s burst""#);
            assert!(err.contains("`burst` needs a number"), "{err}");
            let err = json_err("42");
            assert!(err.contains("one line such as"), "{err}");
        }

        #[test]
        fn errors_name_the_field() {
            let cases = [
                (
                    r#"{"name":"api","rate":"100/x"}"#,
                    "field `rate`: invalid rate \"100/x\": unknown unit `x`",
                ),
                (
                    r#"{"name":"api","rate":"0/s"}"#,
                    "field `rate`: invalid rate: the count must be at least 1",
                ),
                (
                    r#"{"name":"api","rate":100}"#,
                    "invalid type: integer `100`, expected field `rate`: text, a rate such as",
                ),
                (
                    r#"{"name":"a b","rate":"1/s"}"#,
                    "field `name`: invalid policy name \"a b\"",
                ),
                (
                    r#"{"name":7,"rate":"1/s"}"#,
                    "invalid type: integer `7`, expected field `name`: text",
                ),
                (
                    r#"{"name":"api","algorithm":"leaky","rate":"1/s"}"#,
                    "field `algorithm`: unknown algorithm \"leaky\"",
                ),
                (
                    r#"{"name":"w","algorithm":"fixed-window","rate":"10/s burst 3"}"#,
                    "fields `algorithm` and `rate`: invalid policy `w`",
                ),
                (r#"{"name":"api"}"#, "missing field `rate`"),
                (r#"{"rate":"1/s"}"#, "missing field `name`"),
                (
                    r#"{"name":"api","rate":"1/s","burst":3}"#,
                    "unknown field `burst`, expected one of `name`, `algorithm`, `rate`",
                ),
                (
                    r#"{"name":"api","rate":"1/s","rate":"2/s"}"#,
                    "duplicate field `rate`",
                ),
                (r#"["api","gcra"]"#, "invalid length 2"),
            ];
            for (json, expected) in cases {
                let message = json_err(json);
                assert!(message.contains(expected), "{json}: {message}");
            }
        }

        #[test]
        fn toml_errors_point_at_the_line() {
            let err = toml::from_str::<Policy>("name = \"api\"\nrate = \"100/x\"\n")
                .expect_err("bad unit")
                .to_string();
            assert!(
                err.contains("field `rate`: invalid rate \"100/x\""),
                "{err}"
            );
            assert!(err.contains("line 2"), "{err}");
        }
    }
}
