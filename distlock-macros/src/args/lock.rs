//! The arguments of `#[distributed_lock]`: its own (`key`, `client`, `on_busy`, `crate`)
//! and every lock option of the grammar crate's table, read by the kind of its value.

use std::time::Duration;

use distlock_grammar::{
    DurationText, LOCK_OPTIONS, LockOptionSpec, MAX_TTL, OptionKind, OptionValue, check_ttl,
};
use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, Lit};

use super::{
    Grammar, Key, parse_bool, parse_choice, parse_crate, parse_duration, parse_key, parse_raw,
    string_literal, unwrap_group, walk,
};
use crate::errors::Errors;

/// What `#[distributed_lock]` accepts: its own arguments, and after `key` every lock option.
pub(crate) const GRAMMAR: Grammar = Grammar {
    names: &["key", "client", "on_busy", "crate"],
    options: LOCK_OPTIONS,
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

/// The arguments, checked.
pub(crate) struct LockArgs {
    pub(crate) key: Key,
    /// `client = <expr>`: an expression of type `&distlock::Client`.
    pub(crate) client: Option<Expr>,
    pub(crate) on_busy: OnBusy,
    /// The lock options given, in the order written; the others keep `LockOptions`'
    /// defaults, except `reentrant`, which the macro turns on.
    pub(crate) options: Vec<(&'static LockOptionSpec, OptionValue)>,
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
        let mut client = None;
        let mut on_busy: Option<(OnBusy, Span)> = None;
        let mut krate = None;
        let mut options = Vec::new();
        let mut spans = Vec::new();

        let seen = walk(raw, g, &mut errors, |label, name, value| match label {
            "key" => parse_key(g, &value).map(|k| key = Some(k)),
            "client" => {
                client = Some(value);
                Ok(())
            }
            "on_busy" => parse_on_busy(&value).map(|b| on_busy = Some((b, value.span()))),
            "crate" => parse_crate(g, &value).map(|p| krate = Some(p)),
            _ => {
                let Some(option) = g.option(label) else {
                    return Ok(());
                };
                let parsed = parse_option(option, &value)?;
                options.push((option, parsed));
                spans.push((option.name, name.span(), value.span()));
                Ok(())
            }
        });
        let duration = |name: &str| {
            options
                .iter()
                .zip(&spans)
                .find_map(|((option, value), (_, name_span, span))| match value {
                    OptionValue::Duration(d) if option.name == name => {
                        Some((*d, *name_span, *span))
                    }
                    _ => None,
                })
        };

        if let (Some((mode @ (OnBusy::Error | OnBusy::Skip), _)), Some((_, wait_span, _))) =
            (on_busy, duration("wait"))
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
        if let (Some((min, _, min_span)), Some((max, _, _))) =
            (duration("min_hold"), duration("max_hold"))
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
            client,
            on_busy: on_busy.map_or(OnBusy::Wait, |(b, _)| b),
            options,
            krate,
        })
    }

    /// The value given for the lock option `name`, if any.
    #[cfg(test)]
    pub(crate) fn option(&self, name: &str) -> Option<OptionValue> {
        self.options
            .iter()
            .find(|(option, _)| option.name == name)
            .map(|(_, value)| value.clone())
    }
}

/// How one of the attribute's own arguments is written, for "needs a value" errors.
fn example(name: &str) -> &'static str {
    match name {
        "key" => "`key = \"order:{order_id}\"`",
        "client" => "`client = &self.locks` (an expression of type `&distlock::Client`)",
        "on_busy" => "`on_busy = wait`, `on_busy = error` or `on_busy = skip`",
        _ => "`crate = \"::distlock\"`",
    }
}

/// A lock option's value, read as its kind says, and checked where the compiler can say
/// more than the runtime would (the ttl's range, `min_hold` and `max_hold`).
fn parse_option(option: &LockOptionSpec, value: &Expr) -> syn::Result<OptionValue> {
    let name = option.name;
    Ok(match option.kind {
        OptionKind::Flag => OptionValue::Flag(parse_bool(&GRAMMAR, name, value)?),
        OptionKind::Count => OptionValue::Count(parse_count(option, value)?),
        OptionKind::Text => OptionValue::Text(string_literal(&GRAMMAR, name, value)?.value()),
        kind => {
            let forever = kind == OptionKind::DurationOrForever && is_forever(value);
            let d = if forever {
                Duration::MAX
            } else {
                parse_duration(&GRAMMAR, name, value)?
            };
            match name {
                "ttl" => check_lock_ttl(d, value)?,
                "min_hold" => check_min_hold(d, value)?,
                "max_hold" => check_max_hold(d, value)?,
                _ => {}
            }
            OptionValue::Duration(d)
        }
    })
}

