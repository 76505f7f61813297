//! The expansion of `#[distributed_lock]`. For
//!
//! ```text
//! #[distributed_lock(key = "order:{id}", ttl = "10s")]
//! async fn settle(id: u64) -> Result<Receipt, AppError> { BODY }
//! ```
//!
//! the function keeps its signature and gets this body (see the parent module for why it is
//! shaped so):
//!
//! ```text
//! let __distlock_key: String = { "order:" + escaped `id` };
//! let __distlock_client: Option<Client> = None;
//! ::distlock::__private::run(__distlock_client, __distlock_key,
//!     ::distlock::LockOptions::new().ttl(10s).wait(0s)...,
//!     async move {
//!         if false { return unreachable_output::<Result<Receipt, AppError>>(); }
//!         BODY
//!     }).await
//! ```
//!
//! With `on_busy = skip` the call is to `run_or_skip`, which needs the `Ok` type to have a
//! "did not run" value (`()` or `Option<T>`); the type checker says so at the return type.

use distlock_grammar::OptionValue;
use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned};

use super::{
    Attribute, Locals, body_block, client_expr, duration, krate, output_span, render_key, respan,
    with_body,
};
use crate::args::Key;
use crate::args::lock::{LockArgs, OnBusy};
use crate::item::{AnnotatedFn, Needs};

/// `#[distributed_lock]`: what it needs of the function, how it reads its arguments, and
/// what it generates.
const ATTRIBUTE: Attribute<LockArgs> = Attribute {
    needs: Needs {
        attribute: "#[distributed_lock]",
        why_async: "the lock is held across the body's awaits",
        error: "distlock::LockError",
        why_result: "taking the lock can fail",
    },
    parse: LockArgs::parse,
    key,
    generate,
};

fn key(args: &LockArgs) -> Option<&Key> {
    Some(&args.key)
}

/// Expands the attribute; on error, the item unchanged and the errors.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    ATTRIBUTE.expand_or_keep(args, item)
}

