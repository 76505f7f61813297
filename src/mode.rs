//! [`HierarchyMode`]: the four modes of a hierarchical lock and their compatibility matrix.
//! Below both the store (whose scripts take the modes) and the lock module (whose builder
//! takes them), so that neither imports the other for it.

/// The mode a hierarchical lock ([`Client::hierarchy_lock`](crate::Client::hierarchy_lock))
/// is taken in on the last level of its path; every ancestor level is taken in the matching
/// intention mode ([`intention`](Self::intention)).
///
/// The standard compatibility matrix (two holders of one level run together iff their modes
/// are compatible):
///
/// | | IS | IX | S | X |
/// |---|:-:|:-:|:-:|:-:|
/// | **IS** | yes | yes | yes | no |
/// | **IX** | yes | yes | no | no |
/// | **S** | yes | no | yes | no |
/// | **X** | no | no | no | no |
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum HierarchyMode {
    /// IS, intention shared: something below this level is read.
    IntentShared,
    /// IX, intention exclusive: something below this level is written.
    IntentExclusive,
    /// S, shared: this level and everything below it is read; other readers run beside.
    Shared,
    /// X, exclusive: this level and everything below it is held alone.
    Exclusive,
}

impl HierarchyMode {
    /// Every mode, IS, IX, S, X (in the order of their keys in the store).
    pub const ALL: [Self; 4] = [
        Self::IntentShared,
        Self::IntentExclusive,
        Self::Shared,
        Self::Exclusive,
    ];

    /// The usual short name: `IS`, `IX`, `S` or `X`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IntentShared => "IS",
            Self::IntentExclusive => "IX",
            Self::Shared => "S",
            Self::Exclusive => "X",
        }
    }

    /// Whether a holder in `self` and one in `other` may hold the same level together.
    #[must_use]
    pub fn compatible_with(self, other: Self) -> bool {
        use HierarchyMode::{IntentExclusive, IntentShared, Shared};
        matches!(
            (self, other),
            (IntentShared, IntentShared | IntentExclusive | Shared)
                | (IntentExclusive, IntentShared | IntentExclusive)
                | (Shared, IntentShared | Shared)
        )
    }

    /// The mode a holder in `self` takes on every ancestor level: IS for IS and S, IX for
    /// IX and X.
    #[must_use]
    pub fn intention(self) -> Self {
        match self {
            Self::IntentShared | Self::Shared => Self::IntentShared,
            Self::IntentExclusive | Self::Exclusive => Self::IntentExclusive,
        }
    }

    /// Its place in [`ALL`](Self::ALL), 0 to 3.
    pub(crate) fn index(self) -> usize {
        match self {
            Self::IntentShared => 0,
            Self::IntentExclusive => 1,
            Self::Shared => 2,
            Self::Exclusive => 3,
        }
    }

    /// The mode on level `level` (0 is the root) of a path of `levels` levels taken in `self`.
    pub(crate) fn on_level(self, level: usize, levels: usize) -> Self {
        if level + 1 == levels {
            self
        } else {
            self.intention()
        }
    }
}

impl std::fmt::Display for HierarchyMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::HierarchyMode;

    #[test]
    fn the_matrix_is_symmetric_and_the_standard_one() {
        let expected = [
            // IS     IX     S      X
            [true, true, true, false],
            [true, true, false, false],
            [true, false, true, false],
            [false, false, false, false],
        ];
        for a in HierarchyMode::ALL {
            for b in HierarchyMode::ALL {
                assert_eq!(a.compatible_with(b), b.compatible_with(a), "{a} {b}");
                assert_eq!(
                    a.compatible_with(b),
                    expected[a.index()][b.index()],
                    "{a} {b}"
                );
            }
        }
    }
}
