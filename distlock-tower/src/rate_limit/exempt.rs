//! Requests a rate-limit layer lets through without a check: a skip predicate, an allow-list
//! of keys, and trusted networks. None costs a round trip, and each is recorded.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use http::{Extensions, HeaderMap, Method, Request, Uri};

use crate::client_ip::{Cidr, peer_addr};

/// Why a rate-limit layer let a request through without checking it, in the response's
/// extensions (next to [`Checks`](super::Checks), which such a request does not get from this
/// layer), in a `debug` event of the target `distlock_tower`, and, with the `metrics`
/// feature, in the counter `distlock_ratelimit_exempt_total{reason}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Exemption {
    /// The layer's [`skip`](super::RateLimitLayerBuilder::skip) predicate said so.
    Skipped,
    /// The request's key is on the layer's
    /// [`allow_keys`](super::RateLimitLayerBuilder::allow_keys) list.
    AllowedKey,
    /// The connection's peer is in one of the layer's
    /// [`allow_networks`](super::RateLimitLayerBuilder::allow_networks).
    TrustedNetwork,
}

impl Exemption {
    /// The metrics label and log word: `skipped`, `allowed_key`, `trusted_network`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skipped => "skipped",
            Self::AllowedKey => "allowed_key",
            Self::TrustedNetwork => "trusted_network",
        }
    }
}

impl fmt::Display for Exemption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a [`skip`](super::RateLimitLayerBuilder::skip) predicate sees of a request: its head,
/// never its body.
#[derive(Debug)]
#[non_exhaustive]
pub struct RequestHead<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI (path and query).
    pub uri: &'a Uri,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The extensions (axum's `ConnectInfo`, `MatchedPath`, your own middleware's).
    pub extensions: &'a Extensions,
}

impl<'a> RequestHead<'a> {
    pub(crate) fn of<B>(request: &'a Request<B>) -> Self {
        Self {
            method: request.method(),
            uri: request.uri(),
            headers: request.headers(),
            extensions: request.extensions(),
        }
    }
}

type Predicate = Arc<dyn Fn(&RequestHead<'_>) -> bool + Send + Sync>;

/// The exemptions a layer is set with.
#[derive(Clone, Default)]
pub(crate) struct Exemptions {
    pub(crate) skip: Option<Predicate>,
    pub(crate) keys: HashSet<String>,
    pub(crate) networks: Vec<Cidr>,
}

impl Exemptions {
    /// Whether the request passes before its key is read: the predicate, then the peer.
    pub(crate) fn before_key<B>(&self, request: &Request<B>) -> Option<Exemption> {
        if let Some(skip) = &self.skip
            && skip(&RequestHead::of(request))
        {
            return Some(Exemption::Skipped);
        }
        if !self.networks.is_empty()
            && let Some(peer) = peer_addr(request.extensions())
            && self.networks.iter().any(|net| net.contains(peer.ip()))
        {
            return Some(Exemption::TrustedNetwork);
        }
        None
    }

    /// Whether the request's key is allowed through.
    pub(crate) fn for_key(&self, key: &str) -> Option<Exemption> {
        self.keys.contains(key).then_some(Exemption::AllowedKey)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.skip.is_none() && self.keys.is_empty() && self.networks.is_empty()
    }
}

impl fmt::Debug for Exemptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exemptions")
            .field("skip", &self.skip.is_some())
            .field("keys", &self.keys.len())
            .field("networks", &self.networks)
            .finish()
    }
}

/// Records that `exemption` let a request through: a debug event and the counter.
pub(crate) fn record(exemption: Exemption) {
    tracing::debug!(
        reason = exemption.as_str(),
        "request exempt from the rate limit; passing it unmetered"
    );
    #[cfg(feature = "metrics")]
    metrics::counter!("distlock_ratelimit_exempt_total", "reason" => exemption.as_str())
        .increment(1);
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;

    #[test]
    fn each_exemption_is_counted_by_reason() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            record(Exemption::Skipped);
            record(Exemption::Skipped);
            record(Exemption::TrustedNetwork);
        });
        let mut counted: Vec<(String, u64)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == "distlock_ratelimit_exempt_total")
            .map(|(key, _, _, value)| {
                let reason = key
                    .key()
                    .labels()
                    .find(|l| l.key() == "reason")
                    .map(|l| l.value().to_owned())
                    .unwrap_or_default();
                let DebugValue::Counter(n) = value else {
                    panic!("a counter")
                };
                (reason, n)
            })
            .collect();
        counted.sort();
        assert_eq!(
            counted,
            [("skipped".to_owned(), 2), ("trusted_network".to_owned(), 1)]
        );
    }
}
