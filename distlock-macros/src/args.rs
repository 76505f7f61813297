//! Parsing of the attribute's arguments: `key = "...", ttl = "30s", client = <expr>, ...`.
//!
//! Parsing is in two steps. `RawArgs` only splits the input into `name = value` pairs (every
//! value is parsed as an expression, so an unknown argument can be skipped and the others still
//! checked). `LockArgs::from_raw` then interprets each pair, collecting every problem it finds
//! into one `syn::Error` so the user sees all of them at once.

use std::time::Duration;

use proc_macro2::Span;
use syn::ext::IdentExt as _;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token};

use crate::errors::Errors;
use crate::template::{self, Part};

/// Every argument the attribute accepts, in the order the docs list them.
const NAMES: [&str; 10] = [
    "key",
    "ttl",
    "wait",
    "client",
    "watchdog",
    "on_busy",
    "reentrant",
    "min_hold",
    "max_hold",
    "crate",
];
/// [`NAMES`] for error messages.
const ACCEPTED: &str = "`key`, `ttl`, `wait`, `client`, `watchdog`, `on_busy`, `reentrant`, \
                        `min_hold`, `max_hold` and `crate`";

// Copies of the runtime's constants (a proc-macro crate cannot use them);
// `tests/macro/semantics.rs` checks that they agree.
/// The shortest ttl the runtime accepts (`distlock::MIN_TTL`).
const MIN_TTL: Duration = Duration::from_millis(10);
/// The longest ttl the runtime accepts (`distlock::MAX_TTL`).
const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The default ttl (`distlock::DEFAULT_TTL`).
const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The arguments, checked and with defaults filled in.
pub(crate) struct LockArgs {
    pub(crate) key: Key,
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    /// `client = <expr>`: an expression of type `&distlock::Client`.
    pub(crate) client: Option<Expr>,
    pub(crate) watchdog: bool,
    /// `on_busy = error`.
    pub(crate) fail_if_busy: bool,
    pub(crate) reentrant: bool,
    /// `min_hold = "800ms"`: keep the lock at least this long after it was granted.
    pub(crate) min_hold: Option<Duration>,
    /// `max_hold = "10m"`: stop renewing after this long.
    pub(crate) max_hold: Option<Duration>,
    /// `crate = "path"`; `None` means `::distlock`.
    pub(crate) krate: Option<syn::Path>,
}

/// The `key` template and the literal it came from (errors about it point at the literal).
pub(crate) struct Key {
    pub(crate) parts: Vec<Part>,
    pub(crate) span: Span,
}

/// One `name = value` (or a bare `name`) as written.
struct RawArg {
    name: Ident,
    value: Option<Expr>,
}

/// The attribute's arguments as written, before interpretation.
struct RawArgs(Vec<RawArg>);

impl Parse for RawArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Vec::new();
        while !input.is_empty() {
            if input.peek(LitStr) {
                return Err(input.error(
                    "arguments are written `name = value`: give the key as `key = \"...\"`",
                ));
            }
            // `crate` is a keyword, so accept any identifier here and sort names out later.
            let name = input.call(Ident::parse_any).map_err(|err| {
                syn::Error::new(
                    err.span(),
                    format!("expected an argument name: one of {ACCEPTED}, written `name = value`"),
                )
            })?;
            let value = if input.peek(Token![=]) {
                input.parse::<Token![=]>()?;
                Some(input.parse::<Expr>()?)
            } else {
                None
            };
            args.push(RawArg { name, value });
            if input.is_empty() {
                break;
            }
            if !input.peek(Token![,]) {
                return Err(input.error("expected `,` between arguments or `=` after a name"));
            }
            input.parse::<Token![,]>()?;
        }
        Ok(Self(args))
    }
}

impl LockArgs {
    /// Parses and checks the attribute's arguments.
    pub(crate) fn parse(args: proc_macro2::TokenStream) -> syn::Result<Self> {
        let raw: RawArgs = syn::parse2(args)?;
        Self::from_raw(raw)
    }

