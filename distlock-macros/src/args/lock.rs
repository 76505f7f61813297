//! The arguments of `#[distributed_lock]`.

use std::time::Duration;

use distlock_grammar::{DEFAULT_TTL, DurationText, MAX_TTL, check_ttl};
use proc_macro2::{Span, TokenStream};
use syn::Expr;
use syn::spanned::Spanned as _;

use super::{
    Grammar, Key, parse_bool, parse_choice, parse_crate, parse_duration, parse_key, parse_raw, walk,
};
use crate::errors::Errors;

/// What `#[distributed_lock]` accepts.
pub(crate) const GRAMMAR: Grammar = Grammar {
    names: &[
        "key",
        "ttl",
        "wait",
        "client",
        "watchdog",
        "on_busy",
        "reentrant",
        "min_hold",
        "max_hold",
        "fenced",
        "fair",
        "crate",
    ],
    accepted: "`key`, `ttl`, `wait`, `client`, `watchdog`, `on_busy`, `reentrant`, \
               `min_hold`, `max_hold`, `fenced`, `fair` and `crate`",
    example,
    key_names: "lock",
};

/// What a call does when the lock is held by someone else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnBusy {
    /// Wait up to `wait` (the default; with no `wait`, try once and fail with `Busy`).
    Wait,
    /// Fail at once with `LockError::Busy`.
    Error,
    /// Return at once without running the body: `Ok(())` or `Ok(None)`.
    Skip,
}

/// The arguments, checked and with defaults filled in.
pub(crate) struct LockArgs {
    pub(crate) key: Key,
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    /// `client = <expr>`: an expression of type `&distlock::Client`.
    pub(crate) client: Option<Expr>,
    pub(crate) watchdog: bool,
    pub(crate) on_busy: OnBusy,
    pub(crate) reentrant: bool,
    /// `min_hold = "800ms"`: keep the lock at least this long after it was granted.
    pub(crate) min_hold: Option<Duration>,
    /// `max_hold = "10m"`: stop renewing after this long.
    pub(crate) max_hold: Option<Duration>,
    /// `fenced = true`: mint the lease's fence with the grant (an eager lease).
    pub(crate) fenced: bool,
    /// `fair = true`: grant the lock in its waiters' order of arrival.
    pub(crate) fair: bool,
    /// `crate = "path"`; `None` means `::distlock`.
    pub(crate) krate: Option<syn::Path>,
}

impl LockArgs {
    /// Parses and checks the attribute's arguments.
    pub(crate) fn parse(args: TokenStream) -> syn::Result<Self> {
        let raw = parse_raw(args, &GRAMMAR)?;
        let g = &GRAMMAR;
        let mut errors = Errors::default();
        let mut key = None;
        let mut ttl = None;
        let mut wait: Option<(Duration, Span)> = None;
        let mut client = None;
        let mut watchdog = None;
        let mut on_busy: Option<(OnBusy, Span)> = None;
        let mut reentrant = None;
        let mut min_hold: Option<(Duration, Span)> = None;
        let mut max_hold: Option<Duration> = None;
        let mut fenced = None;
        let mut fair = None;
        let mut krate = None;

        let seen = walk(raw, g, &mut errors, |label, name, value| match label {
            "key" => parse_key(g, &value).map(|k| key = Some(k)),
            "ttl" => parse_ttl(&value).map(|d| ttl = Some(d)),
            "wait" => parse_duration(g, "wait", &value).map(|d| wait = Some((d, name.span()))),
            "client" => {
                client = Some(value);
                Ok(())
            }
            "watchdog" => parse_bool(g, "watchdog", &value).map(|b| watchdog = Some(b)),
            "reentrant" => parse_bool(g, "reentrant", &value).map(|b| reentrant = Some(b)),
            "on_busy" => parse_on_busy(&value).map(|b| on_busy = Some((b, value.span()))),
            "min_hold" => parse_min_hold(&value).map(|d| min_hold = Some((d, value.span()))),
            "max_hold" => parse_max_hold(&value).map(|d| max_hold = Some(d)),
            "fenced" => parse_bool(g, "fenced", &value).map(|b| fenced = Some(b)),
            "fair" => parse_bool(g, "fair", &value).map(|b| fair = Some(b)),
            _ => parse_crate(g, &value).map(|p| krate = Some(p)),
        });

        if let (Some((mode @ (OnBusy::Error | OnBusy::Skip), _)), Some((_, wait_span))) =
            (on_busy, wait)
        {
            let (mode, what) = match mode {
                OnBusy::Skip => ("skip", "returns at once without running the function"),
                _ => ("error", "fails at once"),
            };
            errors.push(syn::Error::new(
                wait_span,
                format!(
                    "`wait` has no effect with `on_busy = {mode}`, which {what} when the lock is \
                     held: remove one of them"
                ),
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
                    DurationText(min),
                    DurationText(max)
                ),
            ));
        }
        if !seen.iter().any(|s| s == "key") {
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
            on_busy: on_busy.map_or(OnBusy::Wait, |(b, _)| b),
            reentrant: reentrant.unwrap_or(true),
            min_hold: min_hold.map(|(d, _)| d).filter(|d| !d.is_zero()),
            max_hold,
            fenced: fenced.unwrap_or(false),
            fair: fair.unwrap_or(false),
            krate,
        })
    }
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
        "on_busy" => "`on_busy = wait`, `on_busy = error` or `on_busy = skip`",
        "min_hold" => "`min_hold = \"800ms\"`",
        "max_hold" => "`max_hold = \"10m\"`",
        "fenced" => "`fenced = true` or `fenced = false`",
        "fair" => "`fair = true` or `fair = false`",
        _ => "`crate = \"::distlock\"`",
    }
}

