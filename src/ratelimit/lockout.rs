//! [`Lockout`]: once a subject breaches a policy it is blocked for a while, longer with each
//! breach it makes within a memory window (logins, one-time codes).

use std::fmt;
use std::time::Duration;

use super::MAX_PERIOD;
use super::rate::write_span;
use crate::error::InvalidPolicy;
pub use distlock_grammar::{MAX_LOCKOUT_STEPS, MIN_LOCKOUT};

#[cfg(feature = "serde")]
pub(crate) use self::serde_impl::LockoutSeed;

/// How long breaches are remembered when [`Lockout::remember_for`] is not called: a day.
pub const DEFAULT_LOCKOUT_MEMORY: Duration = Duration::from_secs(24 * 3600);

/// Blocks a subject once it exceeds a [`Policy`](super::Policy)'s limit, longer with every
/// breach it makes while the earlier ones are remembered: the standard recipe for logins and
/// one-time codes (1 minute, then 5, then an hour). Set on a policy with
/// [`Policy::with_lockout`](super::Policy::with_lockout), which checks it.
///
/// * A **breach** is a check of this policy that the policy denies while the subject is not
///   blocked ([`check`](super::RateLimiter::check), [`check_n`](super::RateLimiter::check_n),
///   the tower layer; a [`check_up_to`](super::RateLimiter::check_up_to) that grants nothing).
///   Peeks, refunds and penalties never breach.
/// * The breach blocks the subject for the step of its number: the first breach for
///   `steps[0]`, the second for `steps[1]`, ..., every one past the last step for the last.
///   The block starts at the breach, on the store's clock.
/// * While blocked, every check under the policy is denied without spending anything:
///   [`Decision::locked_out`](super::Decision::locked_out) is set, `remaining` is 0, and
///   `retry_after` is the block's end (or, if the policy itself would still deny the request
///   then, when it would pass: a client that waits `retry_after` is never breached for
///   obeying it).
/// * Breaches are remembered until the subject has gone the memory window past the end of
///   its latest block without breaching again; then the next breach is a first one again.
/// * [`reset`](super::RateLimiter::reset) forgets the block and the breaches.
///
/// The block and the count live in one key per subject and policy, in the slot of the
/// policy's own key, and are read and written by the same script call as the check: one
/// round trip, on one Redis, Sentinel, a Cluster and the in-memory store alike.
///
/// ```
/// use std::time::Duration;
/// use distlock::ratelimit::{Lockout, Policy, Rate};
///
/// # fn main() -> Result<(), distlock::InvalidPolicy> {
/// let minute = Duration::from_secs(60);
/// let login = Policy::fixed_window("login", Rate::per_minute(5)?)?.with_lockout(
///     Lockout::after_breach([minute, 5 * minute, 60 * minute]).remember_for(24 * 60 * minute),
/// )?;
/// assert_eq!(login.lockout().map(Lockout::steps), Some(&[minute, 5 * minute, 60 * minute][..]));
///
/// // Steps must grow: the second breach blocks for longer than the first.
/// let flat = Lockout::after_breach([minute, minute]);
/// assert!(Policy::gcra("otp", Rate::per_minute(3)?)?.with_lockout(flat).is_err());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lockout {
    steps: Vec<Duration>,
    memory: Duration,
}

impl Lockout {
    /// A lockout whose breaches block for `steps`: the first breach for the first step, the
    /// second for the second, and every later one for the last. Breaches are remembered for
    /// [`DEFAULT_LOCKOUT_MEMORY`] unless [`remember_for`](Self::remember_for) says otherwise.
    ///
    /// Checked when set on a policy ([`Policy::with_lockout`](super::Policy::with_lockout)):
    /// 1 to [`MAX_LOCKOUT_STEPS`] steps, each from [`MIN_LOCKOUT`] to
    /// [`MAX_PERIOD`](super::MAX_PERIOD), each longer than the one before.
    pub fn after_breach(steps: impl IntoIterator<Item = Duration>) -> Self {
        Self {
            steps: steps.into_iter().collect(),
            memory: DEFAULT_LOCKOUT_MEMORY,
        }
    }

