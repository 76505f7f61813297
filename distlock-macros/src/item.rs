//! Parsing and checking the annotated function.
//!
//! The body is kept as tokens, not parsed into statements: the macro only moves it into an
//! `async move` block, and leaving it unparsed keeps the macro fast and lets the compiler, not
//! the macro, report syntax errors inside it.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens as _;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned as _;
use syn::{Attribute, FnArg, Pat, ReturnType, Signature, Type, Visibility, braced};

use crate::errors::Errors;

/// What an attribute needs of the function, for its messages.
pub(crate) struct Needs {
    /// The attribute as users write it: `#[distributed_lock]`.
    pub(crate) attribute: &'static str,
    /// Why it needs an `async fn`.
    pub(crate) why_async: &'static str,
    /// The error type `E` must convert from: `distlock::LockError`.
    pub(crate) error: &'static str,
    /// Why it needs a `Result`.
    pub(crate) why_result: &'static str,
}

/// An `async fn` with a body: a free function or a method.
pub(crate) struct AnnotatedFn {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    /// `#![...]` at the top of the body; they stay on the function.
    pub(crate) inner_attrs: Vec<Attribute>,
    pub(crate) body: TokenStream,
    pub(crate) body_span: Span,
}

impl Parse for AnnotatedFn {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let sig: Signature = input.parse()?;
        let content;
        let brace = braced!(content in input);
        let inner_attrs = content.call(Attribute::parse_inner)?;
        let body: TokenStream = content.parse()?;
        Ok(Self {
            attrs,
            vis,
            sig,
            inner_attrs,
            body,
            body_span: brace.span.join(),
        })
    }
}

impl AnnotatedFn {
    /// Parses the item, with an error that says where the attribute goes if it is not a
    /// function with a body.
    pub(crate) fn parse(item: TokenStream, needs: &Needs) -> syn::Result<Self> {
        syn::parse2(item).map_err(|err| {
            syn::Error::new(
                err.span(),
                format!(
                    "{} can only be applied to an `async fn` with a body (a free function or a \
                     method): {err}",
                    needs.attribute
                ),
            )
        })
    }

    /// Checks what the attribute needs of the signature: `async`, and a `Result` return type.
    pub(crate) fn check_signature(&self, needs: &Needs) -> syn::Result<()> {
        let Needs {
            attribute,
            why_async,
            error,
            why_result,
        } = needs;
        let mut errors = Errors::default();
        if self.sig.asyncness.is_none() {
            errors.push(syn::Error::new(
                self.sig.fn_token.span,
                format!(
                    "{attribute} can only be applied to an `async fn`: {why_async}; write \
                     `async fn`"
                ),
            ));
        }
        match &self.sig.output {
            ReturnType::Default => errors.push(syn::Error::new(
                self.sig.paren_token.span.close(),
                format!(
                    "{attribute} needs a `Result<T, E>` return type with `E: From<{error}>`, \
                     because {why_result}; add `-> Result<(), E>`"
                ),
            )),
            ReturnType::Type(_, ty) if !is_result(ty) => errors.push(syn::Error::new(
                ty.span(),
                format!(
                    "{attribute} needs a `Result<T, E>` return type with `E: From<{error}>`, \
                     because {why_result}; accepted: `Result<T, E>`, a path ending in `Result` \
                     such as `std::result::Result<T, E>`, or an alias whose name ends in \
                     `Result` such as `AppResult<T>`"
                ),
            )),
            ReturnType::Type(..) => {}
        }
        errors.finish()
    }

    /// The return type, if it can be named inside the body: not `impl Trait` (which cannot be
    /// written in expression position) and not absent.
    pub(crate) fn nameable_output(&self) -> Option<&Type> {
        match &self.sig.output {
            ReturnType::Type(_, ty) if !mentions_impl(ty.to_token_stream()) => Some(ty),
            _ => None,
        }
    }

    /// The names the parameters bind, in order: `self` for a receiver, then every name bound
    /// by each parameter's pattern (`id` in `Path(id): Path<u64>`).
    pub(crate) fn bindings(&self) -> Vec<String> {
        let mut names = Vec::new();
        for input in &self.sig.inputs {
            match input {
                FnArg::Receiver(_) => names.push("self".to_owned()),
                FnArg::Typed(typed) => collect_bindings(&typed.pat, &mut names),
            }
        }
        names
    }
}

/// Whether `ty` is written as a path whose last segment is `Result` or ends in `Result`.
fn is_result(ty: &Type) -> bool {
    match ty {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .segments
            .last()
            .is_some_and(|seg| seg.ident.to_string().ends_with("Result")),
        // Invisible groups appear when the fn comes out of a `macro_rules!` with `$t:ty`.
        Type::Group(group) => is_result(&group.elem),
        Type::Paren(paren) => is_result(&paren.elem),
        _ => false,
    }
}

