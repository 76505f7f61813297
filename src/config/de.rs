//! Reading a configuration table field by field, so that every error names its field.
//!
//! serde's derive reports a value of the wrong type or text that does not parse without
//! saying which field it was in, and wrapping such an error afterwards would repeat the
//! position some formats append to it. So each value is read by a visitor that knows its
//! field's path (`ttl`, `sentinel.master`, `cluster[1]`) and makes its own errors, once, with
//! that path in front: the format then adds where the value is (TOML's line and caret, JSON's
//! line and column) as it does for any error.

use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::FieldErrorKind;

std::thread_local! {
    /// What the last error made here was about: its kind and its field's path. The formats
    /// carry errors as text only; [`Config`](super::Config)'s loader takes this note after a
    /// failed parse to return a typed [`ConfigError`](super::ConfigError). Parsing is
    /// synchronous, so the note on this thread is the parse's own.
    static NOTE: std::cell::RefCell<Option<(FieldErrorKind, String)>> =
        const { std::cell::RefCell::new(None) };
}

/// Notes that an error of `kind` about the field at `path` is being made.
pub(crate) fn note(kind: FieldErrorKind, path: &str) {
    NOTE.with(|cell| *cell.borrow_mut() = Some((kind, path.to_owned())));
}

/// The last note on this thread, taken (so a later parse starts afresh).
#[cfg_attr(not(feature = "toml"), allow(dead_code))]
pub(crate) fn take_note() -> Option<(FieldErrorKind, String)> {
    NOTE.with(|cell| cell.borrow_mut().take())
}

std::thread_local! {
    /// The path of the value being read: after a failed parse, the innermost one, for an
    /// error the format makes without asking a visitor (TOML's "integer number overflowed").
    static READING: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Reads the value at `path` with `read`; if it fails, `path` stays the one being read.
pub(crate) fn reading<T, E>(path: &str, read: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let outer = READING.with(|cell| cell.borrow_mut().replace(path.to_owned()));
    let result = read();
    if result.is_ok() {
        READING.with(|cell| *cell.borrow_mut() = outer);
    }
    result
}

/// The path of the value that was being read when the last parse on this thread failed,
/// taken.
#[cfg_attr(not(feature = "toml"), allow(dead_code))]
pub(crate) fn take_reading() -> Option<String> {
    READING.with(|cell| cell.borrow_mut().take())
}

/// What a duration looks like, for messages.
const DURATION_EXAMPLES: &str = "\"250ms\", \"2s\" or \"1h 30min\"";

/// A value of one field: read from the deserializer with errors that name `path`.
pub(crate) trait FieldValue: Sized {
    fn read<'de, D: Deserializer<'de>>(path: &str, deserializer: D) -> Result<Self, D::Error>;
}

/// A table of named fields (a struct in configuration), read by [`Table`]. Its
/// `Deserialize` impl is [`deserialize_table`]; as a field of another table it is a
/// [`FieldValue`] under its path.
pub(crate) trait ReadTable: Sized {
    /// What the table holds, for a value of the wrong type: "a lock's options".
    const WHAT: &'static str;
    /// Its fields, in the order the documentation lists them.
    const FIELDS: &'static [&'static str];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error>;
}

impl<T: ReadTable> FieldValue for T {
    fn read<'de, D: Deserializer<'de>>(path: &str, deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(TableVisitor::<T>(path, PhantomData))
    }
}

/// `T` at the top of a configuration (its fields' paths are their names).
pub(crate) fn deserialize_table<'de, T: ReadTable, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<T, D::Error> {
    <T as FieldValue>::read("", deserializer)
}

struct TableVisitor<'a, T>(&'a str, PhantomData<T>);

impl<'de, T: ReadTable> Visitor<'de> for TableVisitor<'_, T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        note(FieldErrorKind::WrongType, self.0);
        if !self.0.is_empty() {
            write!(f, "field `{}`: ", self.0)?;
        }
        write!(f, "a table of {}: ", T::WHAT)?;
        list(f, T::FIELDS)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        T::read_fields(&mut Table::new(self.0, T::FIELDS), &mut map)
    }
}

/// `a`, `b` or `c`.
fn list(f: &mut fmt::Formatter<'_>, fields: &[&str]) -> fmt::Result {
    for (i, field) in fields.iter().enumerate() {
        match i {
            0 => {}
            _ if i + 1 == fields.len() => f.write_str(" or ")?,
            _ => f.write_str(", ")?,
        }
        write!(f, "`{field}`")?;
    }
    Ok(())
}