    /// How long breaches are remembered: a subject that goes this long past the end of its
    /// latest block without breaching again starts over at the first step. From
    /// [`MIN_LOCKOUT`] to [`MAX_PERIOD`](super::MAX_PERIOD), checked with the steps.
    #[must_use]
    pub fn remember_for(mut self, memory: Duration) -> Self {
        self.memory = memory;
        self
    }

    /// The blocks' lengths, by breach.
    #[must_use]
    pub fn steps(&self) -> &[Duration] {
        &self.steps
    }

    /// How long breaches are remembered after the latest block ends.
    #[must_use]
    pub fn memory(&self) -> Duration {
        self.memory
    }

    /// Itself if usable; otherwise why not, for the policy named `policy`.
    pub(super) fn checked(self, policy: &str) -> Result<Self, InvalidPolicy> {
        if self.steps.is_empty() {
            return Err(InvalidPolicy::NoLockoutSteps {
                policy: policy.to_owned(),
            });
        }
        if self.steps.len() > MAX_LOCKOUT_STEPS {
            return Err(InvalidPolicy::TooManyLockoutSteps {
                policy: policy.to_owned(),
                count: self.steps.len(),
                max: MAX_LOCKOUT_STEPS,
            });
        }
        for (i, &length) in self.steps.iter().enumerate() {
            if distlock_grammar::check_lockout(length).is_err() {
                return Err(InvalidPolicy::LockoutStep {
                    policy: policy.to_owned(),
                    step: i + 1,
                    length,
                    min: MIN_LOCKOUT,
                    max: MAX_PERIOD,
                });
            }
            if let Some(&previous) = i.checked_sub(1).and_then(|j| self.steps.get(j))
                && length <= previous
            {
                return Err(InvalidPolicy::LockoutNotIncreasing {
                    policy: policy.to_owned(),
                    step: i + 1,
                    length,
                    previous,
                });
            }
        }
        if distlock_grammar::check_lockout(self.memory).is_err() {
            return Err(InvalidPolicy::LockoutMemory {
                policy: policy.to_owned(),
                memory: self.memory,
                min: MIN_LOCKOUT,
                max: MAX_PERIOD,
            });
        }
        Ok(self)
    }

    /// The steps and the memory in whole microseconds, as the stores count (a checked
    /// lockout's durations are at most [`MAX_PERIOD`], so they fit).
    pub(crate) fn micros(&self) -> (Vec<i64>, i64) {
        let us = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        (
            self.steps.iter().copied().map(us).collect(),
            us(self.memory),
        )
    }
}

impl fmt::Display for Lockout {
    /// `lockout 1min, 5min, 1h; remember 1d`, for logs (a policy's one-line text form has no
    /// lockout).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("lockout ")?;
        for (i, &step) in self.steps.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write_span(f, step)?;
        }
        f.write_str("; remember ")?;
        write_span(f, self.memory)
    }
}

#[cfg(feature = "serde")]
mod serde_impl {
    //! A lockout as a table: `{ steps = ["1m", "5m", "1h"], remember = "24h" }` (durations
    //! as duration text; `remember` optional). Errors name the field (`steps[1]`).

    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde::ser::{SerializeSeq, SerializeStruct};
    use serde::{Deserialize, Serialize, Serializer};

    use super::Lockout;

    /// A duration as text the duration grammar parses back, in the units of a rate (`"1min"`, `"1d"`).
    struct Span(Duration);

