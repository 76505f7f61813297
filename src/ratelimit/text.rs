//! The text forms of the rate-limit settings: how a name is compared, and how a setting that
//! is text in a configuration file deserialises.

// `text`'s words (split at white space, `-` and `_`) joined by `-`, in lower case: the form
// an algorithm or outage policy name is compared in (`"Token bucket"` is `token-bucket`).
pub(super) use distlock_grammar::kebab;

#[cfg(feature = "serde")]
pub(super) use parsed::deserialize_parsed;

#[cfg(feature = "serde")]
mod parsed {
    use std::fmt;
    use std::marker::PhantomData;
    use std::str::FromStr;

    use serde::Deserializer;
    use serde::de::{self, Visitor};

    /// A `T` from a string, by [`FromStr`]; `expecting` says what the string looks like.
    pub(crate) fn deserialize_parsed<'de, D, T>(
        deserializer: D,
        expecting: &'static str,
    ) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: FromStr,
        T::Err: fmt::Display,
    {
        deserializer.deserialize_str(ParsedVisitor {
            expecting,
            parsed: PhantomData,
        })
    }

    struct ParsedVisitor<T> {
        expecting: &'static str,
        parsed: PhantomData<T>,
    }

    impl<T> Visitor<'_> for ParsedVisitor<T>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.expecting)
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
            text.parse().map_err(E::custom)
        }
    }
}
