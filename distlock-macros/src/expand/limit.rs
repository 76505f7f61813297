//! The expansion of `#[rate_limit]`. For
//!
//! ```text
//! #[rate_limit(policy = "api: 100/s burst 20", key = "user:{user}", cost = items.len())]
//! async fn import(user: u64, items: Vec<Item>) -> Result<usize, AppError> { BODY }
//! ```
//!
//! the function keeps its signature and gets this body (see the parent module for why it is
//! shaped so):
//!
//! ```text
//! let __distlock_key: String = { "user:" + escaped `user` };
//! let __distlock_client: Option<Client> = None;
//! let __distlock_cost: u32 = ::distlock::__private::cost(items.len());
//! let __distlock_site: &'static RateLimitSite = {
//!     static SITE: RateLimitSite = RateLimitSite::new(LimitSpec {
//!         policies: &[PolicySpec { name: "api", algorithm: Gcra, count: 100, period: 1s, burst: 20 }],
//!         max_wait: None,
//!         lockout: None, // or Some(LockoutSpec { steps: &[1min, 5min], memory: None })
//!     });
//!     &SITE
//! };
//! ::distlock::__private::rate_limited(__distlock_site, __distlock_client, __distlock_key,
//!     __distlock_cost, async move {
//!         if false { return unreachable_output::<Result<usize, AppError>>(); }
//!         BODY
//!     }).await
//! ```
//!
//! The static is the call site's: it keeps the limiter built for each client the site is
//! called with, so that the limiter's deny cache, circuit breaker and in-flight limit serve
//! every call instead of one (a generic function shares it across its instances, which is
//! what a call site means here).

