//! Code generation. For
//!
//! ```text
//! #[distributed_lock(key = "order:{id}", ttl = "10s")]
//! async fn settle(id: u64) -> Result<Receipt, AppError> { BODY }
//! ```
//!
//! the function keeps its signature and gets this body:
//!
//! ```text
//! let key = { render "order:" + escaped `id` };        // borrows the parameters briefly
//! let client = None;                                    // or Some(clone of `client = ...`)
//! ::distlock::__private::run(client, key, SPEC, async move {
//!     if false { return unreachable_output::<Result<Receipt, AppError>>(); }
//!     BODY
//! }).await
//! ```
//!
//! * The key and the client are computed before the body is moved into its `async move`
//!   block, so they may borrow parameters that the body then takes (`&mut self`, extractors).
//! * The never-taken `return` fixes the block's output to the function's return type before
//!   the body is type-checked, so `?` and `return` in the body infer exactly as they did in
//!   the original function.
//! * Locals use `Span::mixed_site()` (and a `__distlock_` prefix) so they can neither capture
//!   nor be captured by the user's names; parameter names in the key use the key literal's span
//!   so they resolve to the parameters.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned as _;

use crate::args::{Key, LockArgs};
use crate::errors::Errors;
use crate::item::LockedFn;
use crate::template::{Part, Placeholder};

/// Expands the attribute. On any error, emits the item unchanged followed by the errors, so
/// the rest of the crate (and an IDE) still sees the function.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    match expand(args, item.clone()) {
        Ok(tokens) => tokens,
        Err(err) => {
            let errors = err.into_compile_error();
            quote!(#item #errors)
        }
    }
}

fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let args = LockArgs::parse(args).map_err(|e| errors.push(e)).ok();
    let func = LockedFn::parse(item).map_err(|e| errors.push(e)).ok();
    if let Some(func) = &func {
        if let Err(err) = func.check_signature() {
            errors.push(err);
        }
        if let Some(args) = &args
            && let Err(err) = check_placeholders(&args.key, func)
        {
            errors.push(err);
        }
    }
    errors.finish()?;
    match (args, func) {
        (Some(args), Some(func)) => Ok(generate(&args, &func)),
        // Both parsed, or an error was pushed above.
        _ => Err(syn::Error::new(
            Span::call_site(),
            "invalid #[distributed_lock]",
        )),
    }
}

/// Every placeholder must start with a name bound by the parameters.
fn check_placeholders(key: &Key, func: &LockedFn) -> syn::Result<()> {
    let bindings = func.bindings();
    let mut errors = Errors::default();
    for part in &key.parts {
        let Part::Placeholder(placeholder) = part else {
            continue;
        };
        if bindings.contains(&placeholder.root) {
            continue;
        }
        let name = &func.sig.ident;
        let known = if bindings.is_empty() {
            format!("`{name}` has no parameters that bind a name")
        } else {
            let list: Vec<String> = bindings.iter().map(|b| format!("`{b}`")).collect();
            format!("the parameters of `{name}` bind {}", list.join(", "))
        };
        errors.push(syn::Error::new(
            key.span,
            format!(
                "unknown placeholder `{placeholder}` in `key`: `{}` is not a parameter; {known}",
                placeholder.root
            ),
        ));
    }
    errors.finish()
}

fn generate(args: &LockArgs, func: &LockedFn) -> TokenStream {
    let krate = match &args.krate {
        Some(path) => quote!(#path),
        None => quote!(::distlock),
    };
    let key_var = format_ident!("__distlock_key", span = Span::mixed_site());
    let client_var = format_ident!("__distlock_client", span = Span::mixed_site());

    let key = render_key(&args.key, &krate, &key_var);
    let client = match &args.client {
        // Cloned at once (a `Client` is an `Arc`), so the borrow the expression may take of a
        // parameter ends before the body takes the parameter.
        Some(expr) => quote_spanned! {expr.span()=>
            ::core::option::Option::Some(<#krate::Client as ::core::clone::Clone>::clone(#expr))
        },
        None => quote!(::core::option::Option::None),
    };
    let spec = spec(args, &krate);

    let pin_output = func.nameable_output().map(|ty| {
        quote! {
            if false {
                return #krate::__private::unreachable_output::<#ty>();
            }
        }
    });
    // The type checker reports `E: From<LockError>` (and any other mismatch with the output
    // of `run`) on this call: give the call the return type's span, so the error points where
    // `E` is written.
    let output_span = match &func.sig.output {
        syn::ReturnType::Type(_, ty) => ty.span(),
        syn::ReturnType::Default => Span::call_site(),
    };
    let body = &func.body;
    let body = quote_spanned! {func.body_span=>
        async move {
            #pin_output
            #body
        }
    };

    let run = respan(quote!(#krate::__private::run), output_span);
    let call = quote_spanned! {output_span=>
        #run(#client_var, #key_var, #spec, #body).await
    };

    let LockedFn {
        attrs,
        vis,
        sig,
        inner_attrs,
        ..
    } = func;
    quote! {
        #(#attrs)*
        #vis #sig {
            #(#inner_attrs)*
            let #key_var: ::std::string::String = #key;
            let #client_var: ::core::option::Option<#krate::Client> = #client;
            #call
        }
    }
}

/// `tokens` with every span set to `span` (the crate path is spliced in with its own spans).
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let TokenTree::Group(group) = &tt {
                let mut inner = Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                tt = TokenTree::Group(inner);
            }
            tt.set_span(span);
            tt
        })
        .collect()
}

