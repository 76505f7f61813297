use std::sync::Arc;
use std::time::Duration;

use distlock::idempotency::{DEFAULT_LEASE_TTL, Idempotency, MAX_RECORD_LEN, MAX_RECORD_TTL};
use distlock::{Capability, Client, IdempotencyError, MAX_TTL, MIN_TTL};
use http::{HeaderName, Method};

use super::Idempotent;
use crate::config_error::ConfigError;
use crate::extract::MissingKey;
use crate::refusal::{MakeRefusal, PlainText};

/// The default header the key is read from.
pub const DEFAULT_HEADER: &str = "idempotency-key";
/// The header every replayed response carries, with the value `true`.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// How long a stored response is replayed unless the builder says otherwise (24 hours).
pub const DEFAULT_RECORD_TTL: Duration = Duration::from_secs(24 * 3600);
/// The default cap on a request body (it is read whole to be fingerprinted): 1 MiB.
pub const DEFAULT_MAX_REQUEST_BODY: usize = 1 << 20;
/// The default cap on a stored response body: 1 MiB.
pub const DEFAULT_MAX_RESPONSE_BODY: usize = 1 << 20;
/// The response headers stored and replayed unless the builder says otherwise.
pub const DEFAULT_STORED_HEADERS: [&str; 6] = [
    "content-type",
    "content-encoding",
    "content-language",
    "location",
    "etag",
    "last-modified",
];

/// The settings every service of one layer shares.
pub(crate) struct Config<R> {
    pub(crate) idempotency: Idempotency,
    pub(crate) header: HeaderName,
    pub(crate) methods: Vec<Method>,
    pub(crate) missing_key: MissingKey,
    pub(crate) record_ttl: Duration,
    pub(crate) max_request_body: usize,
    pub(crate) max_response_body: usize,
    pub(crate) stored_headers: Vec<HeaderName>,
    pub(crate) store_server_errors: bool,
    pub(crate) refusal: R,
}

/// Applies the [`Idempotent`] middleware: the first request with an idempotency key runs, its
/// response is stored and replayed to the key's later requests. See the
/// [module docs](super) for what is answered when, and an example.
///
/// Made by [`builder`](Self::builder), whose [`build`](IdempotencyLayerBuilder::build) checks
/// every setting and returns a [`ConfigError`] for one out of range, or for a client whose
/// store cannot keep records (a Redlock quorum).
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
    /// 64 characters of `[A-Za-z0-9._-]`; give each API its own).
    pub fn builder(client: Client, namespace: impl Into<String>) -> IdempotencyLayerBuilder {
        IdempotencyLayerBuilder {
            client,
            namespace: namespace.into(),
            header: DEFAULT_HEADER.to_owned(),
            methods: vec![Method::POST, Method::PATCH],
            missing_key: MissingKey::Reject,
            lease_ttl: DEFAULT_LEASE_TTL,
            wait: Duration::ZERO,
            record_ttl: DEFAULT_RECORD_TTL,
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
    lease_ttl: Duration,
    wait: Duration,
    record_ttl: Duration,
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
            .finish_non_exhaustive()
    }
}

impl<R> IdempotencyLayerBuilder<R> {
    /// The header the key is read from (default `Idempotency-Key`).
    pub fn header(mut self, name: impl Into<String>) -> Self {
        self.header = name.into();
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

    /// How long a stored response is replayed (default 24 hours; 1 ms to 366 days).
    pub fn record_ttl(mut self, ttl: Duration) -> Self {
        self.record_ttl = ttl;
        self
    }

    /// The largest request body taken (default 1 MiB): it is read whole to fingerprint the
    /// request; a larger one is answered `413 Content Too Large` without running.
    pub fn max_request_body(mut self, bytes: usize) -> Self {
        self.max_request_body = bytes;
        self
    }

    /// The largest response body stored (default 1 MiB, at most 60 MiB). A larger response
    /// is sent as it is, but not stored: its key is freed, and the next request with it runs
    /// again.
    pub fn max_response_body(mut self, bytes: usize) -> Self {
        self.max_response_body = bytes;
        self
    }

    /// The response headers stored and replayed (default [`DEFAULT_STORED_HEADERS`]). Others
    /// (`set-cookie`, `date`, the rate-limit fields...) are not replayed.
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
            lease_ttl: self.lease_ttl,
            wait: self.wait,
            record_ttl: self.record_ttl,
            max_request_body: self.max_request_body,
            max_response_body: self.max_response_body,
            stored_headers: self.stored_headers,
            store_server_errors: self.store_server_errors,
            refusal: make,
        }
    }

    /// The layer, or the first setting it cannot work with:
    /// [`ConfigError::UnsupportedStore`] for a client whose locks go to a Redlock quorum,
    /// [`ConfigError::TtlOutOfRange`] for a lease ttl outside
    /// [`MIN_TTL`]`..=`[`MAX_TTL`], [`ConfigError::InvalidHeaderName`], and
    /// [`ConfigError::InvalidSetting`] for a bad namespace, record ttl or response cap.
    pub fn build(self) -> Result<IdempotencyLayer<R>, ConfigError> {
        self.client.supports(Capability::IdempotencyRecords)?;
        if !(MIN_TTL..=MAX_TTL).contains(&self.lease_ttl) {
            return Err(ConfigError::TtlOutOfRange {
                ttl: self.lease_ttl,
                min: MIN_TTL,
                max: MAX_TTL,
            });
        }
        if self.record_ttl < Duration::from_millis(1) || self.record_ttl > MAX_RECORD_TTL {
            return Err(ConfigError::InvalidSetting {
                setting: "record_ttl",
                reason: format!("{:?} is outside 1ms..={MAX_RECORD_TTL:?}", self.record_ttl),
            });
        }
        // Room for the status, the headers and the fingerprint beside the body.
        let max_body = MAX_RECORD_LEN - (4 << 20);
        if self.max_response_body > max_body {
            return Err(ConfigError::InvalidSetting {
                setting: "max_response_body",
                reason: format!("{} bytes is over {max_body}", self.max_response_body),
            });
        }
        let header_name = |name: &str| {
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
        let idempotency = self
            .client
            .idempotency(self.namespace)
            .and_then(|i| i.lease_ttl(self.lease_ttl))
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
            .wait(self.wait);
        Ok(IdempotencyLayer {
            config: Arc::new(Config {
                idempotency,
                header,
                methods: self.methods,
                missing_key: self.missing_key,
                record_ttl: self.record_ttl,
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
        IdempotencyLayer::builder(Client::in_memory(), "api")
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
                IdempotencyLayer::builder(Client::in_memory(), namespace).build(),
                Err(ConfigError::InvalidSetting {
                    setting: "namespace",
                    ..
                })
            ));
        }
        // Unchecked settings at their extremes are answered, never a panic.
        for d in [Duration::ZERO, Duration::MAX] {
            assert!(
                builder()
                    .wait(d)
                    .max_request_body(usize::MAX)
                    .build()
                    .is_ok()
            );
        }
    }
}