    fn from_raw(raw: RawArgs) -> syn::Result<Self> {
        let mut errors = Errors::default();
        let mut seen: Vec<String> = Vec::new();
        let mut key = None;
        let mut ttl = None;
        let mut wait: Option<(Duration, Span)> = None;
        let mut client = None;
        let mut watchdog = None;
        let mut on_busy: Option<(bool, Span)> = None;
        let mut reentrant = None;
        let mut min_hold: Option<(Duration, Span)> = None;
        let mut max_hold: Option<Duration> = None;
        let mut krate = None;

        for RawArg { name, value } in raw.0 {
            let label = name.unraw().to_string();
            if !NAMES.contains(&label.as_str()) {
                errors.push(unknown(&name, &label));
                continue;
            }
            if seen.contains(&label) {
                errors.push(syn::Error::new(
                    name.span(),
                    format!("`{label}` is given more than once; give each argument once"),
                ));
                continue;
            }
            seen.push(label.clone());
            let Some(value) = value else {
                errors.push(syn::Error::new(
                    name.span(),
                    format!("`{label}` needs a value: {}", example(&label)),
                ));
                continue;
            };
            let result = match label.as_str() {
                "key" => parse_key(&value).map(|k| key = Some(k)),
                "ttl" => parse_ttl(&value).map(|d| ttl = Some(d)),
                "wait" => parse_duration("wait", &value).map(|d| wait = Some((d, name.span()))),
                "client" => {
                    client = Some(value);
                    Ok(())
                }
                "watchdog" => parse_bool("watchdog", &value).map(|b| watchdog = Some(b)),
                "reentrant" => parse_bool("reentrant", &value).map(|b| reentrant = Some(b)),
                "on_busy" => parse_on_busy(&value).map(|b| on_busy = Some((b, value.span()))),
                "min_hold" => parse_min_hold(&value).map(|d| min_hold = Some((d, value.span()))),
                "max_hold" => parse_max_hold(&value).map(|d| max_hold = Some(d)),
                "crate" => parse_crate(&value).map(|p| krate = Some(p)),
                _ => Err(unknown(&name, &label)),
            };
            if let Err(err) = result {
                errors.push(err);
            }
        }

        if let (Some((true, _)), Some((_, wait_span))) = (on_busy, wait) {
            errors.push(syn::Error::new(
                wait_span,
                "`wait` has no effect with `on_busy = error`, which fails at once when the lock \
                 is held: remove one of them",
            ));
        }
        if let (Some((min, min_span)), Some(max)) = (min_hold, max_hold)
            && min > max
        {
            errors.push(syn::Error::new(
                min_span,
                format!(
                    "`min_hold` of {} is longer than `max_hold` of {}: the lock cannot be kept \
                     longer than it may be held",
                    humantime::format_duration(min),
                    humantime::format_duration(max)
                ),
            ));
        }
        if key.is_none() && !seen.iter().any(|s| s == "key") {
            errors.push(syn::Error::new(
                Span::call_site(),
                "missing `key`: #[distributed_lock] needs the lock's key, e.g. \
                 #[distributed_lock(key = \"order:{order_id}\")]",
            ));
        }
        errors.finish()?;
        // An invalid key was reported where it was found and a missing one just above.
        let key = key.ok_or_else(|| syn::Error::new(Span::call_site(), "invalid `key`"))?;
        Ok(Self {
            key,
            ttl: ttl.unwrap_or(DEFAULT_TTL),
            wait: wait.map_or(Duration::ZERO, |(d, _)| d),
            client,
            watchdog: watchdog.unwrap_or(true),
            fail_if_busy: on_busy.is_some_and(|(b, _)| b),
            reentrant: reentrant.unwrap_or(true),
            min_hold: min_hold.map(|(d, _)| d).filter(|d| !d.is_zero()),
            max_hold,
            krate,
        })
    }
}

fn unknown(name: &Ident, label: &str) -> syn::Error {
    syn::Error::new(
        name.span(),
        format!("unknown argument `{label}`; accepted arguments: {ACCEPTED}"),
    )
}

/// How an argument is written, for "needs a value" errors.
fn example(name: &str) -> &'static str {
    match name {
        "key" => "`key = \"order:{order_id}\"`",
        "ttl" => "`ttl = \"30s\"`",
        "wait" => "`wait = \"5s\"`",
        "client" => "`client = &self.locks` (an expression of type `&distlock::Client`)",
        "watchdog" => "`watchdog = true` or `watchdog = false`",
        "reentrant" => "`reentrant = true` or `reentrant = false`",
        "on_busy" => "`on_busy = wait` or `on_busy = error`",
        "min_hold" => "`min_hold = \"800ms\"`",
        "max_hold" => "`max_hold = \"10m\"`",
        _ => "`crate = \"::distlock\"`",
    }
}

