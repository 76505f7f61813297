//! [`ConfigError`]: why a configuration was not loaded, or a limiter not built from it.

use std::fmt;
use std::path::PathBuf;

use crate::error::RateLimitError;

/// What is wrong with a field, in a [`ConfigError::Field`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FieldErrorKind {
    /// A field the table does not have (a typo: `wiat` for `wait`).
    UnknownField,
    /// A field the table needs: a limiter's `policies`, Sentinel's `master`, the `client`
    /// table itself.
    MissingField,
    /// A field given twice in one table.
    DuplicateField,
    /// A value of the wrong type: a number where a duration's text goes, a table where a list
    /// goes.
    WrongType,
    /// Text that is not a duration (`"50"`, `"5 parsecs"`).
    InvalidDuration,
    /// Text or a table that is not a rate-limit policy.
    InvalidPolicy,
    /// A well-formed value that cannot be used: out of bounds (a ttl of 5 ms, a number too
    /// large for its field, a zero timeout), an empty list, or settings that contradict each
    /// other.
    InvalidValue,
    /// The client names no store: none of `url`, `cluster`, `sentinel`, `quorum` or
    /// `memory = true`.
    NoStore,
    /// The client names two stores (`url` and `cluster`, say).
    TwoStores,
}

/// Where a configuration value came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// A file, by its path as given.
    File(PathBuf),
    /// Text given to the loader.
    Text,
    /// An environment variable, by name.
    Env(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Text => f.write_str("configuration"),
            Self::Env(var) => write!(f, "environment variable {var}"),
        }
    }
}

/// A line and column in a file or text, both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// The line, from 1.
    pub line: usize,
    /// The column in characters, from 1.
    pub column: usize,
}

impl Location {
    /// The location of byte `offset` in `text`: for a format's own error about a file that
    /// holds distlock's settings beside others (a `toml::de::Error`'s `span()`), so that it
    /// can say where without quoting the text. Never panics (an offset past the end, or
    /// inside a character, counts up to the last boundary before it).
    #[must_use]
    pub fn of(text: &str, offset: usize) -> Self {
        let offset = offset.min(text.len());
        // A span may start inside a character in hostile input; count up to a boundary.
        let offset = (0..=offset)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        let before = &text[..offset];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Self {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    }
}

/// Why a configuration was not loaded ([`Config::from_toml_str`](super::Config::from_toml_str),
/// [`Config::from_file`](super::Config::from_file), [`ConfigLoader::load`](super::ConfigLoader::load)),
/// or a limiter not built from it ([`Config::limiter`](super::Config::limiter)). Every
/// mistake in a file is one of these, never a panic; its `Display` says where and what:
///
/// ```text
/// distlock.toml:7:1: unknown field `lock.wiat`, expected `ttl`, `wait`, ...
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The path, as given.
        path: PathBuf,
        /// What reading it returned.
        source: std::io::Error,
    },
    /// The text is not TOML (a missing quote, a key twice, an integer beyond 64 bits...).
    #[error("{origin}{}: not valid TOML: {message}", At(*location))]
    Syntax {
        /// The file or text.
        origin: Origin,
        /// Where, when known.
        location: Option<Location>,
        /// The parser's message.
        message: String,
    },
    /// A field is unknown, missing, given twice, of the wrong type, or a value that does not
    /// parse or cannot be used.
    #[error("{origin}{}: {message}", At(*location))]
    Field {
        /// What is wrong.
        kind: FieldErrorKind,
        /// The field's path (`lock.ttl`, `limiters.api.policies[1]`, `client.sentinel.master`),
        /// when known: a policy's own table reports its fields in the message only.
        field: Option<String>,
        /// The file, text or environment variable the value came from.
        origin: Origin,
        /// Where in the file or text, when known (not for values merged from the
        /// environment).
        location: Option<Location>,
        /// The whole message, with the field's path.
        message: String,
    },
    /// An environment variable in the loader's namespace that cannot be applied: it names no
    /// field (`DISTLOCK__`, `DISTLOCK__LOCK____TTL`), goes through a value that is not a
    /// table (`DISTLOCK__LOCK__TTL__X`), or is the old spelling of one, with one underscore
    /// after the prefix (`DISTLOCK_LOCK__TTL`).
    #[error("environment variable {var}: {reason}")]
    Env {
        /// The variable's name.
        var: String,
        /// What is wrong.
        reason: String,
    },
    /// [`Config::limiter`](super::Config::limiter) was asked for a limiter the configuration
    /// does not have.
    #[error("no limiter `{name}` in the configuration (it has {})", Names(known))]
    NoLimiter {
        /// The name asked for.
        name: String,
        /// The limiters it has.
        known: Vec<String>,
    },
    /// The builder refused a limiter: its store cannot count (a Redlock quorum).
    #[error("limiter `{name}`: {source}")]
    Limiter {
        /// The limiter's name.
        name: String,
        /// The builder's error.
        source: RateLimitError,
    },
}

impl ConfigError {
    /// The kind of a [`Field`](Self::Field) error; `None` for the others.
    #[must_use]
    pub fn field_kind(&self) -> Option<FieldErrorKind> {
        match self {
            Self::Field { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// The path of the field a [`Field`](Self::Field) error is about, when known.
    #[must_use]
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Field { field, .. } => field.as_deref(),
            _ => None,
        }
    }
}

/// `:line:column`, or nothing.
struct At(Option<Location>);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(Location { line, column }) => write!(f, ":{line}:{column}"),
            None => Ok(()),
        }
    }
}

/// `a`, `b` — or "none".
struct Names<'a>(&'a [String]);

impl fmt::Display for Names<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        for (i, name) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "`{name}`")?;
        }
        Ok(())
    }
}