/// One table being read: which fields it has, which were seen, and where it is.
pub(crate) struct Table<'a> {
    path: &'a str,
    fields: &'static [&'static str],
    seen: Vec<&'static str>,
}

impl<'a> Table<'a> {
    /// The table at `path` (empty at the top) with these fields.
    pub(crate) fn new(path: &'a str, fields: &'static [&'static str]) -> Self {
        Self {
            path,
            fields,
            seen: Vec::new(),
        }
    }

    /// The path of `field` in this table, for messages: `ttl`, `sentinel.master`.
    pub(crate) fn path(&self, field: &str) -> String {
        if self.path.is_empty() {
            field.to_owned()
        } else {
            format!("{}.{field}", self.path)
        }
    }

    /// The next field's name, one of the table's fields; an unknown field, or one given
    /// twice, is an error that names it and lists those the table has.
    pub(crate) fn next_key<'de, A: MapAccess<'de>>(
        &mut self,
        map: &mut A,
    ) -> Result<Option<&'static str>, A::Error> {
        let Some(key) = map.next_key_seed(KeySeed(self))? else {
            return Ok(None);
        };
        if self.seen.contains(&key) {
            note(FieldErrorKind::DuplicateField, &self.path(key));
            return Err(de::Error::custom(format_args!(
                "field `{}` is given twice",
                self.path(key)
            )));
        }
        self.seen.push(key);
        Ok(Some(key))
    }

    /// The value of `field` (the key [`next_key`](Self::next_key) just returned).
    pub(crate) fn value<'de, T: FieldValue, A: MapAccess<'de>>(
        &self,
        map: &mut A,
        field: &str,
    ) -> Result<T, A::Error> {
        map.next_value_seed(At::<T>(&self.path(field), PhantomData))
    }

    /// The value of `field`, refused with `check`'s message if it fails it (a bound of that
    /// field alone): the error is made while the value is read, so the format points at it.
    pub(crate) fn value_checked<'de, T: FieldValue, A: MapAccess<'de>>(
        &self,
        map: &mut A,
        field: &str,
        check: impl FnOnce(&T) -> Result<(), String>,
    ) -> Result<T, A::Error> {
        let path = self.path(field);
        map.next_value_seed(Checked {
            path: &path,
            check,
            value: PhantomData,
        })
    }

    /// An error about `field` of this table (a value that is well formed but refused, or two
    /// fields that disagree): ``field `path`: {message}``.
    pub(crate) fn error<E: de::Error>(&self, field: &str, message: impl fmt::Display) -> E {
        note(FieldErrorKind::InvalidValue, &self.path(field));
        E::custom(format_args!("field `{}`: {message}", self.path(field)))
    }

    /// A field the table needs and did not get.
    pub(crate) fn missing<E: de::Error>(&self, field: &str) -> E {
        note(FieldErrorKind::MissingField, &self.path(field));
        E::custom(format_args!("missing field `{}`", self.path(field)))
    }

    /// A key that [`next_key`](Self::next_key) returned and the reader does not handle (a
    /// field listed in `FIELDS` without a reader: a bug, reported rather than ignored).
    pub(crate) fn unhandled<E: de::Error>(&self, field: &str) -> E {
        E::custom(format_args!(
            "field `{}` is not read (a distlock bug; please report it)",
            self.path(field)
        ))
    }
}

/// Reads a key and finds it among the table's fields.
struct KeySeed<'t, 'a>(&'t Table<'a>);

impl<'de> DeserializeSeed<'de> for KeySeed<'_, '_> {
    type Value = &'static str;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl Visitor<'_> for KeySeed<'_, '_> {
    type Value = &'static str;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        note(FieldErrorKind::WrongType, self.0.path);
        f.write_str("a field name: ")?;
        list(f, self.0.fields)
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<&'static str, E> {
        let table = self.0;
        table
            .fields
            .iter()
            .find(|&&field| field == key)
            .copied()
            .ok_or_else(|| {
                note(FieldErrorKind::UnknownField, &table.path(key));
                E::custom(format_args!(
                    "unknown field `{}`, expected {}",
                    table.path(key),
                    Listed(table.fields)
                ))
            })
    }
}

/// Fields as `a`, `b` or `c` in a message.
struct Listed(&'static [&'static str]);

impl fmt::Display for Listed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        list(f, self.0)
    }
}

/// Reads a `T` at `path`.
struct At<'a, T>(&'a str, PhantomData<T>);

impl<'de, T: FieldValue> DeserializeSeed<'de> for At<'_, T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
        reading(self.0, || T::read(self.0, deserializer))
    }
}