    impl Serialize for Span {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_str(&format_args!("{}", SpanText(self.0)))
        }
    }

    struct SpanText(Duration);

    impl fmt::Display for SpanText {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            super::write_span(f, self.0)
        }
    }

    struct Steps<'a>(&'a [Duration]);

    impl Serialize for Steps<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
            for &step in self.0 {
                seq.serialize_element(&Span(step))?;
            }
            seq.end()
        }
    }

    impl Serialize for Lockout {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut table = serializer.serialize_struct("Lockout", 2)?;
            table.serialize_field("steps", &Steps(&self.steps))?;
            table.serialize_field("remember", &Span(self.memory))?;
            table.end()
        }
    }

    /// The table; what is checked against the bounds is checked when it is set on a policy
    /// (whose `Deserialize` does that, naming the field `lockout`).
    impl<'de> Deserialize<'de> for Lockout {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            LockoutSeed { prefix: "" }.deserialize(deserializer)
        }
    }

    /// The table with every error naming its field after `prefix` (`"lockout."` in a
    /// policy's table).
    pub(crate) struct LockoutSeed {
        pub(crate) prefix: &'static str,
    }

    impl<'de> DeserializeSeed<'de> for LockoutSeed {
        type Value = Lockout;

        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Lockout, D::Error> {
            deserializer.deserialize_map(LockoutVisitor(self.prefix))
        }
    }

    const FIELDS: &[&str] = &["steps", "remember"];
    const DURATION: &str = "a duration such as \"90s\", \"5m\" or \"1h\"";

    struct LockoutVisitor(&'static str);

    impl<'de> Visitor<'de> for LockoutVisitor {
        type Value = Lockout;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(
                "a lockout: a table of `steps` (a list of durations, such as [\"1m\", \"5m\", \
                 \"1h\"]) and `remember` (optional, a duration such as \"24h\")",
            )
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Lockout, A::Error> {
            let mut steps: Option<Vec<Duration>> = None;
            let mut memory: Option<Duration> = None;
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "steps" if steps.is_some() => return Err(de::Error::duplicate_field("steps")),
                    "steps" => steps = Some(map.next_value_seed(StepsSeed(self.0))?),
                    "remember" if memory.is_some() => {
                        return Err(de::Error::duplicate_field("remember"));
                    }
                    "remember" => {
                        let field = format!("{}remember", self.0);
                        memory = Some(map.next_value_seed(SpanSeed(&field))?);
                    }
                    other => return Err(de::Error::unknown_field(other, FIELDS)),
                }
            }
            let steps = steps.ok_or_else(|| de::Error::missing_field("steps"))?;
            let lockout = Lockout::after_breach(steps);
            Ok(match memory {
                Some(memory) => lockout.remember_for(memory),
                None => lockout,
            })
        }
    }

    /// `steps`: a list of durations, each error naming its index (after the prefix).
    struct StepsSeed(&'static str);

    impl<'de> DeserializeSeed<'de> for StepsSeed {
        type Value = Vec<Duration>;

        fn deserialize<D: Deserializer<'de>>(
            self,
            deserializer: D,
        ) -> Result<Self::Value, D::Error> {
            deserializer.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for StepsSeed {
        type Value = Vec<Duration>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "field `{}steps`: a list of durations, one per breach, such as [\"1m\", \"5m\", \
                 \"1h\"]",
                self.0
            )
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Duration>, A::Error> {
            let mut steps = Vec::new();
            loop {
                if steps.len() > super::MAX_LOCKOUT_STEPS {
                    // Read no further into a hostile list.
                    return Err(de::Error::custom(format_args!(
                        "field `{}steps`: more than {} steps",
                        self.0,
                        super::MAX_LOCKOUT_STEPS
                    )));
                }
                let field = format!("{}steps[{}]", self.0, steps.len());
                match seq.next_element_seed(SpanSeed(&field))? {
                    Some(step) => steps.push(step),
                    None => return Ok(steps),
                }
            }
        }
    }

    /// One duration, as duration text (`distlock_grammar::parse_duration`), at the field named.
    struct SpanSeed<'a>(&'a str);

    impl<'de> DeserializeSeed<'de> for SpanSeed<'_> {
        type Value = Duration;

        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Duration, D::Error> {
            deserializer.deserialize_str(self)
        }
    }

    impl Visitor<'_> for SpanSeed<'_> {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "field `{}`: text, {DURATION}", self.0)
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
            distlock_grammar::parse_duration(text.trim()).map_err(|e| {
                E::custom(format_args!(
                    "field `{}`: invalid duration {text:?} ({e}); write {DURATION}",
                    self.0
                ))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn check(lockout: Lockout) -> Result<Lockout, InvalidPolicy> {
        lockout.checked("login")
    }

    #[test]
    fn steps_must_be_there_in_range_and_growing() {
        let ok = check(Lockout::after_breach([MIN, 5 * MIN, 60 * MIN])).expect("valid");
        assert_eq!(ok.memory(), DEFAULT_LOCKOUT_MEMORY);
        assert!(check(Lockout::after_breach([MIN_LOCKOUT])).is_ok());
        assert!(check(Lockout::after_breach([MAX_PERIOD]).remember_for(MAX_PERIOD)).is_ok());
        assert!(check(Lockout::after_breach((1..=8).map(|m| m * MIN))).is_ok());

        assert_eq!(
            check(Lockout::after_breach([])),
            Err(InvalidPolicy::NoLockoutSteps {
                policy: "login".into()
            })
        );
        assert!(matches!(
            check(Lockout::after_breach((1..=9).map(|m| m * MIN))),
            Err(InvalidPolicy::TooManyLockoutSteps {
                count: 9,
                max: 8,
                ..
            })
        ));
        assert!(matches!(
            check(Lockout::after_breach([MIN, Duration::ZERO])),
            Err(InvalidPolicy::LockoutStep { step: 2, .. })
        ));
        assert!(matches!(
            check(Lockout::after_breach([Duration::from_micros(999)])),
            Err(InvalidPolicy::LockoutStep { step: 1, .. })
        ));
        assert!(matches!(
            check(Lockout::after_breach([MAX_PERIOD + Duration::from_secs(1)])),
            Err(InvalidPolicy::LockoutStep { step: 1, .. })
        ));
        assert!(matches!(
            check(Lockout::after_breach([5 * MIN, 5 * MIN])),
            Err(InvalidPolicy::LockoutNotIncreasing { step: 2, .. })
        ));
        assert!(matches!(
            check(Lockout::after_breach([5 * MIN, MIN])),
            Err(InvalidPolicy::LockoutNotIncreasing { step: 2, .. })
        ));
        assert!(matches!(
            check(Lockout::after_breach([MIN]).remember_for(Duration::ZERO)),
            Err(InvalidPolicy::LockoutMemory { .. })
        ));
        assert!(matches!(
            check(Lockout::after_breach([MIN]).remember_for(MAX_PERIOD * 2)),
            Err(InvalidPolicy::LockoutMemory { .. })
        ));
    }

    #[test]
    fn messages_say_what_is_wrong() {
        let message = |lockout: Lockout| check(lockout).expect_err("invalid").to_string();
        assert_eq!(
            message(Lockout::after_breach([5 * MIN, MIN])),
            "invalid lockout of policy `login`: step 2 (60s) must be longer than step 1 (300s)"
        );
        assert_eq!(
            message(Lockout::after_breach([])),
            "invalid lockout of policy `login`: it needs at least one step (the first block's \
             length)"
        );
        assert!(
            message(Lockout::after_breach([Duration::ZERO]))
                .contains("step 1 lasts 0ns; use 1ms..=31622400s")
        );
    }

    #[test]
    fn prints_for_logs() {
        let lockout = Lockout::after_breach([MIN, 90 * MIN, 24 * 60 * MIN])
            .remember_for(Duration::from_secs(7 * 24 * 3600));
        assert_eq!(lockout.to_string(), "lockout 1min, 90min, 1d; remember 7d");
    }
}