/// A block that builds the key: literal text pushed as is, placeholder values through
/// `push_key_part`, which escapes them.
fn render_key(key: &Key, krate: &TokenStream, var: &syn::Ident) -> TokenStream {
    let mut capacity = 0;
    let mut pushes = Vec::new();
    for part in &key.parts {
        match part {
            Part::Literal(text) => {
                capacity += text.len();
                pushes.push(quote!(#var.push_str(#text);));
            }
            Part::Placeholder(placeholder) => {
                capacity += 8;
                let value = placeholder_expr(placeholder, key.span);
                // The borrow has the key's span too, so "`T` doesn't implement `Display`"
                // points at the key.
                let value = quote_spanned!(key.span=> &#value);
                pushes.push(quote! {
                    #krate::__private::push_key_part(&mut #var, #value);
                });
            }
        }
    }
    quote! {{
        let mut #var = ::std::string::String::with_capacity(#capacity);
        #(#pushes)*
        #var
    }}
}

/// `root.field.0` with the key literal's span, so `root` resolves to the parameter and type
/// errors (a value that is not `Display`) point at the key.
fn placeholder_expr(placeholder: &Placeholder, span: Span) -> TokenStream {
    let root = match placeholder.root.strip_prefix("r#") {
        Some(raw) => syn::Ident::new_raw(raw, span),
        None => syn::Ident::new(&placeholder.root, span),
    };
    let fields = placeholder.fields.iter().map(|field| {
        let member: syn::Member = match field.parse::<u32>() {
            Ok(index) => syn::Member::Unnamed(syn::Index { index, span }),
            Err(_) => syn::Member::Named(match field.strip_prefix("r#") {
                Some(raw) => syn::Ident::new_raw(raw, span),
                None => syn::Ident::new(field, span),
            }),
        };
        quote_spanned!(span=> .#member)
    });
    quote_spanned!(span=> #root #(#fields)*)
}

/// The `LockSpec` literal.
fn spec(args: &LockArgs, krate: &TokenStream) -> TokenStream {
    let duration = |d: std::time::Duration| {
        let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
        quote!(#krate::__private::__Duration::new(#secs, #nanos))
    };
    let ttl = duration(args.ttl);
    let wait = duration(args.wait);
    let (fail_if_busy, watchdog, reentrant) = (args.fail_if_busy, args.watchdog, args.reentrant);
    let optional = |d: Option<std::time::Duration>| match d {
        Some(d) => {
            let d = duration(d);
            quote!(::core::option::Option::Some(#d))
        }
        None => quote!(::core::option::Option::None),
    };
    let min_hold = optional(args.min_hold);
    let max_hold = optional(args.max_hold);
    quote! {
        #krate::__private::LockSpec {
            ttl: #ttl,
            wait: #wait,
            fail_if_busy: #fail_if_busy,
            watchdog: #watchdog,
            reentrant: #reentrant,
            min_hold: #min_hold,
            max_hold: #max_hold,
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    fn expand_ok(args: TokenStream, item: TokenStream) -> String {
        expand(args, item).unwrap().to_string()
    }

    fn expand_err(args: TokenStream, item: TokenStream) -> Vec<String> {
        match expand(args, item) {
            Ok(tokens) => panic!("expanded without errors: {tokens}"),
            Err(err) => err.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn keeps_the_signature_and_moves_the_body() {
        let out = expand_ok(
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
        let out = expand_ok(
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
    fn impl_trait_outputs_are_not_pinned() {
        let out = expand_ok(
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
        let msgs = expand_err(
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
        let msgs = expand_err(
            quote!(key = "{id}"),
            quote!(
                async fn f() -> Result<(), E> {}
            ),
        );
        assert!(msgs[0].ends_with("`f` has no parameters that bind a name"));
    }

    #[test]
    fn argument_and_signature_errors_are_reported_together() {
        let msgs = expand_err(
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