/// Reads a `T` at `path` and checks it.
struct Checked<'a, T, F> {
    path: &'a str,
    check: F,
    value: PhantomData<T>,
}

impl<'de, T, F> DeserializeSeed<'de> for Checked<'_, T, F>
where
    T: FieldValue,
    F: FnOnce(&T) -> Result<(), String>,
{
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
        let value = At::<T>(self.path, PhantomData).deserialize(deserializer)?;
        (self.check)(&value).map_err(|message| invalid(self.path, message))?;
        Ok(value)
    }
}

/// One option's value, checked alone by its option type's `check` ([`LockOptions::check`],
/// [`LimiterOptions::check`]) so that the error points at the value; what depends on two
/// fields is checked once the table is read.
///
/// [`LockOptions::check`]: crate::LockOptions::check
/// [`LimiterOptions::check`]: crate::ratelimit::LimiterOptions::check
pub(crate) fn checked(check: Result<(), crate::InvalidOption>) -> Result<(), String> {
    check.map_err(|invalid| invalid.reason().to_owned())
}

/// A duration that must be above zero.
pub(crate) fn above_zero(duration: &Duration) -> Result<(), String> {
    if duration.is_zero() {
        Err("zero; it must be above zero".to_owned())
    } else {
        Ok(())
    }
}

/// A visitor of one kind of text (a duration, a path...) at `path`.
struct TextVisitor<'a, T> {
    path: &'a str,
    /// What the text should look like.
    looks_like: &'static str,
    /// The kind of a text that does not parse.
    kind: FieldErrorKind,
    parse: fn(&str) -> Result<T, String>,
}

impl<T> Visitor<'_> for TextVisitor<'_, T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        note(FieldErrorKind::WrongType, self.path);
        write!(f, "field `{}`: {}", self.path, self.looks_like)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        (self.parse)(text).map_err(|e| {
            note(self.kind, self.path);
            E::custom(format_args!("field `{}`: {e}", self.path))
        })
    }
}

fn text<'de, D: Deserializer<'de>, T>(
    path: &str,
    deserializer: D,
    looks_like: &'static str,
    kind: FieldErrorKind,
    parse: fn(&str) -> Result<T, String>,
) -> Result<T, D::Error> {
    deserializer.deserialize_str(TextVisitor {
        path,
        looks_like,
        kind,
        parse,
    })
}

/// Text parsed with [`FromStr`], whose error says what is wrong (a policy, an outage policy).
pub(crate) fn parsed<'de, D, T>(
    path: &str,
    deserializer: D,
    looks_like: &'static str,
    kind: FieldErrorKind,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    text(path, deserializer, looks_like, kind, |text| {
        text.parse().map_err(|e: T::Err| e.to_string())
    })
}

/// A duration as text: `"250ms"`, `"2s"`, `"1h 30min"` (the grammar of
/// [`distlock_grammar::parse_duration`]).
impl FieldValue for Duration {
    fn read<'de, D: Deserializer<'de>>(path: &str, deserializer: D) -> Result<Self, D::Error> {
        text(
            path,
            deserializer,
            DURATION_LOOKS_LIKE,
            FieldErrorKind::InvalidDuration,
            parse_duration,
        )
    }
}

const DURATION_LOOKS_LIKE: &str = "a duration such as \"250ms\", \"2s\" or \"1h 30min\"";

fn parse_duration(text: &str) -> Result<Duration, String> {
    distlock_grammar::parse_duration(text.trim()).map_err(|e| {
        format!(
            "invalid duration {text:?} ({e}); write a number and a unit, e.g. {DURATION_EXAMPLES}"
        )
    })
}

/// A duration, or `"forever"` for [`Duration::MAX`] (what the builders take as no bound).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OrForever(pub(crate) Duration);

impl FieldValue for OrForever {
    fn read<'de, D: Deserializer<'de>>(path: &str, deserializer: D) -> Result<Self, D::Error> {
        text(
            path,
            deserializer,
            "a duration such as \"250ms\" or \"2s\", or \"forever\"",
            FieldErrorKind::InvalidDuration,
            |text| {
                if text.trim().eq_ignore_ascii_case("forever") {
                    Ok(Self(Duration::MAX))
                } else {
                    parse_duration(text)
                        .map(Self)
                        .map_err(|e| format!("{e}, or \"forever\""))
                }
            },
        )
    }
}

impl FieldValue for String {
    fn read<'de, D: Deserializer<'de>>(path: &str, deserializer: D) -> Result<Self, D::Error> {
        text(
            path,
            deserializer,
            "text",
            FieldErrorKind::InvalidValue,
            |text| Ok(text.to_owned()),
        )
    }
}

