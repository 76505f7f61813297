use std::sync::Arc;
use std::time::Duration;

use distlock::idempotency::{DEFAULT_LEASE_TTL, Idempotency, MAX_RECORD_LEN, MAX_RECORD_TTL};
use distlock::{Capability, Client, IdempotencyError};
use http::{HeaderName, Method, Request};

use super::Idempotent;
use crate::config_error::ConfigError;
use crate::extract::{ExtractKey, Extracted, MAX_HEADER_NAME_LEN, MissingKey};
use crate::refusal::{MakeRefusal, PlainText};

/// The default header the key is read from.
pub const DEFAULT_HEADER: &str = "idempotency-key";
/// The header every replayed response carries, with the value `true`.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// How long a stored response is replayed unless the builder says otherwise (24 hours).
pub const DEFAULT_RECORD_TTL: Duration = Duration::from_secs(24 * 3600);
/// The default cap on a request body (it is read whole to be fingerprinted): 1 MiB.
pub const DEFAULT_MAX_REQUEST_BODY: usize = 1 << 20;
/// The largest request-body cap a layer takes: 64 MiB. The body is held in memory while it
/// is read, so the cap is a bound on what one request can make the server hold.
pub const MAX_REQUEST_BODY: usize = 64 << 20;
/// The default cap on a stored response body: 1 MiB.
pub const DEFAULT_MAX_RESPONSE_BODY: usize = 1 << 20;
/// How long a request may run under its claim unless the builder says otherwise (5 minutes):
/// a handler still running then is stopped, and its outcome is unknown.
pub const DEFAULT_MAX_RUN: Duration = Duration::from_secs(300);
/// The response headers stored and replayed unless the builder says otherwise.
pub const DEFAULT_STORED_HEADERS: [&str; 6] = [
    "content-type",
    "content-encoding",
    "content-language",
    "location",
    "etag",
    "last-modified",
];
/// Headers that carry credentials or a session: never stored, so never replayed to anyone.
pub const REFUSED_STORED_HEADERS: [&str; 7] = [
    "set-cookie",
    "set-cookie2",
    "cookie",
    "authorization",
    "proxy-authorization",
    "www-authenticate",
    "proxy-authenticate",
];

/// Reads who sends a request from its head.
pub(crate) type ReadScope = dyn Fn(&Request<()>) -> Extracted + Send + Sync;

/// Who sends a request: the scope its key belongs to.
pub(crate) enum ScopeSource {
    /// Every caller shares the keys (said by name: [`IdempotencyLayerBuilder::scope_global`]).
    Global,
    /// The caller, read from the request's head.
    Caller(Arc<ReadScope>),
}

/// The settings every service of one layer shares.
pub(crate) struct Config<R> {
    pub(crate) idempotency: Idempotency,
    pub(crate) header: HeaderName,
    pub(crate) methods: Vec<Method>,
    pub(crate) missing_key: MissingKey,
    pub(crate) scope: ScopeSource,
    pub(crate) min_key_len: usize,
    pub(crate) max_request_body: usize,
    pub(crate) max_response_body: usize,
    pub(crate) stored_headers: Vec<HeaderName>,
    pub(crate) store_server_errors: bool,
    pub(crate) refusal: R,
}

/// Applies the [`Idempotent`] middleware: the first request with an idempotency key runs, its
/// response is stored and replayed to the key's later requests (of the same caller). See the
/// [module docs](super) for what is answered when, and an example.
///
/// Made by [`builder`](Self::builder), whose [`build`](IdempotencyLayerBuilder::build) checks
/// every setting and returns a [`ConfigError`] for one out of range, for a layer that does
/// not say whose keys it keeps ([`scope`](IdempotencyLayerBuilder::scope) or
/// [`scope_global`](IdempotencyLayerBuilder::scope_global)), or for a client whose store
/// cannot keep records (a Redlock quorum).
#[must_use = "a layer does nothing until it wraps a service"]
pub struct IdempotencyLayer<R = PlainText> {
    pub(crate) config: Arc<Config<R>>,
}

impl<R> Clone for IdempotencyLayer<R> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
        }
    }
}

impl<R> std::fmt::Debug for IdempotencyLayer<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("namespace", &self.config.idempotency.namespace())
            .field("header", &self.config.header)
            .field("methods", &self.config.methods)
            .finish_non_exhaustive()
    }
}