/// The value as a string literal, or an error saying how to write it.
fn string_literal<'a>(name: &str, value: &'a Expr) -> syn::Result<&'a LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s),
        _ => Err(syn::Error::new(
            value.span(),
            format!("`{name}` takes a string literal: {}", example(name)),
        )),
    }
}

fn parse_key(value: &Expr) -> syn::Result<Key> {
    let lit = string_literal("key", value)?;
    let text = lit.value();
    if text.is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            "`key` is empty: give the lock a name, e.g. `key = \"order:{order_id}\"`",
        ));
    }
    let parts = template::parse(&text).map_err(|err| syn::Error::new(lit.span(), err.0))?;
    Ok(Key {
        parts,
        span: lit.span(),
    })
}

/// A humantime duration (`"30s"`, `"1m 30s"`, `"250ms"`); zero is allowed.
fn parse_duration(name: &str, value: &Expr) -> syn::Result<Duration> {
    let lit = string_literal(name, value)?;
    humantime::parse_duration(lit.value().trim()).map_err(|err| {
        syn::Error::new(
            lit.span(),
            format!(
                "invalid `{name}` {:?}: {err}; write a duration such as \"500ms\", \"30s\" or \
                 \"1m 30s\"",
                lit.value()
            ),
        )
    })
}

fn parse_ttl(value: &Expr) -> syn::Result<Duration> {
    let ttl = parse_duration("ttl", value)?;
    let out_of_range = if ttl < MIN_TTL {
        "shorter than the 10ms minimum"
    } else if ttl > MAX_TTL {
        "longer than the 7 days maximum"
    } else {
        return Ok(ttl);
    };
    Err(syn::Error::new(
        value.span(),
        format!(
            "`ttl` of {} is {out_of_range}: the ttl must be between 10ms and 7 days (the \
             watchdog renews it while the body runs, so it only bounds how long a crashed \
             holder keeps the lock)",
            humantime::format_duration(ttl)
        ),
    ))
}

/// `min_hold`: a duration up to the longest ttl; zero means none.
fn parse_min_hold(value: &Expr) -> syn::Result<Duration> {
    let min = parse_duration("min_hold", value)?;
    if min > MAX_TTL {
        return Err(syn::Error::new(
            value.span(),
            format!(
                "`min_hold` of {} is longer than the 7 days maximum: the lock is kept by its \
                 key's expiry, which cannot be longer than the longest ttl",
                humantime::format_duration(min)
            ),
        ));
    }
    Ok(min)
}

/// `max_hold`: a duration above zero.
fn parse_max_hold(value: &Expr) -> syn::Result<Duration> {
    let max = parse_duration("max_hold", value)?;
    if max.is_zero() {
        return Err(syn::Error::new(
            value.span(),
            "`max_hold` of 0s would stop renewing at once: give a duration above zero, or \
             leave it out for no limit",
        ));
    }
    Ok(max)
}

fn parse_bool(name: &str, value: &Expr) -> syn::Result<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(b), ..
        }) => Ok(b.value),
        _ => Err(syn::Error::new(
            value.span(),
            format!("expected {}", example(name)),
        )),
    }
}

/// `wait` → false, `error` → true (fail if busy).
fn parse_on_busy(value: &Expr) -> syn::Result<bool> {
    if let Expr::Path(path) = value
        && path.attrs.is_empty()
        && path.qself.is_none()
    {
        if path.path.is_ident("wait") {
            return Ok(false);
        }
        if path.path.is_ident("error") {
            return Ok(true);
        }
    }
    Err(syn::Error::new(
        value.span(),
        "expected `on_busy = wait` (wait up to `wait` for the lock, the default) or \
         `on_busy = error` (fail at once with `LockError::Busy`)",
    ))
}

