//! Parsing of the attributes' arguments: `key = "...", ttl = "30s", client = <expr>, ...`.
//!
//! Parsing is in two steps. [`parse_raw`] only splits the input into `name = value` pairs
//! (every value is parsed as an expression, so an unknown argument can be skipped and the
//! others still checked). Each attribute's module (`lock`, `limit`) then interprets the
//! pairs through [`walk`], collecting every problem it finds into one `syn::Error` so the
//! user sees all of them at once. The value parsers shared by both attributes are here.

pub(crate) mod limit;
pub(crate) mod lock;

use std::time::Duration;

use distlock_grammar::LockOptionSpec;
use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt as _;
use syn::parse::{ParseStream, Parser as _};
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token};

use crate::errors::Errors;
use crate::template::{self, Part};

/// What an attribute accepts, for its messages.
pub(crate) struct Grammar {
    /// The attribute's own arguments, in the order its docs list them.
    pub(crate) names: &'static [&'static str],
    /// The lock options it takes from the grammar crate's table (none for `#[rate_limit]`),
    /// listed after its first own argument.
    pub(crate) options: &'static [LockOptionSpec],
    /// How one of its own arguments is written, for "needs a value" and "takes a string
    /// literal" errors (the options' come from the table).
    pub(crate) example: fn(&str) -> &'static str,
    /// What the key names: "lock", "rate-limit subject".
    pub(crate) key_names: &'static str,
}

impl Grammar {
    /// Whether `name` is an argument of the attribute.
    fn accepts(&self, name: &str) -> bool {
        self.names.contains(&name) || self.option(name).is_some()
    }

    /// The lock option `name`, if the attribute takes it.
    pub(crate) fn option(&self, name: &str) -> Option<&'static LockOptionSpec> {
        self.options.iter().find(|option| option.name == name)
    }

    /// Every argument for error messages, in the order the docs list them: "`key`, `ttl`
    /// and `crate`".
    pub(crate) fn accepted(&self) -> String {
        let (first, rest) = self.names.split_at(self.names.len().min(1));
        let all: Vec<&str> = first
            .iter()
            .copied()
            .chain(self.options.iter().map(|option| option.name))
            .chain(rest.iter().copied())
            .collect();
        let mut text = String::new();
        for (i, name) in all.iter().enumerate() {
            match i {
                0 => {}
                _ if i + 1 == all.len() => text.push_str(" and "),
                _ => text.push_str(", "),
            }
            text.push('`');
            text.push_str(name);
            text.push('`');
        }
        text
    }

    /// How the argument `name` is written.
    pub(crate) fn example_of(&self, name: &str) -> &'static str {
        match self.option(name) {
            Some(option) => option.example,
            None => (self.example)(name),
        }
    }
}

/// One `name = value` (or a bare `name`) as written.
pub(crate) struct RawArg {
    name: Ident,
    value: Option<Expr>,
}

/// Splits the attribute's arguments into `name = value` pairs, without interpreting them.
pub(crate) fn parse_raw(tokens: TokenStream, grammar: &Grammar) -> syn::Result<Vec<RawArg>> {
    let parser = |input: ParseStream<'_>| {
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
                    format!(
                        "expected an argument name: one of {}, written `name = value`",
                        grammar.accepted()
                    ),
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
        Ok(args)
    };
    parser.parse2(tokens)
}

/// Hands each known argument given once with a value to `apply(name, name token, value)`,
/// and reports unknown, repeated and valueless ones (and whatever `apply` returns) into
/// `errors`. Returns the names seen, valid or not.
pub(crate) fn walk(
    raw: Vec<RawArg>,
    grammar: &Grammar,
    errors: &mut Errors,
    mut apply: impl FnMut(&str, &Ident, Expr) -> syn::Result<()>,
) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for RawArg { name, value } in raw {
        let label = name.unraw().to_string();
        if !grammar.accepts(&label) {
            errors.push(unknown(grammar, &name, &label));
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
                format!("`{label}` needs a value: {}", grammar.example_of(&label)),
            ));
            continue;
        };
        if let Err(err) = apply(&label, &name, value) {
            errors.push(err);
        }
    }
    seen
}

pub(crate) fn unknown(grammar: &Grammar, name: &Ident, label: &str) -> syn::Error {
    syn::Error::new(
        name.span(),
        format!(
            "unknown argument `{label}`; accepted arguments: {}",
            grammar.accepted()
        ),
    )
}

/// The `key` template and the literal it came from (errors about it point at the literal).
pub(crate) struct Key {
    pub(crate) parts: Vec<Part>,
    pub(crate) span: Span,
}

/// The value as a string literal, or an error saying how to write it.
pub(crate) fn string_literal<'a>(
    grammar: &Grammar,
    name: &str,
    value: &'a Expr,
) -> syn::Result<&'a LitStr> {
    match unwrap_group(value) {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s),
        _ => Err(syn::Error::new(
            value.span(),
            format!(
                "`{name}` takes a string literal: {}",
                grammar.example_of(name)
            ),
        )),
    }
}

/// `value` without the invisible groups a `macro_rules!` adds around a `$x:expr` or
/// `$x:literal` it passes on.
pub(crate) fn unwrap_group(value: &Expr) -> &Expr {
    match value {
        Expr::Group(group) => unwrap_group(&group.expr),
        other => other,
    }
}

/// `key = "..."`: a non-empty template.
pub(crate) fn parse_key(grammar: &Grammar, value: &Expr) -> syn::Result<Key> {
    let lit = string_literal(grammar, "key", value)?;
    let text = lit.value();
    if text.is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`key` is empty: give the {} a name, e.g. {}",
                grammar.key_names,
                grammar.example_of("key")
            ),
        ));
    }
    let parts = template::parse(&text).map_err(|err| syn::Error::new(lit.span(), err.0))?;
    Ok(Key {
        parts,
        span: lit.span(),
    })
}

/// A duration (`"30s"`, `"1m 30s"`, `"250ms"`: the grammar's, as in configuration); zero is
/// allowed.
pub(crate) fn parse_duration(grammar: &Grammar, name: &str, value: &Expr) -> syn::Result<Duration> {
    let lit = string_literal(grammar, name, value)?;
    distlock_grammar::parse_duration(lit.value().trim()).map_err(|err| {
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

pub(crate) fn parse_bool(grammar: &Grammar, name: &str, value: &Expr) -> syn::Result<bool> {
    match unwrap_group(value) {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(b), ..
        }) => Ok(b.value),
        _ => Err(syn::Error::new(
            value.span(),
            format!("expected {}", grammar.example_of(name)),
        )),
    }
}

/// One of `choices`, written as a bare word (`on_busy = skip`) or as a string
/// (`on_busy = "skip"`); `expected` says what each choice does.
pub(crate) fn parse_choice<T: Copy>(
    value: &Expr,
    choices: &[(&str, T)],
    expected: &str,
) -> syn::Result<T> {
    let word = match unwrap_group(value) {
        Expr::Path(path) if path.attrs.is_empty() && path.qself.is_none() => {
            path.path.get_ident().map(Ident::to_string)
        }
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Some(s.value()),
        _ => None,
    };
    word.and_then(|word| {
        choices
            .iter()
            .find(|(name, _)| *name == word)
            .map(|&(_, choice)| choice)
    })
    .ok_or_else(|| syn::Error::new(value.span(), expected))
}

/// `crate = "path"`: the path of the distlock crate, if it is renamed.
pub(crate) fn parse_crate(grammar: &Grammar, value: &Expr) -> syn::Result<syn::Path> {
    let lit = string_literal(grammar, "crate", value)?;
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