impl<S, R> tower::Layer<S> for IdempotencyLayer<R> {
    type Service = Idempotent<S, R>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotent {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}

impl IdempotencyLayer {
    /// A builder for a layer keeping its records in `client`'s store under `namespace` (1 to
    /// 64 characters of `[A-Za-z0-9._-]`; give each API its own). Say whose keys they are
    /// before building: [`scope`](IdempotencyLayerBuilder::scope) or
    /// [`scope_global`](IdempotencyLayerBuilder::scope_global).
    pub fn builder(client: Client, namespace: impl Into<String>) -> IdempotencyLayerBuilder {
        IdempotencyLayerBuilder {
            client,
            namespace: namespace.into(),
            header: DEFAULT_HEADER.to_owned(),
            methods: vec![Method::POST, Method::PATCH],
            missing_key: MissingKey::Reject,
            scope: None,
            min_key_len: 1,
            lease_ttl: DEFAULT_LEASE_TTL,
            wait: Duration::ZERO,
            record_ttl: DEFAULT_RECORD_TTL,
            max_run: Some(DEFAULT_MAX_RUN),
            rerun_interrupted: false,
            max_request_body: DEFAULT_MAX_REQUEST_BODY,
            max_response_body: DEFAULT_MAX_RESPONSE_BODY,
            stored_headers: DEFAULT_STORED_HEADERS
                .iter()
                .map(|h| (*h).to_owned())
                .collect(),
            store_server_errors: false,
            refusal: PlainText,
        }
    }
}

/// The settings of an [`IdempotencyLayer`], checked together by [`build`](Self::build).
#[must_use = "a builder does nothing until it is built"]
pub struct IdempotencyLayerBuilder<R = PlainText> {
    client: Client,
    namespace: String,
    header: String,
    methods: Vec<Method>,
    missing_key: MissingKey,
    scope: Option<ScopeSource>,
    min_key_len: usize,
    lease_ttl: Duration,
    wait: Duration,
    record_ttl: Duration,
    max_run: Option<Duration>,
    rerun_interrupted: bool,
    max_request_body: usize,
    max_response_body: usize,
    stored_headers: Vec<String>,
    store_server_errors: bool,
    refusal: R,
}

impl<R> std::fmt::Debug for IdempotencyLayerBuilder<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayerBuilder")
            .field("namespace", &self.namespace)
            .field("header", &self.header)
            .field("methods", &self.methods)
            .field(
                "scope",
                &match self.scope {
                    None => "unset",
                    Some(ScopeSource::Global) => "global",
                    Some(ScopeSource::Caller(_)) => "caller",
                },
            )
            .finish_non_exhaustive()
    }
}

impl<R> IdempotencyLayerBuilder<R> {
    /// Who sends each request: keys are the caller's, so two callers that send the same key
    /// (and the same body) each get their own run, and neither ever sees the other's
    /// response. `extract` reads the caller from the request's head, as a key extractor
    /// does (see [`extract`](crate::extract)): the user id your authentication layer put in
    /// the extensions, a tenant header your gateway sets, an API key's id. Read it from
    /// something the caller cannot choose freely; a closure takes `&Request<()>`:
    ///
    /// ```
    /// # fn main() -> Result<(), distlock_tower::ConfigError> {
    /// use distlock_tower::IdempotencyLayer;
    /// use http::Request;
    ///
    /// /// What an authentication layer put in the request (yours will differ).
    /// #[derive(Clone)]
    /// struct Account(String);
    ///
    /// let layer = IdempotencyLayer::builder(distlock::Client::in_memory(), "payments")
    ///     .scope(|request: &Request<()>| {
    ///         request.extensions().get::<Account>().map(|account| account.0.clone())
    ///     })
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    ///
    /// A request whose caller the extractor cannot find (or finds malformed) is answered
    /// `400` ([`Reason::MissingScope`](crate::refusal::Reason::MissingScope)) without
    /// running. The caller's id is hashed into the record's name, never stored as it is.
    pub fn scope<K: ExtractKey<()>>(mut self, extract: K) -> Self {
        self.scope = Some(ScopeSource::Caller(Arc::new(
            move |request: &Request<()>| extract.extract_key(request),
        )));
        self
    }

