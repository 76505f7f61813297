//! The arguments of `#[rate_limit]`.

use std::time::Duration;

use distlock_grammar::{MAX_LOCKOUT_STEPS, MAX_POLICIES, check_lockout, check_max_wait};
use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, Lit, LitStr, UnOp};

use super::{
    Grammar, Key, parse_choice, parse_crate, parse_duration, parse_key, parse_raw, string_literal,
    unwrap_group, walk,
};
use crate::errors::Errors;
use crate::policy::{self, PolicyText};

/// What `#[rate_limit]` accepts.
pub(crate) const GRAMMAR: Grammar = Grammar {
    names: &[
        "policy",
        "key",
        "cost",
        "on_limit",
        "max_wait",
        "lockout",
        "lockout_memory",
        "client",
        "crate",
    ],
    options: &[],
    example,
    key_names: "rate-limit subject",
};

/// What a call does when a policy denies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnLimit {
    /// Fail at once with `RateLimitError::Limited` (the default).
    Error,
    /// Wait for the call's turn, up to `max_wait`.
    Wait,
}

/// A call's cost.
pub(crate) enum Cost {
    /// A literal, checked against the policies.
    Units(u32),
    /// An expression of an unsigned integer type, evaluated when the function is called.
    Expr(Expr),
}

/// The arguments, checked and with defaults filled in.
pub(crate) struct LimitArgs {
    /// At least one, with distinct names.
    pub(crate) policies: Vec<PolicyText>,
    /// `None`: one budget for every call (the subject is the first policy's name).
    pub(crate) key: Option<Key>,
    pub(crate) cost: Cost,
    /// `Some(max_wait)` with `on_limit = wait`; `None` fails at once.
    pub(crate) max_wait: Option<Duration>,
    /// `lockout = [..]`: the blocks of every policy's lockout, and `lockout_memory`.
    pub(crate) lockout: Option<(Vec<Duration>, Option<Duration>)>,
    /// `client = <expr>`: an expression of type `&distlock::Client`.
    pub(crate) client: Option<Expr>,
    /// `crate = "path"`; `None` means `::distlock`.
    pub(crate) krate: Option<syn::Path>,
}

