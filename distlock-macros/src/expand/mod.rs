//! Code generation, shared by both attributes. Each attribute keeps the function's signature
//! and gives it a body of this shape (`lock` and `limit` document theirs):
//!
//! ```text
//! let __distlock_key = { render the `key` template };  // borrows the parameters briefly
//! let __distlock_client = None;                         // or Some(clone of `client = ...`)
//! ::distlock::__private::RUNTIME_FN(..., async move {
//!     if false { return unreachable_output::<RETURN TYPE>(); }
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
//! * The call into the runtime has the return type's span, so the type checker's complaints
//!   about `E` (no `From<LockError>`) point where `E` is written.

pub(crate) mod limit;
pub(crate) mod lock;

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use syn::Expr;
use syn::spanned::Spanned as _;

use crate::args::Key;
use crate::errors::Errors;
use crate::item::{AnnotatedFn, Needs};
use crate::template::{Part, Placeholder};

/// One attribute: what it needs of the function, how its arguments are read, where its key
/// is among them, and what it generates. Both attributes expand through it.
pub(crate) struct Attribute<A: 'static> {
    pub(crate) needs: Needs,
    pub(crate) parse: fn(TokenStream) -> syn::Result<A>,
    pub(crate) key: fn(&A) -> Option<&Key>,
    pub(crate) generate: fn(&A, &AnnotatedFn) -> TokenStream,
}

impl<A> Attribute<A> {
    /// The function with its new body; on any error, the item unchanged followed by the
    /// errors, so the rest of the crate (and an IDE) still sees the function.
    pub(crate) fn expand_or_keep(&self, args: TokenStream, item: TokenStream) -> TokenStream {
        match self.expand(args, item.clone()) {
            Ok(tokens) => tokens,
            Err(err) => {
                let errors = err.into_compile_error();
                quote!(#item #errors)
            }
        }
    }

    /// The expansion as text; it must succeed (for the expanders' unit tests).
    #[cfg(test)]
    pub(crate) fn expanded(&self, args: TokenStream, item: TokenStream) -> String {
        self.expand(args, item).unwrap().to_string()
    }

    /// The errors of an expansion that must fail (for the expanders' unit tests).
    #[cfg(test)]
    pub(crate) fn refused(&self, args: TokenStream, item: TokenStream) -> Vec<String> {
        match self.expand(args, item) {
            Ok(tokens) => panic!("expanded without errors: {tokens}"),
            Err(err) => err.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    /// The function with its new body, or every error found.
    pub(crate) fn expand(&self, args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
        let (args, func) = parse_annotated(args, item, &self.needs, self.parse, self.key)?;
        Ok((self.generate)(&args, &func))
    }
}

/// Parses an attribute's arguments (by `parse`) and the function it annotates, and checks
/// the signature against `needs` and the key's placeholders (`key`) against the parameters;
/// every error of all of them is reported at once, not only the first.
pub(crate) fn parse_annotated<A>(
    args: TokenStream,
    item: TokenStream,
    needs: &Needs,
    parse: fn(TokenStream) -> syn::Result<A>,
    key: fn(&A) -> Option<&Key>,
) -> syn::Result<(A, AnnotatedFn)> {
    let mut errors = Errors::default();
    let args = parse(args).map_err(|e| errors.push(e)).ok();
    let func = AnnotatedFn::parse(item, needs)
        .map_err(|e| errors.push(e))
        .ok();
    if let Some(func) = &func {
        if let Err(err) = func.check_signature(needs) {
            errors.push(err);
        }
        if let Some(key) = args.as_ref().and_then(key)
            && let Err(err) = check_placeholders(key, func)
        {
            errors.push(err);
        }
    }
    errors.finish()?;
    match (args, func) {
        (Some(args), Some(func)) => Ok((args, func)),
        // Both parsed, or an error was pushed above.
        _ => Err(syn::Error::new(
            Span::call_site(),
            format!("invalid {}", needs.attribute),
        )),
    }
}

/// Every placeholder must start with a name bound by the parameters.
pub(crate) fn check_placeholders(key: &Key, func: &AnnotatedFn) -> syn::Result<()> {
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

/// The path of the runtime crate: `crate = "..."`, or `::distlock`.
pub(crate) fn krate(path: Option<&syn::Path>) -> TokenStream {
    match path {
        Some(path) => quote!(#path),
        None => quote!(::distlock),
    }
}

/// The locals every expansion declares, with mixed-site hygiene.
pub(crate) struct Locals {
    pub(crate) key: syn::Ident,
    pub(crate) client: syn::Ident,
}

impl Locals {
    pub(crate) fn new() -> Self {
        Self {
            key: format_ident!("__distlock_key", span = Span::mixed_site()),
            client: format_ident!("__distlock_client", span = Span::mixed_site()),
        }
    }
}

/// `Option<Client>`: `None`, or the `client = ...` expression cloned at once (a `Client` is
/// an `Arc`), so the borrow the expression may take of a parameter ends before the body takes
/// the parameter.
pub(crate) fn client_expr(client: Option<&Expr>, krate: &TokenStream) -> TokenStream {
    match client {
        Some(expr) => quote_spanned! {expr.span()=>
            ::core::option::Option::Some(<#krate::Client as ::core::clone::Clone>::clone(#expr))
        },
        None => quote!(::core::option::Option::None),
    }
}

/// The body as an `async move` block whose output is pinned to the function's return type.
pub(crate) fn body_block(func: &AnnotatedFn, krate: &TokenStream) -> TokenStream {
    let pin_output = func.nameable_output().map(|ty| {
        quote! {
            if false {
                return #krate::__private::unreachable_output::<#ty>();
            }
        }
    });
    let body = &func.body;
    quote_spanned! {func.body_span=>
        async move {
            #pin_output
            #body
        }
    }
}

/// The span of the return type (the call site if there is none).
pub(crate) fn output_span(func: &AnnotatedFn) -> Span {
    match &func.sig.output {
        syn::ReturnType::Type(_, ty) => ty.span(),
        syn::ReturnType::Default => Span::call_site(),
    }
}

/// The function with its signature, attributes and inner attributes as written, and `body`.
pub(crate) fn with_body(func: &AnnotatedFn, body: &TokenStream) -> TokenStream {
    let AnnotatedFn {
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
            #body
        }
    }
}

/// `tokens` with every span set to `span` (the crate path is spliced in with its own spans).
pub(crate) fn respan(tokens: TokenStream, span: Span) -> TokenStream {
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

/// A `Duration` literal.
pub(crate) fn duration(d: std::time::Duration, krate: &TokenStream) -> TokenStream {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    quote!(#krate::__private::__Duration::new(#secs, #nanos))
}

/// A block that builds the key: literal text pushed as is, placeholder values through
/// `push_key_part`, which escapes them.
pub(crate) fn render_key(key: &Key, krate: &TokenStream, var: &syn::Ident) -> TokenStream {
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
