//! [`ProblemDetails`]: refusals as RFC 9457 `application/problem+json` documents.

use std::fmt::Write as _;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response};

use super::{MakeRefusal, Refusal};

/// A [`MakeRefusal`] that answers with an RFC 9457 problem document
/// (`application/problem+json`), for APIs whose clients read errors as JSON:
///
/// ```json
/// {"type":"about:blank","title":"Too Many Requests","status":429,
///  "detail":"too many requests; retry in 2 s","retry_after":2}
/// ```
///
/// * `type` is `about:blank` (the status says it all), or, with
///   [`type_base`](Self::type_base), that URI followed by the [reason's code](super::Reason::code),
///   e.g. `https://api.example.com/problems/lock-busy`.
/// * `title` is the status's reason phrase, as RFC 9457 asks for `about:blank`.
/// * `status` is the response's status; `detail` is [`Refusal::detail`] (it never contains
///   the key).
/// * `retry_after` (an extension member) is the `Retry-After` value in seconds, when there is
///   one; the header is sent too.
/// * `policy` (an extension member) names the rate-limit policy that refused a `429`, unless
///   the layer hides it ([`Refusal::policy`]).
///
/// ```
/// use distlock_tower::LockLayer;
/// use distlock_tower::extract::Header;
/// use distlock_tower::refusal::ProblemDetails;
///
/// let layer = LockLayer::builder(distlock::Client::in_memory(), Header::from_static("x-job"))
///     .refusal(ProblemDetails::new().type_base("https://api.example.com/problems/"))
///     .build()?;
/// # let _ = layer;
/// # Ok::<(), distlock_tower::ConfigError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct ProblemDetails {
    type_base: Option<Arc<str>>,
}

impl ProblemDetails {
    /// Problem documents of type `about:blank`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Problem types of your own: `type` becomes `base` followed by the reason's code
    /// (`too-many-requests`, `lock-busy`, `missing-key`, ...), so `base` usually ends with `/`.
    /// Serve a page there that explains the problem, or leave it as an identifier.
    pub fn type_base(mut self, base: impl Into<Arc<str>>) -> Self {
        self.type_base = Some(base.into());
        self
    }

    /// The JSON document for `refusal`.
    fn document(&self, refusal: &Refusal) -> String {
        let status = refusal.status();
        let type_uri = match &self.type_base {
            Some(base) => format!("{base}{}", refusal.reason().code()),
            None => "about:blank".to_owned(),
        };
        let mut json = String::with_capacity(160);
        json.push_str("{\"type\":");
        push_json_string(&mut json, &type_uri);
        json.push_str(",\"title\":");
        push_json_string(&mut json, status.canonical_reason().unwrap_or("Error"));
        let _ = write!(json, ",\"status\":{}", status.as_u16());
        json.push_str(",\"detail\":");
        push_json_string(&mut json, &refusal.detail());
        if let Some(secs) = refusal.retry_after_secs() {
            let _ = write!(json, ",\"retry_after\":{secs}");
        }
        if let Some(policy) = refusal.policy() {
            json.push_str(",\"policy\":");
            push_json_string(&mut json, policy);
        }
        json.push('}');
        json
    }
}

impl MakeRefusal for ProblemDetails {
    type Body = Bytes;

    fn make_refusal(&self, refusal: &Refusal) -> Response<Bytes> {
        refusal.response(
            HeaderValue::from_static("application/problem+json"),
            Bytes::from(self.document(refusal)),
        )
    }
}

/// Appends `text` as a JSON string. Written out rather than pulling serde into every user's
/// build for five fields: escape `"` and `\`, and every control character as `\u00XX`
/// (RFC 8259, section 7); everything else is UTF-8 as it is.
pub(crate) fn push_json_string(json: &mut String, text: &str) {
    json.push('"');
    for c in text.chars() {
        match c {
            '"' => json.push_str("\\\""),
            '\\' => json.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(json, "\\u{:04x}", u32::from(c));
            }
            c => json.push(c),
        }
    }
    json.push('"');
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::*;
    use crate::extract::InvalidKey;
    use crate::refusal::RefusedBy;

    fn parse(response: &Response<Bytes>) -> serde_json::Value {
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        serde_json::from_slice(response.body()).expect("valid JSON")
    }

    #[test]
    fn documents_parse_with_the_rfc_9457_members() {
        let refusal = Refusal::lease_lost_by(RefusedBy::Lock, "order:1");
        let response = ProblemDetails::new().make_refusal(&refusal);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()["retry-after"], "1");
        let json = parse(&response);
        assert_eq!(json["type"], "about:blank");
        assert_eq!(json["title"], "Service Unavailable");
        assert_eq!(json["status"], 503);
        assert_eq!(
            json["detail"],
            "the lock was lost while handling this request"
        );
        assert_eq!(json["retry_after"], 1);
        assert!(!response.body().windows(7).any(|w| w == b"order:1"));

        let refusal = Refusal::missing_key(RefusedBy::RateLimit);
        let json = parse(
            &ProblemDetails::new()
                .type_base("https://api.example.com/problems/")
                .make_refusal(&refusal),
        );
        assert_eq!(json["type"], "https://api.example.com/problems/missing-key");
        assert_eq!(json["title"], "Bad Request");
        assert!(json.get("retry_after").is_none());
    }

    #[test]
    fn hostile_text_is_escaped() {
        let why = InvalidKey::custom("a \"quoted\" \\ back\nslash\u{1}\u{e9}");
        let refusal = Refusal::invalid_key(RefusedBy::Lock, why);
        let json = parse(&refusal.problem_response());
        assert_eq!(
            json["detail"],
            "this request's lock key is invalid: a \"quoted\" \\ back\nslash\u{1}\u{e9}"
        );
    }
}