impl LimitArgs {
    /// Parses and checks the attribute's arguments.
    pub(crate) fn parse(args: TokenStream) -> syn::Result<Self> {
        let raw = parse_raw(args, &GRAMMAR)?;
        let g = &GRAMMAR;
        let mut errors = Errors::default();
        let mut policies: Option<Vec<(PolicyText, Span)>> = None;
        let mut key = None;
        let mut cost: Option<(Cost, Span)> = None;
        let mut on_limit: Option<(OnLimit, Span)> = None;
        let mut max_wait: Option<(Duration, Span)> = None;
        let mut lockout: Option<Vec<Duration>> = None;
        let mut lockout_memory: Option<(Duration, Span)> = None;
        let mut client = None;
        let mut krate = None;

        let seen = walk(raw, g, &mut errors, |label, name, value| match label {
            "policy" => parse_policies(&value).map(|p| policies = Some(p)),
            "key" => parse_key(g, &value).map(|k| key = Some(k)),
            "cost" => {
                let span = value.span();
                parse_cost(value).map(|c| cost = Some((c, span)))
            }
            "on_limit" => parse_on_limit(&value).map(|o| on_limit = Some((o, value.span()))),
            "max_wait" => parse_max_wait(&value).map(|d| max_wait = Some((d, name.span()))),
            "lockout" => parse_lockout(&value).map(|steps| lockout = Some(steps)),
            "lockout_memory" => parse_lockout_length(&value, "lockout_memory")
                .map(|d| lockout_memory = Some((d, name.span()))),
            "client" => {
                client = Some(value);
                Ok(())
            }
            _ => parse_crate(g, &value).map(|p| krate = Some(p)),
        });

        // An invalid `max_wait` was reported where it was found.
        let max_wait_given = seen.iter().any(|s| s == "max_wait");
        match (on_limit, max_wait) {
            (Some((OnLimit::Wait, span)), None) if !max_wait_given => errors.push(syn::Error::new(
                span,
                "`on_limit = wait` needs `max_wait`, the longest a call may wait for its turn, \
                 e.g. `max_wait = \"5s\"`",
            )),
            (None | Some((OnLimit::Error, _)), Some((_, span))) => {
                errors.push(syn::Error::new(
                    span,
                    "`max_wait` has no effect without `on_limit = wait`: a limited call fails \
                     at once unless it waits; add `on_limit = wait` or remove `max_wait`",
                ));
            }
            _ => {}
        }
        if let Some((_, span)) = lockout_memory
            && !seen.iter().any(|s| s == "lockout")
        {
            errors.push(syn::Error::new(
                span,
                "`lockout_memory` has no effect without `lockout`, the blocks a breach earns, \
                 e.g. `lockout = [\"1min\", \"5min\", \"1h\"]`",
            ));
        }
        if let (Some((Cost::Units(units), span)), Some(policies)) = (&cost, &policies)
            && let Some(tight) = policies.iter().min_by_key(|(p, _)| p.limit())
            && *units > tight.0.limit()
        {
            errors.push(syn::Error::new(
                *span,
                format!(
                    "a cost of {units} can never pass policy `{}`, which allows at most {} at \
                     once: raise its burst or lower the cost",
                    tight.0.name,
                    tight.0.limit()
                ),
            ));
        }
        if !seen.iter().any(|s| s == "policy") {
            errors.push(syn::Error::new(
                Span::call_site(),
                "missing `policy`: #[rate_limit] needs the limit it enforces, e.g. \
                 #[rate_limit(policy = \"api: 100/s burst 20\")]",
            ));
        }
        errors.finish()?;
        // An invalid policy was reported where it was found and a missing one just above.
        let policies = policies.ok_or_else(|| syn::Error::new(Span::call_site(), "invalid"))?;
        Ok(Self {
            policies: policies.into_iter().map(|(p, _)| p).collect(),
            key,
            cost: cost.map_or(Cost::Units(1), |(c, _)| c),
            max_wait: max_wait.map(|(d, _)| d),
            lockout: lockout.map(|steps| (steps, lockout_memory.map(|(d, _)| d))),
            client,
            krate,
        })
    }
}

/// How an argument is written, for "needs a value" errors.
fn example(name: &str) -> &'static str {
    match name {
        "policy" => {
            "`policy = \"api: 100/s burst 20\"`, or several at once: `policy = [\"per-second: \
             10/s\", \"per-hour: fixed-window 1000/h\"]`"
        }
        "key" => "`key = \"user:{user_id}\"`",
        "cost" => "`cost = 5`, or an expression such as `cost = items.len()`",
        "on_limit" => "`on_limit = error` or `on_limit = wait`",
        "max_wait" => "`max_wait = \"5s\"`",
        "lockout" => {
            "`lockout = \"15min\"`, or escalating: `lockout = [\"1min\", \"5min\", \"1h\"]`"
        }
        "lockout_memory" => "`lockout_memory = \"24h\"`",
        "client" => "`client = &self.limits` (an expression of type `&distlock::Client`)",
        _ => "`crate = \"::distlock\"`",
    }
}