impl FieldValue for PathBuf {
    fn read<'de, D: Deserializer<'de>>(path: &str, deserializer: D) -> Result<Self, D::Error> {
        text(
            path,
            deserializer,
            "a file's path",
            FieldErrorKind::InvalidValue,
            |text| {
                if text.is_empty() {
                    Err("an empty path; name a file".to_owned())
                } else {
                    Ok(PathBuf::from(text))
                }
            },
        )
    }
}

impl FieldValue for bool {
    fn read<'de, D: Deserializer<'de>>(path: &str, deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_bool(BoolVisitor(path))
    }
}

struct BoolVisitor<'a>(&'a str);

impl Visitor<'_> for BoolVisitor<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        note(FieldErrorKind::WrongType, self.0);
        write!(f, "field `{}`: true or false", self.0)
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<bool, E> {
        Ok(value)
    }
}

/// A whole number of a type `T` (`u32`, `usize`).
struct NumberVisitor<'a, T>(&'a str, PhantomData<T>);

impl<T> Visitor<'_> for NumberVisitor<'_, T>
where
    T: TryFrom<u64> + Bounded,
{
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        note(FieldErrorKind::WrongType, self.0);
        write!(f, "field `{}`: a whole number from 0 to {}", self.0, T::MAX)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<T, E> {
        T::try_from(value).map_err(|_| {
            note(FieldErrorKind::InvalidValue, self.0);
            E::custom(format_args!(
                "field `{}`: {value} is more than {}",
                self.0,
                T::MAX
            ))
        })
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<T, E> {
        match u64::try_from(value) {
            Ok(value) => self.visit_u64(value),
            Err(_) => Err(invalid(
                self.0,
                format_args!("{value} is more than {}", T::MAX),
            )),
        }
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<T, E> {
        match u128::try_from(value) {
            Ok(value) => self.visit_u128(value),
            Err(_) => Err(invalid(
                self.0,
                format_args!(
                    "{value} is negative; a whole number from 0 to {} is needed",
                    T::MAX
                ),
            )),
        }
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<T, E> {
        match u64::try_from(value) {
            Ok(value) => self.visit_u64(value),
            Err(_) => Err(invalid(
                self.0,
                format_args!(
                    "{value} is negative; a whole number from 0 to {} is needed",
                    T::MAX
                ),
            )),
        }
    }
}

/// The largest value of a number type, for messages.
trait Bounded {
    const MAX: u64;
}

impl Bounded for u32 {
    const MAX: u64 = u32::MAX as u64;
}

impl Bounded for usize {
    // usize is at most 64 bits on every target Rust supports.
    const MAX: u64 = usize::MAX as u64;
}

impl FieldValue for u32 {
    fn read<'de, D: Deserializer<'de>>(path: &str, deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_u32(NumberVisitor(path, PhantomData))
    }
}

impl FieldValue for usize {
    fn read<'de, D: Deserializer<'de>>(path: &str, deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_u64(NumberVisitor(path, PhantomData))
    }
}

/// A list whose items are read at `path[i]`; at least one.
impl<T: FieldValue> FieldValue for Vec<T> {
    fn read<'de, D: Deserializer<'de>>(path: &str, deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(ListVisitor(path, PhantomData))
    }
}

struct ListVisitor<'a, T>(&'a str, PhantomData<T>);

impl<'de, T: FieldValue> Visitor<'de> for ListVisitor<'_, T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        note(FieldErrorKind::WrongType, self.0);
        write!(f, "field `{}`: a list", self.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Vec<T>, A::Error> {
        read_items(self.0, seq)
    }
}

/// The items of a list at `path`, each at `path[i]`; an empty list is refused.
pub(crate) fn read_items<'de, T: FieldValue, A: SeqAccess<'de>>(
    path: &str,
    mut seq: A,
) -> Result<Vec<T>, A::Error> {
    let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
    loop {
        let item_path = format!("{path}[{}]", items.len());
        match seq.next_element_seed(At::<T>(&item_path, PhantomData))? {
            Some(item) => items.push(item),
            None => break,
        }
    }
    if items.is_empty() {
        return Err(invalid(path, "an empty list; give at least one"));
    }
    Ok(items)
}

/// An error about the well-formed value at `path` that cannot be used:
/// ``field `path`: {message}``.
pub(crate) fn invalid<E: de::Error>(path: &str, message: impl fmt::Display) -> E {
    note(FieldErrorKind::InvalidValue, path);
    E::custom(format_args!("field `{path}`: {message}"))
}