fn parse_crate(value: &Expr) -> syn::Result<syn::Path> {
    let lit = string_literal("crate", value)?;
    lit.parse::<syn::Path>().map_err(|err| {
        syn::Error::new(
            lit.span(),
            format!(
                "`crate` must be the path of the distlock crate, e.g. \"::distlock\" or \
                 \"::my_locks\": {err}"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    fn parse(tokens: proc_macro2::TokenStream) -> syn::Result<LockArgs> {
        LockArgs::parse(tokens)
    }

    fn messages(tokens: proc_macro2::TokenStream) -> Vec<String> {
        match parse(tokens) {
            Ok(_) => vec![],
            Err(err) => err.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn defaults() {
        let args = parse(quote!(key = "jobs")).unwrap();
        assert_eq!(args.ttl, Duration::from_secs(30));
        assert_eq!(args.wait, Duration::ZERO);
        assert!(args.watchdog && args.reentrant && !args.fail_if_busy);
        assert!(args.client.is_none() && args.krate.is_none());
    }

    #[test]
    fn every_argument() {
        let args = parse(quote!(
            key = "order:{id}",
            ttl = "1m 30s",
            wait = "250ms",
            client = &self.locks,
            watchdog = false,
            on_busy = wait,
            reentrant = false,
            min_hold = "800ms",
            max_hold = "1m",
            crate = "::locks",
        ))
        .unwrap();
        assert_eq!(args.min_hold, Some(Duration::from_millis(800)));
        assert_eq!(args.max_hold, Some(Duration::from_secs(60)));
        assert_eq!(args.ttl, Duration::from_secs(90));
        assert_eq!(args.wait, Duration::from_millis(250));
        assert!(!args.watchdog && !args.reentrant && !args.fail_if_busy);
        assert!(args.client.is_some());
        let krate = args.krate.unwrap();
        assert_eq!(quote!(#krate).to_string(), ":: locks");
        let args = parse(quote!(key = "k", on_busy = error)).unwrap();
        assert!(args.fail_if_busy);
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let msgs = messages(quote!(
            ttl = "5ms",
            tll = "1s",
            wait = "soon",
            watchdog,
            reentrant = "no",
            ttl = "1s"
        ));
        assert_eq!(msgs.len(), 7, "{msgs:#?}");
        assert!(msgs[0].contains("shorter than the 10ms minimum"));
        assert!(msgs[1].starts_with("unknown argument `tll`; accepted arguments: `key`"));
        assert!(msgs[2].starts_with("invalid `wait` \"soon\": "));
        assert!(msgs[3].contains("`watchdog` needs a value"));
        assert!(msgs[4].contains("expected `reentrant = true` or `reentrant = false`"));
        assert!(msgs[5].contains("`ttl` is given more than once"));
        assert!(msgs[6].starts_with("missing `key`"));
    }

    #[test]
    fn bad_values() {
        assert!(messages(quote!(key = ""))[0].contains("`key` is empty"));
        assert!(messages(quote!(key = order))[0].contains("takes a string literal"));
        assert!(messages(quote!(key = "a", ttl = "0s"))[0].contains("0s is shorter"));
        assert!(messages(quote!(key = "a", ttl = "8days"))[0].contains("longer than the 7 days"));
        assert!(
            messages(quote!(key = "a", on_busy = fail))[0].contains("expected `on_busy = wait`")
        );
        assert!(
            messages(quote!(key = "a", on_busy = error, wait = "1s"))[0]
                .contains("`wait` has no effect")
        );
        assert!(messages(quote!(key = "a", crate = "not a path"))[0].contains("`crate` must be"));
        assert!(
            messages(quote!(key = "a", min_hold = "2s", max_hold = "1s"))[0]
                .contains("`min_hold` of 2s is longer than `max_hold` of 1s")
        );
        assert!(messages(quote!(key = "a", min_hold = "8days"))[0].contains("7 days maximum"));
        assert!(messages(quote!(key = "a", max_hold = "0s"))[0].contains("`max_hold` of 0s"));
        let args = parse(quote!(key = "a", min_hold = "0s")).unwrap();
        assert_eq!(args.min_hold, None, "zero is no minimum");
        assert!(messages(quote!("order:{id}"))[0].contains("give the key as `key = \"...\"`"));
        assert!(messages(quote!(key "a"))[0].contains("expected `,` between arguments"));
        assert!(messages(quote!(key = "a", 5))[0].contains("expected an argument name"));
    }
}