fn generate(args: &LockArgs, func: &AnnotatedFn) -> TokenStream {
    let krate = krate(args.krate.as_ref());
    let Locals {
        key: key_var,
        client: client_var,
    } = Locals::new();
    let key = render_key(&args.key, &krate, &key_var);
    let client = client_expr(args.client.as_ref(), &krate);
    let spec = spec(args, &krate);
    let body = body_block(func, &krate);
    let output_span = output_span(func);
    let runner = match args.on_busy {
        OnBusy::Skip => quote!(#krate::__private::run_or_skip),
        OnBusy::Wait | OnBusy::Error => quote!(#krate::__private::run),
    };
    let runner = respan(runner, output_span);
    let call = quote_spanned! {output_span=>
        #runner(#client_var, #key_var, #spec, #body).await
    };
    with_body(
        func,
        &quote! {
            let #key_var: ::std::string::String = #key;
            let #client_var: ::core::option::Option<#krate::Client> = #client;
            #call
        },
    )
}

/// The lock's [`LockOptions`](https://docs.rs/distlock/latest/distlock/struct.LockOptions.html)
/// value: reentrant (the macro's default), then every option given through the runtime's
/// setter of the same name (`on_busy = error` or `skip` do not wait).
fn spec(args: &LockArgs, krate: &TokenStream) -> TokenStream {
    let mut spec = quote!(#krate::LockOptions::new().reentrant(true));
    if args.on_busy != OnBusy::Wait {
        let zero = duration(std::time::Duration::ZERO, krate);
        spec.extend(quote!(.wait(#zero)));
    }
    for (option, value) in &args.options {
        let setter = Ident::new(option.name, Span::call_site());
        let value = match value {
            OptionValue::Flag(on) => quote!(#on),
            OptionValue::Duration(d) => duration(*d, krate),
            OptionValue::Count(n) => quote!(#n),
            OptionValue::Text(text) => quote!(#text),
        };
        spec.extend(quote!(.#setter(#value)));
    }
    spec
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    #[test]
    fn keeps_the_signature_and_moves_the_body() {
        let out = ATTRIBUTE.expanded(
            quote!(key = "order:{id}", ttl = "10s", wait = "1500ms"),
            quote! {
                /// Docs.
                #[inline]
                pub async fn settle<T: Send>(id: u64, t: T) -> Result<u64, AppError> {
                    #![allow(unused)]
                    Ok(id)
                }
            },
        );
        let expected_start = quote! {
            #[doc = r" Docs."]
            #[inline]
            pub async fn settle<T: Send>(id: u64, t: T) -> Result<u64, AppError> {
                #![allow(unused)]
            }
        }
        .to_string();
        // Everything up to the body is the original.
        let head = &expected_start[..expected_start.len() - "}".len() - 1];
        assert!(out.starts_with(head), "{out}");
        assert!(out.contains("push_str (\"order:\")"), "{out}");
        assert!(
            out.contains("push_key_part (& mut __distlock_key , & id)"),
            "{out}"
        );
        assert!(out.contains("__Duration :: new (10u64 , 0u32)"), "{out}");
        assert!(
            out.contains("__Duration :: new (1u64 , 500000000u32)"),
            "{out}"
        );
        assert!(out.contains("unreachable_output :: < Result < u64 , AppError > > ()"));
        assert!(out.contains("async move"), "{out}");
        assert!(out.contains("Ok (id)"), "{out}");
        assert!(out.ends_with(". await }"), "{out}");
    }

    #[test]
    fn crate_path_replaces_every_distlock_path() {
        let out = ATTRIBUTE.expanded(
            quote!(key = "k:{self.0}", crate = "::locks", client = &self.c),
            quote!(
                async fn f(&self) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(!out.contains("distlock ::"), "{out}");
        assert!(out.contains(":: locks :: __private :: run"), "{out}");
        assert!(
            out.contains(
                "< :: locks :: Client as :: core :: clone :: Clone > :: clone (& self . c)"
            )
        );
        assert!(out.contains("& self . 0)"), "{out}");
    }

    #[test]
    fn on_busy_picks_the_runner_and_fails_fast() {
        let item = quote!(
            async fn f() -> Result<(), E> {
                Ok(())
            }
        );
        // `on_busy = error` and `skip` do not wait (a `wait` beside them is refused).
        let no_wait = ". wait (:: distlock :: __private :: __Duration :: new (0u64 , 0u32))";
        let two_s = ". wait (:: distlock :: __private :: __Duration :: new (2u64 , 0u32))";
        let skip = ATTRIBUTE.expanded(quote!(key = "k", on_busy = skip), item.clone());
        assert!(skip.contains("__private :: run_or_skip ("), "{skip}");
        assert!(skip.contains(no_wait), "{skip}");
        let error = ATTRIBUTE.expanded(quote!(key = "k", on_busy = error), item.clone());
        assert!(error.contains("__private :: run ("), "{error}");
        assert!(error.contains(no_wait), "{error}");
        let wait = ATTRIBUTE.expanded(quote!(key = "k", wait = "2s"), item);
        assert!(wait.contains(two_s), "{wait}");
    }

    #[test]
    fn impl_trait_outputs_are_not_pinned() {
        let out = ATTRIBUTE.expanded(
            quote!(key = "k"),
            quote!(
                async fn f() -> Result<impl Display, E> {
                    Ok(1)
                }
            ),
        );
        assert!(!out.contains("unreachable_output"), "{out}");
    }

    #[test]
    fn unknown_placeholders_name_the_parameters() {
        let msgs = ATTRIBUTE.refused(
            quote!(key = "o:{ordr_id}:{self.x}"),
            quote!(
                async fn settle(order_id: u64, Path(p): Path<u8>) -> Result<(), E> {}
            ),
        );
        assert_eq!(
            msgs,
            [
                "unknown placeholder `{ordr_id}` in `key`: `ordr_id` is not a parameter; the \
                 parameters of `settle` bind `order_id`, `p`",
                "unknown placeholder `{self.x}` in `key`: `self` is not a parameter; the \
                 parameters of `settle` bind `order_id`, `p`"
            ]
        );
        let msgs = ATTRIBUTE.refused(
            quote!(key = "{id}"),
            quote!(
                async fn f() -> Result<(), E> {}
            ),
        );
        assert!(msgs[0].ends_with("`f` has no parameters that bind a name"));
    }

    #[test]
    fn argument_and_signature_errors_are_reported_together() {
        let msgs = ATTRIBUTE.refused(
            quote!(ttl = "1s"),
            quote!(
                fn f() {}
            ),
        );
        assert_eq!(msgs.len(), 3, "{msgs:#?}");
        assert!(msgs[0].starts_with("missing `key`"));
        assert!(msgs[1].contains("can only be applied to an `async fn`"));
        assert!(msgs[2].contains("needs a `Result<T, E>` return type"));
    }

    #[test]
    fn the_original_item_is_kept_on_error() {
        let item = quote!(
            async fn f() {}
        );
        let out = distributed_lock(quote!(key = "k"), item.clone()).to_string();
        assert!(out.starts_with(&item.to_string()), "{out}");
        assert!(out.contains("compile_error"), "{out}");
    }
}
