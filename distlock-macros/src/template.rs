//! The `key` template: literal text with `{name}` / `{name.field}` placeholders and `{{` / `}}`
//! for literal braces.
//!
//! Parsing is plain string work with no knowledge of the function; checking that each
//! placeholder names a parameter happens in `expand`, which knows the parameters.

use std::fmt;

/// One piece of a key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    /// Text copied into the key as it is (braces already unescaped).
    Literal(String),
    /// A value rendered with `Display` and escaped by `push_key_part`.
    Placeholder(Placeholder),
}

/// `{root.field.field}`: a parameter binding and a possibly empty chain of fields (names or
/// tuple indices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placeholder {
    pub(crate) root: String,
    pub(crate) fields: Vec<String>,
}

impl fmt::Display for Placeholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}", self.root)?;
        for field in &self.fields {
            write!(f, ".{field}")?;
        }
        f.write_str("}")
    }
}

/// A malformed template. The message is complete; the caller attaches the literal's span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TemplateError(pub(crate) String);

/// Splits a template into literal text and placeholders. Adjacent literal text is merged.
pub(crate) fn parse(template: &str) -> Result<Vec<Part>, TemplateError> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut chars = template.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '{' if chars.next_if(|&(_, c)| c == '{').is_some() => literal.push('{'),
            '}' if chars.next_if(|&(_, c)| c == '}').is_some() => literal.push('}'),
            '}' => {
                return Err(TemplateError(format!(
                    "unmatched `}}` at byte {at} of the `key` template {template:?}: write `}}}}` \
                     for a literal brace"
                )));
            }
            '{' => {
                let start = at + 1;
                let Some(end) = template[start..].find(['}', '{']).map(|i| start + i) else {
                    return Err(TemplateError(format!(
                        "unclosed `{{` at byte {at} of the `key` template {template:?}: close \
                         the placeholder with `}}`, or write `{{{{` for a literal brace"
                    )));
                };
                if template[end..].starts_with('{') {
                    return Err(TemplateError(format!(
                        "unclosed `{{` at byte {at} of the `key` template {template:?}: a \
                         placeholder cannot contain `{{`; close it with `}}`, or write `{{{{` \
                         for a literal brace"
                    )));
                }
                let placeholder = placeholder(&template[start..end])?;
                // Skip the placeholder's text and its closing brace.
                while chars.next_if(|&(i, _)| i <= end).is_some() {}
                if !literal.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut literal)));
                }
                parts.push(Part::Placeholder(placeholder));
            }
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        parts.push(Part::Literal(literal));
    }
    Ok(parts)
}

/// Parses the inside of `{...}`: `name` or `name.field.0.field`.
fn placeholder(inner: &str) -> Result<Placeholder, TemplateError> {
    let accepted = "a placeholder is `{name}` or `{name.field}` (fields may nest, tuple \
                    indices are allowed), where `name` is a parameter of the function";
    if inner.is_empty() {
        return Err(TemplateError(format!(
            "empty placeholder `{{}}` in `key`: {accepted}; write `{{{{}}}}` for literal braces"
        )));
    }
    let mut segments = inner.split('.');
    let root = segments.next().unwrap_or_default();
    if !is_identifier(root) {
        return Err(TemplateError(format!(
            "invalid placeholder `{{{inner}}}` in `key`: `{root}` is not a parameter name; \
             {accepted}"
        )));
    }
    let mut fields = Vec::new();
    for field in segments {
        if !is_identifier(field) && !is_index(field) {
            return Err(TemplateError(format!(
                "invalid placeholder `{{{inner}}}` in `key`: `{field}` is not a field name or \
                 tuple index; {accepted}"
            )));
        }
        fields.push(field.to_owned());
    }
    Ok(Placeholder {
        root: root.to_owned(),
        fields,
    })
}

/// An identifier as a parameter or field would be written (`r#` raw identifiers included).
/// Keywords other than `self` are left for the binding lookup to reject.
fn is_identifier(s: &str) -> bool {
    let s = s.strip_prefix("r#").unwrap_or(s);
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
        && s != "_"
}

/// A tuple index: decimal digits without a leading zero.
fn is_index(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> Part {
        Part::Literal(s.to_owned())
    }

    fn ph(root: &str, fields: &[&str]) -> Part {
        Part::Placeholder(Placeholder {
            root: root.to_owned(),
            fields: fields.iter().map(|f| (*f).to_owned()).collect(),
        })
    }

    #[test]
    fn literal_text_and_placeholders() {
        assert_eq!(parse("jobs").unwrap(), vec![lit("jobs")]);
        assert_eq!(
            parse("order:{order_id}").unwrap(),
            vec![lit("order:"), ph("order_id", &[])]
        );
        assert_eq!(
            parse("{a}:{b}").unwrap(),
            vec![ph("a", &[]), lit(":"), ph("b", &[])]
        );
        assert_eq!(
            parse("u:{self.user.id}/{pair.0}").unwrap(),
            vec![
                lit("u:"),
                ph("self", &["user", "id"]),
                lit("/"),
                ph("pair", &["0"])
            ]
        );
        assert_eq!(parse("{r#type}").unwrap(), vec![ph("r#type", &[])]);
        assert_eq!(parse("").unwrap(), vec![]);
    }

    #[test]
    fn doubled_braces_are_literal() {
        assert_eq!(parse("{{x}}").unwrap(), vec![lit("{x}")]);
        assert_eq!(
            parse("a{{{id}}}b").unwrap(),
            vec![lit("a{"), ph("id", &[]), lit("}b")]
        );
    }

    #[test]
    fn malformed_templates_say_what_is_accepted() {
        let err = |t: &str| parse(t).unwrap_err().0;
        assert!(err("order:{id").contains("unclosed `{` at byte 6"));
        assert!(err("order:{a{b}").contains("cannot contain `{`"));
        assert!(err("order:}").contains("unmatched `}` at byte 6"));
        assert!(err("order:{}").contains("empty placeholder"));
        assert!(err("{ id }").contains("is not a parameter name"));
        assert!(err("{a..b}").contains("`` is not a field name"));
        assert!(err("{a.01}").contains("`01` is not a field name"));
        assert!(err("{1}").contains("`1` is not a parameter name"));
        assert!(err("{_}").contains("`_` is not a parameter name"));
    }

    #[test]
    fn placeholders_display_as_written() {
        let Part::Placeholder(p) = &parse("{a.b.0}").unwrap()[0] else {
            panic!("not a placeholder");
        };
        assert_eq!(p.to_string(), "{a.b.0}");
    }
}