fn parse_ttl(value: &Expr) -> syn::Result<Duration> {
    let ttl = parse_duration(&GRAMMAR, "ttl", value)?;
    let out_of_range = match check_ttl(ttl) {
        Ok(ttl) => return Ok(ttl),
        Err(err) if err.is_below() => "shorter than the 10ms minimum",
        Err(_) => "longer than the 7 days maximum",
    };
    Err(syn::Error::new(
        value.span(),
        format!(
            "`ttl` of {} is {out_of_range}: the ttl must be between 10ms and 7 days (the \
             watchdog renews it while the body runs, so it only bounds how long a crashed \
             holder keeps the lock)",
            DurationText(ttl)
        ),
    ))
}

/// `min_hold`: a duration up to the longest ttl; zero means none.
fn parse_min_hold(value: &Expr) -> syn::Result<Duration> {
    let min = parse_duration(&GRAMMAR, "min_hold", value)?;
    if min > MAX_TTL {
        return Err(syn::Error::new(
            value.span(),
            format!(
                "`min_hold` of {} is longer than the 7 days maximum: the lock is kept by its \
                 key's expiry, which cannot be longer than the longest ttl",
                DurationText(min)
            ),
        ));
    }
    Ok(min)
}

/// `max_hold`: a duration above zero.
fn parse_max_hold(value: &Expr) -> syn::Result<Duration> {
    let max = parse_duration(&GRAMMAR, "max_hold", value)?;
    if max.is_zero() {
        return Err(syn::Error::new(
            value.span(),
            "`max_hold` of 0s would stop renewing at once: give a duration above zero, or \
             leave it out for no limit",
        ));
    }
    Ok(max)
}

fn parse_on_busy(value: &Expr) -> syn::Result<OnBusy> {
    parse_choice(
        value,
        &[
            ("wait", OnBusy::Wait),
            ("error", OnBusy::Error),
            ("skip", OnBusy::Skip),
        ],
        "expected `on_busy = wait` (wait up to `wait` for the lock, the default), \
         `on_busy = error` (fail at once with `LockError::Busy`) or `on_busy = skip` (return \
         at once without running the function: `Ok(())` or `Ok(None)`)",
    )
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
        assert!(args.watchdog && args.reentrant);
        assert!(!args.fenced, "lazy by default");
        assert!(!args.fair, "not fair by default");
        assert_eq!(args.on_busy, OnBusy::Wait);
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
            fenced = true,
            fair = true,
            crate = "::locks",
        ))
        .unwrap();
        assert!(args.fenced && args.fair);
        assert_eq!(args.min_hold, Some(Duration::from_millis(800)));
        assert_eq!(args.max_hold, Some(Duration::from_secs(60)));
        assert_eq!(args.ttl, Duration::from_secs(90));
        assert_eq!(args.wait, Duration::from_millis(250));
        assert!(!args.watchdog && !args.reentrant);
        assert_eq!(args.on_busy, OnBusy::Wait);
        assert!(args.client.is_some());
        let krate = args.krate.unwrap();
        assert_eq!(quote!(#krate).to_string(), ":: locks");
        let args = parse(quote!(key = "k", on_busy = error)).unwrap();
        assert_eq!(args.on_busy, OnBusy::Error);
        let args = parse(quote!(key = "k", on_busy = skip)).unwrap();
        assert_eq!(args.on_busy, OnBusy::Skip);
        let args = parse(quote!(key = "k", on_busy = "skip")).unwrap();
        assert_eq!(
            args.on_busy,
            OnBusy::Skip,
            "the string form is accepted too"
        );
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
                .contains("`wait` has no effect with `on_busy = error`")
        );
        assert!(
            messages(quote!(key = "a", on_busy = skip, wait = "1s"))[0]
                .contains("`wait` has no effect with `on_busy = skip`")
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
