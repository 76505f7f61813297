//! The table of a lock's options that take one plain value: every front door that reads
//! options by name (a configuration file's `[lock]` table, `#[distributed_lock(...)]`) reads
//! them from [`LOCK_OPTIONS`], so an option added to the runtime's `LockOptions` and to this
//! table is read by each of them without code of its own.
//!
//! Options whose value is a small table (`replicas`, `retry_backoff`) are not in it: each
//! door that takes them reads them itself.

use std::time::Duration;

/// How an option's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OptionKind {
    /// `true` or `false`.
    Flag,
    /// A duration: `"30s"`, `"1m 30s"`, `"250ms"`.
    Duration,
    /// A duration, or `"forever"` ([`Duration::MAX`](std::time::Duration::MAX)).
    DurationOrForever,
    /// A whole number from 0 to `u32::MAX`.
    Count,
    /// A string.
    Text,
}

/// One lock option: its name (the runtime's setter's), how its value is written, and how
/// the attribute macro shows it in an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockOptionSpec {
    /// The option's name: the setter of `LockOptions` and `LockBuilder`, the field of a
    /// `[lock]` table, the argument of `#[distributed_lock]`.
    pub name: &'static str,
    /// How its value is written.
    pub kind: OptionKind,
    /// How the macro's argument is written, for its "needs a value" errors.
    pub example: &'static str,
}

/// A value of a lock option, as a front door that reads options by name has read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionValue {
    /// Of an [`OptionKind::Flag`] option.
    Flag(bool),
    /// Of an [`OptionKind::Duration`] or [`OptionKind::DurationOrForever`] option.
    Duration(Duration),
    /// Of an [`OptionKind::Count`] option.
    Count(u32),
    /// Of an [`OptionKind::Text`] option.
    Text(String),
}

const fn option(name: &'static str, kind: OptionKind, example: &'static str) -> LockOptionSpec {
    LockOptionSpec {
        name,
        kind,
        example,
    }
}

/// Every lock option that takes one plain value, in the order the documentation lists
/// them.
pub const LOCK_OPTIONS: &[LockOptionSpec] = {
    use OptionKind::{Count, Duration as D, DurationOrForever as Forever, Flag, Text};
    &[
        option("ttl", D, "`ttl = \"30s\"`"),
        option("wait", Forever, "`wait = \"5s\"`"),
        option("store_patience", D, "`store_patience = \"10s\"`"),
        option("watchdog", Flag, "`watchdog = true` or `watchdog = false`"),
        option("max_hold", D, "`max_hold = \"10m\"`"),
        option("min_hold", D, "`min_hold = \"800ms\"`"),
        option(
            "reentrant",
            Flag,
            "`reentrant = true` or `reentrant = false`",
        ),
        option("max_attempts", Count, "`max_attempts = 3`"),
        option("fenced", Flag, "`fenced = true` or `fenced = false`"),
        option("fair", Flag, "`fair = true` or `fair = false`"),
        option("identity", Text, "`identity = \"billing-worker\"`"),
    ]
};

/// The option named `name`, if the table has it.
#[must_use]
pub fn lock_option(name: &str) -> Option<&'static LockOptionSpec> {
    LOCK_OPTIONS.iter().find(|option| option.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_examples_name_their_option() {
        for (i, option) in LOCK_OPTIONS.iter().enumerate() {
            assert_eq!(
                lock_option(option.name),
                Some(option),
                "{} twice",
                option.name
            );
            assert!(
                option.example.starts_with(&format!("`{} = ", option.name)),
                "{option:?}"
            );
            assert!(LOCK_OPTIONS[..i].iter().all(|o| o.name != option.name));
        }
        assert_eq!(lock_option("tll"), None);
    }
}
