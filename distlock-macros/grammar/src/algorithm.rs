//! The rate-limit algorithms by name, and the form a name from a small set is compared in.

/// How a policy counts, by the name of distlock's `Algorithm` variant. (Not
/// `#[non_exhaustive]`: distlock and distlock-macros pin this crate's exact version, and match
/// on every algorithm.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// The generic cell rate algorithm (the default).
    #[default]
    Gcra,
    /// A token bucket.
    TokenBucket,
    /// Fixed windows.
    FixedWindow,
    /// The sliding window counter.
    SlidingWindow,
    /// The exact sliding log.
    SlidingLog,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Self; 5] = [
        Self::Gcra,
        Self::TokenBucket,
        Self::FixedWindow,
        Self::SlidingWindow,
        Self::SlidingLog,
    ];

    /// The name in configuration: `"gcra"`, `"token-bucket"`, ...
    #[must_use]
    pub fn config_name(self) -> &'static str {
        match self {
            Self::Gcra => "gcra",
            Self::TokenBucket => "token-bucket",
            Self::FixedWindow => "fixed-window",
            Self::SlidingWindow => "sliding-window",
            Self::SlidingLog => "sliding-log",
        }
    }

    /// Whether a burst means anything to it (it does for GCRA and the token bucket; window
    /// algorithms allow `count` per window).
    #[must_use]
    pub fn has_burst(self) -> bool {
        matches!(self, Self::Gcra | Self::TokenBucket)
    }

    /// The algorithm named `text`: its [config name](Self::config_name), with `_` or white
    /// space for `-` (any number of them) and in any case (`"Token bucket"`).
    #[must_use]
    pub fn from_name(text: &str) -> Option<Self> {
        let wanted = kebab(text);
        Self::ALL.into_iter().find(|a| a.config_name() == wanted)
    }
}

/// `text`'s words (split at white space, `-` and `_`) joined by `-`, in lower case: the form a
/// name from a small set is compared in (`"Token bucket"` is `token-bucket`).
#[must_use]
pub fn kebab(text: &str) -> String {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == '-' || c == '_')
        .filter(|word| !word.is_empty())
        .collect();
    words.join("-").to_ascii_lowercase()
}