/// `"name: [algorithm] rate"`, or an array of them with distinct names.
fn parse_policies(value: &Expr) -> syn::Result<Vec<(PolicyText, Span)>> {
    let literals: Vec<&LitStr> = match unwrap_group(value) {
        Expr::Array(array) => {
            let mut errors = Errors::default();
            let literals: Vec<&LitStr> = array
                .elems
                .iter()
                .filter_map(|elem| {
                    string_literal(&GRAMMAR, "policy", elem)
                        .map_err(|e| errors.push(e))
                        .ok()
                })
                .collect();
            errors.finish()?;
            if literals.is_empty() {
                return Err(syn::Error::new(
                    value.span(),
                    format!("`policy` needs at least one policy: {}", example("policy")),
                ));
            }
            if literals.len() > MAX_POLICIES {
                return Err(syn::Error::new(
                    value.span(),
                    format!(
                        "{} policies given; one call is checked against at most {MAX_POLICIES}",
                        literals.len()
                    ),
                ));
            }
            literals
        }
        _ => vec![string_literal(&GRAMMAR, "policy", value)?],
    };
    let mut errors = Errors::default();
    let mut policies: Vec<(PolicyText, Span)> = Vec::new();
    for lit in literals {
        match policy::parse(&lit.value()) {
            Ok(p) => {
                if policies.iter().any(|(q, _)| q.name == p.name) {
                    errors.push(syn::Error::new(
                        lit.span(),
                        format!(
                            "two policies are named `{}`: the name is part of their keys, so \
                             each policy of a call needs its own",
                            p.name
                        ),
                    ));
                } else {
                    policies.push((p, lit.span()));
                }
            }
            Err(message) => errors.push(syn::Error::new(lit.span(), message)),
        }
    }
    errors.finish()?;
    Ok(policies)
}

/// A literal cost of at least 1, or any other expression (its type is left to the compiler).
fn parse_cost(value: Expr) -> syn::Result<Cost> {
    let literal = match unwrap_group(&value) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => Some(int.base10_parse::<u32>().map_err(|_| int.span())),
        Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => {
            if let Expr::Lit(ExprLit {
                lit: Lit::Int(_), ..
            }) = unwrap_group(&unary.expr)
            {
                Some(Err(value.span()))
            } else {
                None
            }
        }
        Expr::Lit(_) => Some(Err(value.span())),
        _ => None,
    };
    match literal {
        Some(Ok(0)) => Err(syn::Error::new(
            value.span(),
            "a cost of 0 would let every call through without counting it: give a cost of at \
             least 1, or leave `cost` out for 1",
        )),
        Some(Ok(units)) => Ok(Cost::Units(units)),
        Some(Err(span)) => Err(syn::Error::new(
            span,
            format!(
                "a cost is a whole number of units from 1 to {}: {}",
                u32::MAX,
                example("cost")
            ),
        )),
        None => Ok(Cost::Expr(value)),
    }
}

fn parse_on_limit(value: &Expr) -> syn::Result<OnLimit> {
    parse_choice(
        value,
        &[("error", OnLimit::Error), ("wait", OnLimit::Wait)],
        "expected `on_limit = error` (fail at once with `RateLimitError::Limited`, the \
         default) or `on_limit = wait` (wait for the call's turn, up to `max_wait`)",
    )
}

/// `lockout`: one block or an array of 1 to 8 strictly longer ones, each 1 ms to 366 days.
fn parse_lockout(value: &Expr) -> syn::Result<Vec<Duration>> {
    let elems: Vec<&Expr> = match unwrap_group(value) {
        Expr::Array(array) => array.elems.iter().collect(),
        _ => vec![value],
    };
    if elems.is_empty() || elems.len() > MAX_LOCKOUT_STEPS {
        return Err(syn::Error::new(
            value.span(),
            format!(
                "`lockout` takes 1 to {MAX_LOCKOUT_STEPS} blocks, got {}: {}",
                elems.len(),
                example("lockout")
            ),
        ));
    }
    let mut errors = Errors::default();
    let mut steps: Vec<Duration> = Vec::new();
    for elem in elems {
        match parse_lockout_length(elem, "lockout") {
            Ok(step) => {
                if let Some(&previous) = steps.last()
                    && step <= previous
                {
                    errors.push(syn::Error::new(
                        elem.span(),
                        format!(
                            "each block of a lockout is longer than the one before: {step:?} \
                             follows {previous:?}"
                        ),
                    ));
                }
                steps.push(step);
            }
            Err(err) => errors.push(err),
        }
    }
    errors.finish()?;
    Ok(steps)
}