use proc_macro2::{Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned as _;

use super::{
    Attribute, Locals, body_block, client_expr, duration, krate, output_span, render_key, respan,
    with_body,
};
use crate::args::Key;
use crate::args::limit::{Cost, LimitArgs};
use crate::item::{AnnotatedFn, Needs};
use crate::policy::{PolicyText, variant};

/// `#[rate_limit]`: what it needs of the function, how it reads its arguments, and what it
/// generates.
const ATTRIBUTE: Attribute<LimitArgs> = Attribute {
    needs: Needs {
        attribute: "#[rate_limit]",
        why_async: "a limited call may wait for its turn, and the check is a round trip to the store",
        error: "distlock::RateLimitError",
        why_result: "a limited call fails (and so can the check)",
    },
    parse: LimitArgs::parse,
    key,
    generate,
};

fn key(args: &LimitArgs) -> Option<&Key> {
    args.key.as_ref()
}

/// Expands the attribute; on error, the item unchanged and the errors.
pub(crate) fn rate_limit(args: TokenStream, item: TokenStream) -> TokenStream {
    ATTRIBUTE.expand_or_keep(args, item)
}

fn generate(args: &LimitArgs, func: &AnnotatedFn) -> TokenStream {
    let krate = krate(args.krate.as_ref());
    let Locals {
        key: key_var,
        client: client_var,
    } = Locals::new();
    let cost_var = format_ident!("__distlock_cost", span = Span::mixed_site());
    let site_var = format_ident!("__distlock_site", span = Span::mixed_site());

    let key = match &args.key {
        Some(key) => render_key(key, &krate, &key_var),
        // One budget for every call: the first policy's name is the subject.
        None => {
            let name = &args.policies[0].name;
            quote!(::std::string::String::from(#name))
        }
    };
    let client = client_expr(args.client.as_ref(), &krate);
    let cost = match &args.cost {
        Cost::Units(units) => {
            let units = Literal::u32_suffixed(*units);
            quote!(#units)
        }
        // The conversion has the expression's span, so "`i64` is not a cost" points at it.
        Cost::Expr(expr) => {
            let convert = respan(quote!(#krate::__private::cost), expr.span());
            quote_spanned!(expr.span()=> #convert(#expr))
        }
    };
    let spec = spec(args, &krate);
    let body = body_block(func, &krate);
    let output_span = output_span(func);
    let runner = respan(quote!(#krate::__private::rate_limited), output_span);
    let call = quote_spanned! {output_span=>
        #runner(#site_var, #client_var, #key_var, #cost_var, #body).await
    };
    with_body(
        func,
        &quote! {
            let #key_var: ::std::string::String = #key;
            let #client_var: ::core::option::Option<#krate::Client> = #client;
            let #cost_var: u32 = #cost;
            let #site_var: &'static #krate::__private::RateLimitSite = {
                static SITE: #krate::__private::RateLimitSite =
                    #krate::__private::RateLimitSite::new(#spec);
                &SITE
            };
            #call
        },
    )
}

/// The `LimitSpec` literal.
fn spec(args: &LimitArgs, krate: &TokenStream) -> TokenStream {
    let policies = args.policies.iter().map(|p| policy_spec(p, krate));
    let max_wait = match args.max_wait {
        Some(d) => {
            let d = duration(d, krate);
            quote!(::core::option::Option::Some(#d))
        }
        None => quote!(::core::option::Option::None),
    };
    let lockout = match &args.lockout {
        Some((steps, memory)) => {
            let steps = steps.iter().map(|d| duration(*d, krate));
            let memory = match memory {
                Some(d) => {
                    let d = duration(*d, krate);
                    quote!(::core::option::Option::Some(#d))
                }
                None => quote!(::core::option::Option::None),
            };
            quote!(::core::option::Option::Some(#krate::__private::LockoutSpec {
                steps: &[#(#steps),*],
                memory: #memory,
            }))
        }
        None => quote!(::core::option::Option::None),
    };
    quote! {
        #krate::__private::LimitSpec {
            policies: &[#(#policies),*],
            max_wait: #max_wait,
            lockout: #lockout,
        }
    }
}

/// One `PolicySpec` literal.
fn policy_spec(policy: &PolicyText, krate: &TokenStream) -> TokenStream {
    let PolicyText {
        name,
        algorithm,
        count,
        period,
        burst,
    } = policy;
    let algorithm = format_ident!("{}", variant(*algorithm));
    let period = duration(*period, krate);
    quote! {
        #krate::__private::PolicySpec {
            name: #name,
            algorithm: #krate::__private::Algorithm::#algorithm,
            count: #count,
            period: #period,
            burst: #burst,
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    #[test]
    fn keeps_the_signature_and_checks_before_the_body() {
        let out = ATTRIBUTE.expanded(
            quote!(
                policy = ["api: 100/s burst 20", "daily: fixed-window 1000/d"],
                key = "user:{user}",
                on_limit = wait,
                max_wait = "2s"
            ),
            quote! {
                /// Docs.
                pub async fn import(user: u64, items: Vec<u8>) -> Result<usize, AppError> {
                    Ok(items.len())
                }
            },
        );
        assert!(
            out.starts_with(
                "# [doc = r\" Docs.\"] pub async fn import (user : u64 , items : Vec < u8 >) \
                 -> Result < usize , AppError > {"
            ),
            "{out}"
        );
        assert!(
            out.contains("push_key_part (& mut __distlock_key , & user)"),
            "{out}"
        );
        assert!(out.contains("let __distlock_cost : u32 = 1u32 ;"), "{out}");
        assert!(
            out.contains(
                "name : \"api\" , algorithm : :: distlock :: __private :: Algorithm :: Gcra , \
                 count : 100u32 , period : :: distlock :: __private :: __Duration :: new (1u64 \
                 , 0u32) , burst : 20u32"
            ),
            "{out}"
        );
        assert!(out.contains("Algorithm :: FixedWindow"), "{out}");
        assert!(
            out.contains(
                "max_wait : :: core :: option :: Option :: Some (:: distlock :: __private :: \
                 __Duration :: new (2u64 , 0u32))"
            ),
            "{out}"
        );
        assert!(out.contains("static SITE"), "{out}");
        assert!(
            out.contains("__private :: rate_limited (__distlock_site"),
            "{out}"
        );
        assert!(out.contains("Ok (items . len ())"), "{out}");
    }

    #[test]
    fn without_a_key_every_call_shares_the_first_policy_budget() {
        let out = ATTRIBUTE.expanded(
            quote!(policy = "partner: 50/s", cost = batch.len()),
            quote!(
                async fn send(batch: &[u8]) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            out.contains("let __distlock_key : :: std :: string :: String = :: std :: string :: String :: from (\"partner\")"),
            "{out}"
        );
        assert!(
            out.contains(":: distlock :: __private :: cost (batch . len ())"),
            "{out}"
        );
        assert!(out.contains("max_wait : :: core :: option :: Option :: None"));
    }

    #[test]
    fn crate_path_replaces_every_distlock_path() {
        let out = ATTRIBUTE.expanded(
            quote!(
                policy = "a: 1/s",
                crate = "::limits",
                client = &self.c,
                cost = self.n
            ),
            quote!(
                async fn f(&self) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(!out.contains("distlock ::"), "{out}");
        assert!(
            out.contains(":: limits :: __private :: rate_limited"),
            "{out}"
        );
    }

    #[test]
    fn argument_and_signature_errors_are_reported_together() {
        let msgs = ATTRIBUTE.refused(
            quote!(policy = "api: 1/s", key = "{usr}"),
            quote!(
                fn f(user: u64) -> u64 {}
            ),
        );
        assert_eq!(msgs.len(), 3, "{msgs:#?}");
        assert!(msgs[0].starts_with("#[rate_limit] can only be applied to an `async fn`"));
        assert!(msgs[1].starts_with(
            "#[rate_limit] needs a `Result<T, E>` return type with \
             `E: From<distlock::RateLimitError>`"
        ));
        assert!(msgs[2].starts_with("unknown placeholder `{usr}` in `key`"));
    }

    #[test]
    fn the_original_item_is_kept_on_error() {
        let item = quote!(
            async fn f() {}
        );
        let out = rate_limit(quote!(policy = "a: 1/s"), item.clone()).to_string();
        assert!(out.starts_with(&item.to_string()), "{out}");
        assert!(out.contains("compile_error"), "{out}");
    }
}