/// Whether the tokens contain the `impl` keyword anywhere (`Result<impl Display, E>`).
fn mentions_impl(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|tt| match tt {
        TokenTree::Ident(ident) => ident == "impl",
        TokenTree::Group(group) => mentions_impl(group.stream()),
        TokenTree::Punct(_) | TokenTree::Literal(_) => false,
    })
}

/// Pushes every name `pat` binds. Or-patterns bind the same names in each alternative, so the
/// first one is enough.
fn collect_bindings(pat: &Pat, names: &mut Vec<String>) {
    match pat {
        Pat::Ident(ident) => {
            names.push(ident.ident.to_string());
            if let Some((_, sub)) = &ident.subpat {
                collect_bindings(sub, names);
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|p| collect_bindings(p, names)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|p| collect_bindings(p, names)),
        Pat::Struct(st) => st
            .fields
            .iter()
            .for_each(|field| collect_bindings(&field.pat, names)),
        Pat::Slice(slice) => slice.elems.iter().for_each(|p| collect_bindings(p, names)),
        Pat::Reference(reference) => collect_bindings(&reference.pat, names),
        Pat::Paren(paren) => collect_bindings(&paren.pat, names),
        Pat::Type(typed) => collect_bindings(&typed.pat, names),
        Pat::Or(or) => {
            if let Some(first) = or.cases.first() {
                collect_bindings(first, names);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    const NEEDS: Needs = Needs {
        attribute: "#[distributed_lock]",
        why_async: "the lock is held across the body's awaits",
        error: "distlock::LockError",
        why_result: "taking the lock can fail",
    };

    fn parse(tokens: TokenStream) -> AnnotatedFn {
        AnnotatedFn::parse(tokens, &NEEDS).unwrap()
    }

    #[test]
    fn bindings_of_every_parameter_shape() {
        let f = parse(quote! {
            async fn h(
                &mut self,
                plain: u64,
                mut counter: u32,
                State(app): State<App>,
                Path((user, Order { id, kind: k, .. })): Path<(u64, Order)>,
                whole @ Wrapper(_inner): Wrapper,
                &r: &u8,
                [first, ..]: [u8; 4],
                (A(x) | B(x)): E,
                _: Ignored,
            ) -> Result<(), E> {}
        });
        assert_eq!(
            f.bindings(),
            [
                "self", "plain", "counter", "app", "user", "id", "k", "whole", "_inner", "r",
                "first", "x"
            ]
        );
    }

    #[test]
    fn body_and_inner_attributes_are_kept_apart() {
        let f = parse(quote! {
            #[doc = "outer"]
            pub(crate) async fn f() -> Result<(), E> { #![allow(unused)] let x = 1; Ok(()) }
        });
        assert_eq!(f.attrs.len(), 1);
        assert_eq!(f.inner_attrs.len(), 1);
        assert_eq!(f.body.to_string(), "let x = 1 ; Ok (())");
    }

    #[test]
    fn return_types() {
        let ok = |t: TokenStream| parse(t).check_signature(&NEEDS).is_ok();
        assert!(ok(quote!(
            async fn f() -> Result<u8, E> {}
        )));
        assert!(ok(quote!(
            async fn f() -> std::result::Result<u8, E> {}
        )));
        assert!(ok(quote!(
            async fn f() -> io::Result<u8> {}
        )));
        assert!(ok(quote!(
            async fn f() -> AppResult<u8> {}
        )));
        assert!(ok(quote!(
            async fn f() -> (Result<u8, E>) {}
        )));
        assert!(!ok(quote!(
            async fn f() -> Option<u8> {}
        )));
        assert!(!ok(quote!(
            async fn f() -> u8 {}
        )));
        assert!(!ok(quote!(
            async fn f() {}
        )));
        assert!(!ok(quote!(
            fn f() -> Result<u8, E> {}
        )));
    }

    #[test]
    fn impl_trait_outputs_are_not_named() {
        let f = parse(quote!(
            async fn f() -> Result<impl Display, E> {}
        ));
        assert!(f.nameable_output().is_none());
        let f = parse(quote!(
            async fn f() -> Result<Vec<u8>, E> {}
        ));
        assert!(f.nameable_output().is_some());
    }

    #[test]
    fn non_functions_are_refused() {
        let err = AnnotatedFn::parse(
            quote!(
                struct S;
            ),
            &NEEDS,
        )
        .err()
        .unwrap();
        assert!(
            err.to_string()
                .contains("can only be applied to an `async fn`")
        );
        let err = AnnotatedFn::parse(
            quote!(
                async fn f() -> Result<(), E>;
            ),
            &NEEDS,
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("with a body"));
    }
}