    /// Shares every key among every caller: whoever sends a key gets the response stored
    /// under it. Only for an API whose callers trust each other (one internal client), or
    /// whose keys nobody else can guess; otherwise use [`scope`](Self::scope).
    pub fn scope_global(mut self) -> Self {
        self.scope = Some(ScopeSource::Global);
        self
    }

    /// The header the key is read from (default `Idempotency-Key`).
    pub fn header(mut self, name: impl Into<String>) -> Self {
        self.header = name.into();
        self
    }

    /// The shortest key taken, in bytes (default 1): a shorter one is answered `400`. A
    /// version-4 UUID, which the IETF draft suggests, has 36.
    pub fn min_key_len(mut self, bytes: usize) -> Self {
        self.min_key_len = bytes;
        self
    }

    /// The methods whose requests need a key (default `POST` and `PATCH`, as the draft
    /// suggests: they are the ones that are not idempotent by themselves). Requests with other
    /// methods pass through untouched, with or without a key.
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = methods.into_iter().collect();
        self
    }

    /// What a request of one of the [`methods`](Self::methods) without the header gets:
    /// [`MissingKey::Reject`] (`400`, the default) or [`MissingKey::Allow`] (it runs, nothing
    /// is stored). A header that is there but malformed is always `400`.
    pub fn on_missing_key(mut self, behaviour: MissingKey) -> Self {
        self.missing_key = behaviour;
        self
    }

    /// The ttl of the claim the first request runs under (default 30 s), renewed while it runs:
    /// how long a key stays claimed after the process running its request died.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// How long a request waits while another with its key runs, to be answered with that
    /// one's response (default zero: `409 Conflict` at once). `Duration::MAX`: no bound.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// How long a stored response is replayed, and how long the marker of a request that
    /// never finished answers "outcome unknown" (default 24 hours; 1 ms to 366 days).
    pub fn record_ttl(mut self, ttl: Duration) -> Self {
        self.record_ttl = ttl;
        self
    }

    /// The longest a request runs under its claim (default [`DEFAULT_MAX_RUN`], 5 minutes):
    /// a handler still running then is stopped, and its outcome is unknown. `None`: no bound
    /// (a handler that never returns then holds its key, and its task, for ever).
    pub fn max_run(mut self, max_run: Option<Duration>) -> Self {
        self.max_run = max_run;
        self
    }

    /// Lets a request whose first attempt was cut short run again: no "outcome unknown"
    /// record is left by a crash, a lost claim, a handler that panicked or a response over
    /// the cap, so the key's next request runs. Only for handlers that are safe to run
    /// twice. (A client that leaves, or an outer timeout, never cuts a request short: its
    /// handler runs to its end either way.)
    pub fn rerun_interrupted(mut self) -> Self {
        self.rerun_interrupted = true;
        self
    }

    /// The largest request body taken (default 1 MiB, at most [`MAX_REQUEST_BODY`]): it is
    /// read whole to fingerprint the request; a larger one is answered `413 Content Too
    /// Large` without running.
    pub fn max_request_body(mut self, bytes: usize) -> Self {
        self.max_request_body = bytes;
        self
    }

    /// The largest response body stored (default 1 MiB, at most 60 MiB). A first response
    /// is read whole before it is sent, up to this cap. A larger one is sent as it is, but
    /// not stored: its key's later requests are answered `409`
    /// ([`ResponseNotKept`](crate::refusal::Reason::ResponseNotKept)), not run again.
    pub fn max_response_body(mut self, bytes: usize) -> Self {
        self.max_response_body = bytes;
        self
    }

    /// The response headers stored and replayed (default [`DEFAULT_STORED_HEADERS`]). Others
    /// (`date`, the rate-limit fields...) are not replayed; those that carry credentials or a
    /// session ([`REFUSED_STORED_HEADERS`]: `set-cookie`, `authorization`...) are refused at
    /// [`build`](Self::build), since a replay hands them to whoever sends the key.
    pub fn stored_headers<I, T>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        self.stored_headers = names.into_iter().map(Into::into).collect();
        self
    }

    /// Whether `5xx` responses are stored and replayed too (default `false`: a server error
    /// frees the key, so the client's retry runs again).
    pub fn store_server_errors(mut self, store: bool) -> Self {
        self.store_server_errors = store;
        self
    }

    /// The responses the layer makes itself (`400`, `409`, `413`, `422`, `503`): see
    /// [`refusal`](crate::refusal).
    pub fn refusal<M: MakeRefusal>(self, make: M) -> IdempotencyLayerBuilder<M> {
        IdempotencyLayerBuilder {
            client: self.client,
            namespace: self.namespace,
            header: self.header,
            methods: self.methods,
            missing_key: self.missing_key,
            scope: self.scope,
            min_key_len: self.min_key_len,
            lease_ttl: self.lease_ttl,
            wait: self.wait,
            record_ttl: self.record_ttl,
            max_run: self.max_run,
            rerun_interrupted: self.rerun_interrupted,
            max_request_body: self.max_request_body,
            max_response_body: self.max_response_body,
            stored_headers: self.stored_headers,
            store_server_errors: self.store_server_errors,
            refusal: make,
        }
    }

    /// The layer, or the first setting it cannot work with:
    /// [`ConfigError::NoScope`] when neither [`scope`](Self::scope) nor
    /// [`scope_global`](Self::scope_global) was said,
    /// [`ConfigError::UnsupportedStore`] for a client whose locks go to a Redlock quorum,
    /// [`ConfigError::TtlOutOfRange`] for a lease ttl outside
    /// [`MIN_TTL`](distlock::MIN_TTL)`..=`[`MAX_TTL`](distlock::MAX_TTL),
    /// [`ConfigError::InvalidHeaderName`], and
    /// [`ConfigError::InvalidSetting`] for a bad namespace, record ttl, `max_run`, body cap
    /// or stored header.
    pub fn build(self) -> Result<IdempotencyLayer<R>, ConfigError> {
        let Some(scope) = self.scope else {
            return Err(ConfigError::NoScope);
        };
        self.client.supports(Capability::IdempotencyRecords)?;
        distlock_grammar::check_ttl(self.lease_ttl).map_err(|range| {
            ConfigError::TtlOutOfRange {
                ttl: range.value,
                min: range.min,
                max: range.max,
            }
        })?;
        let invalid = |setting: &'static str, reason: String| {
            Err(ConfigError::InvalidSetting { setting, reason })
        };
        if self.record_ttl < Duration::from_millis(1) || self.record_ttl > MAX_RECORD_TTL {
            return invalid(
                "record_ttl",
                format!("{:?} is outside 1ms..={MAX_RECORD_TTL:?}", self.record_ttl),
            );
        }
        if self.max_run.is_some_and(|d| d.is_zero()) {
            return invalid("max_run", "must be greater than zero".to_owned());
        }
        if self.max_request_body > MAX_REQUEST_BODY {
            return invalid(
                "max_request_body",
                format!("{} bytes is over {MAX_REQUEST_BODY}", self.max_request_body),
            );
        }
        // Room for the status, the headers and the fingerprint beside the body.
        let max_body = MAX_RECORD_LEN - (4 << 20);
        if self.max_response_body > max_body {
            return invalid(
                "max_response_body",
                format!("{} bytes is over {max_body}", self.max_response_body),
            );
        }
        // Header names far longer than any real one (HTTP allows 64 KiB) are mistakes.
        let header_name = |name: &str| {
            if name.len() > MAX_HEADER_NAME_LEN {
                return Err(ConfigError::HeaderNameTooLong {
                    len: name.len(),
                    max: MAX_HEADER_NAME_LEN,
                });
            }
            HeaderName::try_from(name).map_err(|_| ConfigError::InvalidHeaderName {
                name: name.to_owned(),
            })
        };
        let header = header_name(&self.header)?;
        let stored_headers = self
            .stored_headers
            .iter()
            .map(|name| header_name(name))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(credential) = stored_headers
            .iter()
            .find(|h| REFUSED_STORED_HEADERS.contains(&h.as_str()))
        {
            return invalid(
                "stored_headers",
                format!(
                    "{credential} carries credentials or a session: a replay would hand it to \
                     whoever sends the key"
                ),
            );
        }
        let mut idempotency = self
            .client
            .idempotency(self.namespace)
            .and_then(|i| i.lease_ttl(self.lease_ttl))
            .and_then(|i| i.record_ttl(self.record_ttl))
            .map_err(|err| match err {
                IdempotencyError::UnsupportedStore { reason } => ConfigError::InvalidSetting {
                    setting: "client",
                    reason: reason.to_owned(),
                },
                other => ConfigError::InvalidSetting {
                    setting: "namespace",
                    reason: other.to_string(),
                },
            })?
            .wait(self.wait)
            .rerun_interrupted(self.rerun_interrupted);
        if let Some(max_run) = self.max_run {
            idempotency =
                idempotency
                    .max_run(max_run)
                    .map_err(|err| ConfigError::InvalidSetting {
                        setting: "max_run",
                        reason: err.to_string(),
                    })?;
        }
        Ok(IdempotencyLayer {
            config: Arc::new(Config {
                idempotency,
                header,
                methods: self.methods,
                missing_key: self.missing_key,
                scope,
                min_key_len: self.min_key_len,
                max_request_body: self.max_request_body,
                max_response_body: self.max_response_body,
                stored_headers,
                store_server_errors: self.store_server_errors,
                refusal: self.refusal,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> IdempotencyLayerBuilder {
        IdempotencyLayer::builder(Client::in_memory(), "api").scope_global()
    }

    #[test]
    fn out_of_range_settings_are_typed_errors() {
        assert!(builder().build().is_ok());
        assert!(matches!(
            builder().lease_ttl(Duration::ZERO).build(),
            Err(ConfigError::TtlOutOfRange { .. })
        ));
        for ttl in [Duration::ZERO, MAX_RECORD_TTL + Duration::from_secs(1)] {
            assert!(matches!(
                builder().record_ttl(ttl).build(),
                Err(ConfigError::InvalidSetting {
                    setting: "record_ttl",
                    ..
                })
            ));
        }
        assert!(matches!(
            builder().max_response_body(usize::MAX).build(),
            Err(ConfigError::InvalidSetting {
                setting: "max_response_body",
                ..
            })
        ));
        assert!(matches!(
            builder().header("bad header").build(),
            Err(ConfigError::InvalidHeaderName { .. })
        ));
        assert!(matches!(
            builder().stored_headers(["ok", "not ok"]).build(),
            Err(ConfigError::InvalidHeaderName { .. })
        ));
        for namespace in ["", "has space", "{x}", &"n".repeat(65)] {
            assert!(matches!(
                IdempotencyLayer::builder(Client::in_memory(), namespace)
                    .scope_global()
                    .build(),
                Err(ConfigError::InvalidSetting {
                    setting: "namespace",
                    ..
                })
            ));
        }
        // Unchecked settings at their extremes are answered, never a panic.
        for d in [Duration::ZERO, Duration::MAX] {
            assert!(builder().wait(d).build().is_ok());
        }
        assert!(
            builder()
                .max_request_body(MAX_REQUEST_BODY)
                .max_run(None)
                .build()
                .is_ok()
        );
        for (built, setting) in [
            (
                builder().max_request_body(usize::MAX).build(),
                "max_request_body",
            ),
            (builder().max_run(Some(Duration::ZERO)).build(), "max_run"),
        ] {
            assert!(
                matches!(built, Err(ConfigError::InvalidSetting { setting: s, .. }) if s == setting),
                "{setting}"
            );
        }
    }

    #[test]
    fn a_layer_says_whose_keys_it_keeps() {
        let built = IdempotencyLayer::builder(Client::in_memory(), "api").build();
        assert!(matches!(built, Err(ConfigError::NoScope)), "{built:?}");
        let scoped = IdempotencyLayer::builder(Client::in_memory(), "api")
            .scope(crate::extract::Header::from_static("x-account"))
            .build();
        assert!(scoped.is_ok());
    }

    #[test]
    fn credential_headers_are_never_stored() {
        for credential in REFUSED_STORED_HEADERS {
            let built = builder()
                .stored_headers(["content-type", &credential.to_uppercase()])
                .build();
            assert!(
                matches!(
                    built,
                    Err(ConfigError::InvalidSetting {
                        setting: "stored_headers",
                        ..
                    })
                ),
                "{credential}: {built:?}"
            );
        }
        // A 10 KB header name is refused, and the error does not repeat it.
        let long = "x".repeat(10_000);
        match builder().header(long.as_str()).build() {
            Err(err @ ConfigError::HeaderNameTooLong { len: 10_000, .. }) => {
                assert!(!err.to_string().contains("xxxx"), "{err}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            builder().stored_headers([long.as_str()]).build(),
            Err(ConfigError::HeaderNameTooLong { .. })
        ));
    }
}