/// `"forever"`.
fn is_forever(value: &Expr) -> bool {
    matches!(unwrap_group(value), Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) if s.value().trim() == "forever")
}

/// A whole number from 0 to `u32::MAX`, written as an integer literal.
fn parse_count(option: &LockOptionSpec, value: &Expr) -> syn::Result<u32> {
    match unwrap_group(value) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(n), ..
        }) => n.base10_parse::<u32>().map_err(|_| {
            syn::Error::new(
                n.span(),
                format!("`{}` is a whole number from 0 to {}", option.name, u32::MAX),
            )
        }),
        _ => Err(syn::Error::new(
            value.span(),
            format!("expected {}", option.example),
        )),
    }
}

fn check_lock_ttl(ttl: Duration, value: &Expr) -> syn::Result<()> {
    let out_of_range = match check_ttl(ttl) {
        Ok(_) => return Ok(()),
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
fn check_min_hold(min: Duration, value: &Expr) -> syn::Result<()> {
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
    Ok(())
}

/// `max_hold`: a duration above zero.
fn check_max_hold(max: Duration, value: &Expr) -> syn::Result<()> {
    if max.is_zero() {
        return Err(syn::Error::new(
            value.span(),
            "`max_hold` of 0s would stop renewing at once: give a duration above zero, or \
             leave it out for no limit",
        ));
    }
    Ok(())
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
        assert!(
            args.options.is_empty(),
            "LockOptions' defaults (and the expansion's)"
        );
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
            store_patience = "2s",
            max_attempts = 3,
            crate = "::locks",
        ))
        .unwrap();
        let d = |d| Some(OptionValue::Duration(d));
        let flag = |on| Some(OptionValue::Flag(on));
        assert_eq!(
            (args.option("fenced"), args.option("fair")),
            (flag(true), flag(true))
        );
        assert_eq!(args.option("min_hold"), d(Duration::from_millis(800)));
        assert_eq!(args.option("max_hold"), d(Duration::from_secs(60)));
        assert_eq!(args.option("ttl"), d(Duration::from_secs(90)));
        assert_eq!(args.option("wait"), d(Duration::from_millis(250)));
        assert_eq!(args.option("store_patience"), d(Duration::from_secs(2)));
        assert_eq!(args.option("max_attempts"), Some(OptionValue::Count(3)));
        assert_eq!(args.option("watchdog"), flag(false));
        assert_eq!(args.option("reentrant"), flag(false));
        let forever = parse(quote!(key = "k", wait = "forever")).unwrap();
        assert_eq!(forever.option("wait"), d(Duration::MAX));
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

    /// Every option of the table is an argument, read by the kind of its value.
    #[test]
    fn every_option_of_the_table_is_an_argument() {
        let mut tokens = quote!(key = "k");
        for option in LOCK_OPTIONS {
            let name = syn::Ident::new(option.name, Span::call_site());
            let value = match option.kind {
                OptionKind::Flag => quote!(true),
                OptionKind::Count => quote!(3),
                OptionKind::Text => quote!("text"),
                _ => quote!("20s"),
            };
            tokens.extend(quote!(, #name = #value));
        }
        let args = parse(tokens).unwrap();
        let names: Vec<&str> = args.options.iter().map(|(o, _)| o.name).collect();
        let table: Vec<&str> = LOCK_OPTIONS.iter().map(|o| o.name).collect();
        assert_eq!(names, table);
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
        assert_eq!(
            args.option("min_hold"),
            Some(OptionValue::Duration(Duration::ZERO)),
            "zero, which the runtime takes as no minimum"
        );
        assert!(
            messages(quote!(key = "a", max_attempts = "3"))[0]
                .contains("expected `max_attempts = 3`")
        );
        assert!(
            messages(quote!(key = "a", max_attempts = 5000000000))[0]
                .contains("whole number from 0")
        );
        assert!(
            messages(quote!(key = "a", ttl = "forever"))[0]
                .starts_with("invalid `ttl` \"forever\"")
        );
        assert!(messages(quote!("order:{id}"))[0].contains("give the key as `key = \"...\"`"));
        assert!(messages(quote!(key "a"))[0].contains("expected `,` between arguments"));
        assert!(messages(quote!(key = "a", 5))[0].contains("expected an argument name"));
    }
}