/// A lockout's block or memory: 1 ms to 366 days.
fn parse_lockout_length(value: &Expr, name: &str) -> syn::Result<Duration> {
    let length = parse_duration(&GRAMMAR, name, value)?;
    check_lockout(length).map_err(|_| {
        syn::Error::new(
            value.span(),
            format!("`{name}` of {length:?} is out of range: it must be between 1ms and 366 days"),
        )
    })
}

/// `max_wait`: above zero, at most 366 days (the bound `LimiterOptions::check` holds too, from
/// the same grammar crate; zero is this attribute's own rule: it would make
/// `on_limit = wait` fail at once).
fn parse_max_wait(value: &Expr) -> syn::Result<Duration> {
    let wait = parse_duration(&GRAMMAR, "max_wait", value)?;
    if wait.is_zero() {
        return Err(syn::Error::new(
            value.span(),
            "`max_wait` of 0s never waits: use `on_limit = error` to fail at once, or give a \
             duration above zero",
        ));
    }
    if check_max_wait(wait).is_err() {
        let text = string_literal(&GRAMMAR, "max_wait", value)?.value();
        return Err(syn::Error::new(
            value.span(),
            format!(
                "`max_wait` of {text:?} is longer than the 366 days maximum: no turn is \
                 reserved further ahead"
            ),
        ));
    }
    Ok(wait)
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;
    use crate::policy::Algorithm;

    fn parse(tokens: TokenStream) -> syn::Result<LimitArgs> {
        LimitArgs::parse(tokens)
    }

    fn messages(tokens: TokenStream) -> Vec<String> {
        match parse(tokens) {
            Ok(_) => vec![],
            Err(err) => err.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn defaults() {
        let args = parse(quote!(policy = "api: 100/s burst 20")).unwrap();
        assert_eq!(args.policies.len(), 1);
        let p = &args.policies[0];
        assert_eq!(
            (p.name.as_str(), p.algorithm, p.count, p.burst),
            ("api", Algorithm::Gcra, 100, 20)
        );
        assert_eq!(p.period, Duration::from_secs(1));
        assert!(args.key.is_none() && args.client.is_none() && args.krate.is_none());
        assert!(matches!(args.cost, Cost::Units(1)));
        assert_eq!(args.max_wait, None);
    }

    #[test]
    fn every_argument() {
        let args = parse(quote!(
            policy = ["per-second: 10/s", "per-hour: fixed-window 1000/h"],
            key = "user:{id}",
            cost = items.len(),
            on_limit = wait,
            max_wait = "1m 30s",
            client = &self.limits,
            crate = "::limits",
        ))
        .unwrap();
        assert_eq!(args.policies.len(), 2);
        assert_eq!(args.policies[1].algorithm, Algorithm::FixedWindow);
        assert!(args.key.is_some() && args.client.is_some() && args.krate.is_some());
        assert!(matches!(args.cost, Cost::Expr(_)));
        assert_eq!(args.max_wait, Some(Duration::from_secs(90)));
        let args = parse(quote!(policy = "a: 10/s", cost = 10, on_limit = "error")).unwrap();
        assert!(matches!(args.cost, Cost::Units(10)));
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let msgs = messages(quote!(
            key = "",
            limit = "1/s",
            on_limit = wait,
            cost = 0,
            cost = 2
        ));
        assert_eq!(msgs.len(), 6, "{msgs:#?}");
        assert!(msgs[0].starts_with("`key` is empty: give the rate-limit subject a name"));
        assert!(msgs[1].starts_with("unknown argument `limit`; accepted arguments: `policy`"));
        assert!(msgs[2].starts_with("a cost of 0 would let every call through"));
        assert!(msgs[3].contains("`cost` is given more than once"));
        assert!(msgs[4].starts_with("`on_limit = wait` needs `max_wait`"));
        assert!(msgs[5].starts_with("missing `policy`"));
    }

    #[test]
    fn bad_values() {
        let first = |t: TokenStream| messages(t).remove(0);
        assert!(first(quote!(policy = api)).contains("`policy` takes a string literal"));
        assert!(first(quote!(policy = "100/s")).contains("no name"));
        assert!(first(quote!(policy = "api: 100/x")).contains("unknown unit `x`"));
        assert!(first(quote!(policy = [])).contains("needs at least one policy"));
        assert!(first(quote!(policy = ["a: 1/s", 5])).contains("takes a string literal"));
        assert!(
            first(quote!(policy = ["a: 1/s", "a: 10/h"])).starts_with("two policies are named `a`")
        );
        let nine = (0..9).map(|i| format!("p{i}: 1/s"));
        assert!(first(quote!(policy = [#(#nine),*])).starts_with("9 policies given"));
        assert!(
            first(quote!(policy = ["a: 10/s burst 5", "b: 2/s"], cost = 3))
                .starts_with("a cost of 3 can never pass policy `b`, which allows at most 2")
        );
        assert!(first(quote!(policy = "a: 1/s", cost = -1)).contains("whole number of units"));
        assert!(first(quote!(policy = "a: 1/s", cost = 1.5)).contains("whole number of units"));
        assert!(
            first(quote!(policy = "a: 1/s", cost = 4294967296)).contains("whole number of units")
        );
        assert!(
            first(quote!(policy = "a: 1/s", on_limit = queue))
                .starts_with("expected `on_limit = error`")
        );
        assert!(
            first(quote!(policy = "a: 1/s", max_wait = "1s"))
                .starts_with("`max_wait` has no effect")
        );
        assert!(
            first(quote!(policy = "a: 1/s", on_limit = error, max_wait = "1s"))
                .starts_with("`max_wait` has no effect")
        );
        assert!(
            first(quote!(policy = "a: 1/s", on_limit = wait, max_wait = "0s"))
                .starts_with("`max_wait` of 0s never waits")
        );
        let msgs = messages(quote!(
            policy = "a: 1/s",
            on_limit = wait,
            max_wait = "367days"
        ));
        assert_eq!(
            msgs.len(),
            1,
            "no \"needs max_wait\" for an invalid one: {msgs:#?}"
        );
        assert!(msgs[0].starts_with("`max_wait` of \"367days\" is longer than the 366 days"));
        assert!(first(quote!(policy)).contains("`policy` needs a value"));
    }

    #[test]
    fn lockouts() {
        let args = parse(quote!(policy = "login: 5/min", lockout = "15min")).unwrap();
        assert_eq!(args.lockout, Some((vec![Duration::from_secs(900)], None)));
        let args = parse(quote!(
            policy = "login: 5/min",
            lockout = ["1min", "5min", "1h"],
            lockout_memory = "12h"
        ))
        .unwrap();
        let (steps, memory) = args.lockout.unwrap();
        assert_eq!(steps.len(), 3);
        assert_eq!(memory, Some(Duration::from_secs(12 * 3600)));

        let first = |t: TokenStream| messages(t).remove(0);
        assert!(
            first(quote!(policy = "a: 1/s", lockout = [])).starts_with("`lockout` takes 1 to 8")
        );
        let nine = (1..=9).map(|i| format!("{i}min"));
        assert!(
            first(quote!(policy = "a: 1/s", lockout = [#(#nine),*]))
                .starts_with("`lockout` takes 1 to 8 blocks, got 9")
        );
        assert!(
            first(quote!(policy = "a: 1/s", lockout = ["5min", "1min"]))
                .starts_with("each block of a lockout is longer than the one before")
        );
        assert!(first(quote!(policy = "a: 1/s", lockout = "0s")).contains("out of range"));
        assert!(first(quote!(policy = "a: 1/s", lockout = "400days")).contains("out of range"));
        assert!(
            first(quote!(policy = "a: 1/s", lockout = "soon")).starts_with("invalid `lockout`")
        );
        assert!(
            first(quote!(policy = "a: 1/s", lockout_memory = "1h"))
                .starts_with("`lockout_memory` has no effect without `lockout`")
        );
    }
}
