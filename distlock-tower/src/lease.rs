//! What the lock layer and the concurrency limit share: one option block ([`LeaseOptions`]:
//! the key, the missing-key rule, the refusal hook, the lease's ttl, wait, watchdog and
//! maximum hold) and one path per request ([`call`]: read the key, take the lease, call the
//! inner service under it, and hand the lease to the response body).
//!
//! Each of the two layers says what it takes and how it tells about it through
//! [`LeaseKind`]: a lock named by the key, or a permit of the semaphore named by the key.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use distlock::{Client, Lease, LeaseHandle, LockOptions};
use http::{Request, Response};
use http_body::Body;
use tower::Service;

use crate::config_error::ConfigError;
use crate::extract::{ExtractKey, Extracted, MissingKey};
use crate::holds::{HoldTimer, RecentHolds};
use crate::lock::ResponseFuture;
use crate::lock::body::{self, ResponseBody};
use crate::readiness::InnerService;
use crate::refusal::{MakeRefusal, PlainText, Refusal, RefusedBy, is_grpc};
use crate::settings::LayerConfig;
use crate::wrapped::{WrappedBody, WrappedService};

/// The name space every lock and semaphore name of a [`LockLayer`](crate::LockLayer) or
/// [`ConcurrencyLimitLayer`](crate::ConcurrencyLimitLayer) lives in unless its builder's
/// `namespace` says otherwise: a request keyed `order:42` takes `http/order:42`.
pub const DEFAULT_NAMESPACE: &str = "http";

/// How long a request of a [`LockLayer`](crate::LockLayer) or
/// [`ConcurrencyLimitLayer`](crate::ConcurrencyLimitLayer) may hold its lease unless the
/// builder's `max_hold` says otherwise: 5 minutes (a client that stops reading a streamed
/// body cannot keep a lock for ever).
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(300);

/// The settings of a layer whose requests each hold a lease: the options both layers take,
/// what this layer alone takes (`kind`), and the refusal hook.
pub(crate) type LeaseConfig<K, X, R> = LayerConfig<LeaseOptions<K, X>, R>;

/// The options of a layer whose requests each hold a lease, as its builder collects them:
/// the ones both layers take, and `kind`, what only this one takes.
#[derive(Clone)]
pub(crate) struct LeaseOptions<K, X> {
    pub(crate) client: Client,
    /// Where a request's key comes from.
    pub(crate) extract: K,
    /// The lease's own options (ttl, wait, watchdog, maximum hold), checked by the runtime.
    pub(crate) lease: LockOptions,
    pub(crate) missing_key: MissingKey,
    /// The name space of every name this layer takes (`<namespace>/<key>`).
    pub(crate) namespace: Arc<str>,
    pub(crate) kind: X,
    /// How long this layer's requests held their leases lately (shared by the layer's
    /// clones).
    pub(crate) holds: Arc<RecentHolds>,
}

impl<K, X: std::fmt::Debug> std::fmt::Debug for LeaseOptions<K, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseOptions")
            .field("lease", &self.lease)
            .field("missing_key", &self.missing_key)
            .field("namespace", &self.namespace)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl<K, X> LeaseOptions<K, X> {
    /// The defaults (ttl 30 s renewed by the watchdog, no waiting, at most
    /// [`DEFAULT_MAX_HOLD`], names under [`DEFAULT_NAMESPACE`], `400` for a request without a
    /// key), with plain-text refusals.
    pub(crate) fn defaults(client: Client, extract: K, kind: X) -> LeaseConfig<K, X, PlainText> {
        LayerConfig {
            options: Self {
                client,
                extract,
                // A request is answered `503` at the first store error rather than waiting
                // out a failover.
                lease: LockOptions::new()
                    .max_hold(DEFAULT_MAX_HOLD)
                    .store_patience(Duration::ZERO),
                missing_key: MissingKey::default(),
                namespace: Arc::from(DEFAULT_NAMESPACE),
                kind,
                holds: Arc::default(),
            },
            refusal: PlainText,
        }
    }

    /// The first setting the runtime would refuse at every request.
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        self.lease
            .check()
            .map_err(|invalid| match invalid.field() {
                "ttl" => ConfigError::TtlOutOfRange {
                    ttl: self.lease.get_ttl(),
                    min: distlock::MIN_TTL,
                    max: distlock::MAX_TTL,
                },
                "max_hold" => ConfigError::ZeroMaxHold,
                setting => ConfigError::InvalidSetting {
                    setting,
                    reason: invalid.reason().to_owned(),
                },
            })?;
        check_namespace(&self.namespace)
    }

    /// The lease's options for one attempt that waits up to `wait`.
    pub(crate) fn lease_waiting(&self, wait: Duration) -> LockOptions {
        self.lease.clone().wait(wait)
    }

    /// The name a request keyed `key` takes: `<namespace>/<key>`.
    pub(crate) fn name_of(&self, key: &str) -> String {
        let mut name = String::with_capacity(self.namespace.len() + 1 + key.len());
        name.push_str(&self.namespace);
        name.push('/');
        name.push_str(key);
        name
    }
}

/// Whether `namespace` can hold a layer's names: 1 to 64 characters of `[A-Za-z0-9._-]`, and
/// not one the runtime keeps for itself (`idempotency`, whose claims would then be within
/// reach of a request's key).
pub(crate) fn check_namespace(namespace: &str) -> Result<(), ConfigError> {
    let valid = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    let reason = if namespace.is_empty() || namespace.len() > 64 || !namespace.bytes().all(valid) {
        "must be 1 to 64 characters of [A-Za-z0-9._-]"
    } else if distlock::idempotency::CLAIM_NAME_PREFIX
        .strip_suffix('/')
        .is_some_and(|reserved| reserved == namespace)
    {
        "is where idempotency claims live: a request's key must never name one"
    } else {
        return Ok(());
    };
    Err(ConfigError::InvalidSetting {
        setting: "namespace",
        reason: format!("{namespace:?} {reason}"),
    })
}

/// What a layer whose requests each hold a lease takes for a key, and how it tells about it
/// (each layer's events keep their own target, fields and words): implemented by the lock
/// layer's and the concurrency limit's own options.
pub(crate) trait LeaseKind: Sized + Send + Sync + 'static {
    /// What the handler finds in its request's extensions (and outer layers in the
    /// response's): `HeldLock` or `HeldPermit`.
    type Held: Clone + Send + Sync + 'static;

    /// Which layer refuses.
    const REFUSED_BY: RefusedBy;

    /// Takes the lease for `key`, or says how to refuse the request.
    fn acquire<K: Sync>(
        options: &LeaseOptions<K, Self>,
        key: &str,
    ) -> impl Future<Output = Result<Lease, Refusal>> + Send;

    /// The handler's view of the lease.
    fn held(handle: LeaseHandle) -> Self::Held;

    /// A request without a key, let through (`Allow`) or answered `400` (`Reject`).
    fn log_without_key(hint: Option<&'static str>, behaviour: MissingKey);

    /// The lease on `key` was lost while the handler ran.
    fn log_lost(key: &str, handle: &LeaseHandle);

    /// The layer answers `refusal` itself.
    fn log_refused(refusal: &Refusal);

    /// A request held its lease for `latency` until its response head (its handler's time):
    /// for a limit that follows latency. Nothing by default.
    fn observed<K>(options: &LeaseOptions<K, Self>, latency: Duration) {
        let _ = (options, latency);
    }
}

/// The `call` of both services: reads the key and answers a request without a usable one at
/// once; otherwise the response future takes the lease and calls the inner service under it.
pub(crate) fn call<S, K, X, R, ReqBody, ResBody>(
    inner: &mut S,
    config: &Arc<LeaseConfig<K, X, R>>,
    request: Request<ReqBody>,
) -> ResponseFuture<ResBody, S::Error>
where
    S: WrappedService<ReqBody, ResBody>,
    K: ExtractKey<ReqBody>,
    X: LeaseKind,
    R: MakeRefusal,
    ReqBody: Send + 'static,
    ResBody: WrappedBody,
{
    let options = &config.options;
    let grpc = is_grpc(request.headers());
    let key = match crate::extract::checked(options.extract.extract_key(&request)) {
        Extracted::Key(key) => key,
        Extracted::Absent => {
            X::log_without_key(options.extract.absent_hint(), options.missing_key);
            return match options.missing_key {
                MissingKey::Allow => ResponseFuture::unlocked(inner.call(request)),
                MissingKey::Reject => refused(
                    Refusal::missing_key(X::REFUSED_BY).for_grpc(grpc),
                    &**config,
                ),
            };
        }
        // Never without the lease, whatever `MissingKey` says: a request must not escape the
        // layer by sending its key header twice.
        Extracted::Invalid(why) => {
            return refused(
                Refusal::invalid_key(X::REFUSED_BY, why).for_grpc(grpc),
                &**config,
            );
        }
    };
    // The inner service is called only once the lease is held, in the future: take the clone
    // that `poll_ready` readied and leave a fresh clone in its place (which holds no
    // readiness, so the next `poll_ready` on this instance never waits on a reservation held
    // by this request).
    let clone = inner.clone();
    let readied = std::mem::replace(inner, clone);
    ResponseFuture::new(run(readied, request, key, Arc::clone(config)))
}

/// A refusal decided in `call`, without calling the inner service.
fn refused<K, X, R, B, E>(refusal: Refusal, config: &LeaseConfig<K, X, R>) -> ResponseFuture<B, E>
where
    X: LeaseKind,
    R: MakeRefusal,
    B: Send + 'static,
    E: Send + 'static,
{
    let response = refuse(refusal, config);
    ResponseFuture::new(async move { Ok(response) })
}

/// Takes the lease for `key`, then runs the inner service under it.
///
/// `readied` is the inner service that the layer's `poll_ready` readied. When the acquisition
/// may wait (the layer has a `wait`), its readiness is given back first (see
/// [`InnerService`]): a request waiting for one key must not keep a `ConcurrencyLimit` under
/// this layer from serving other keys. It is readied again under the lease.
async fn run<S, K, X, R, ReqBody, ResBody>(
    readied: S,
    request: Request<ReqBody>,
    key: String,
    config: Arc<LeaseConfig<K, X, R>>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    K: Sync,
    X: LeaseKind,
    R: MakeRefusal,
    ResBody: Body<Data = Bytes>,
{
    let mut inner = InnerService::Ready(readied);
    let grpc = is_grpc(request.headers());
    if !config.options.lease.get_wait().is_zero() {
        inner.release_readiness();
    }
    // Never the key as it is: a request must not be able to name a lock the application or
    // the runtime takes for itself (an election, an idempotency claim).
    let key = config.options.name_of(&key);
    let lease = match X::acquire(&config.options, &key).await {
        Ok(lease) => lease,
        Err(refusal) => return Ok(refuse(refusal.for_grpc(grpc), &*config)),
    };
    let timer = HoldTimer::start(&config.options.holds);
    let held = X::held(lease.handle());
    let began = std::time::Instant::now();
    let response = call_under_lease(inner, request, (lease, timer), held, |handle| {
        X::log_lost(&key, handle);
        let refusal = Refusal::lease_lost_by(X::REFUSED_BY, &key).for_grpc(grpc);
        refuse(refusal, &*config)
    })
    .await;
    X::observed(&config.options, began.elapsed());
    response
}

/// Calls the inner service with `request` while `lease` is held, with `held` in the request's
/// extensions for the handler.
///
/// The handler (readying included) is raced against the lease's lost signal: if the lease is
/// lost first, the handler is dropped and `on_lost` answers. Otherwise `held` goes into the
/// response's extensions too, and the lease moves into the response body, which releases it
/// once the body is done (or dropped); a response with nothing left to send releases it
/// before the head goes out.
async fn call_under_lease<S, ReqBody, ResBody, H>(
    inner: InnerService<S>,
    mut request: Request<ReqBody>,
    (lease, timer): (Lease, HoldTimer),
    held: H,
    on_lost: impl FnOnce(&LeaseHandle) -> Response<ResponseBody<ResBody>>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Body<Data = Bytes>,
    H: Clone + Send + Sync + 'static,
{
    let handle = lease.handle();
    request.extensions_mut().insert(held.clone());
    // Readying (if the readiness was given back) and the call both count as the handler.
    let handler = inner.call(request);
    let mut response = tokio::select! {
        // Loss wins a tie: a response finished after the loss was not made under the lease.
        biased;
        () = handle.lost() => return Ok(on_lost(&handle)),
        response = handler => response?,
    };
    // For outer layers and logging: which lease, which fence. The handle outlives the lease
    // (it reports the lease lost once released).
    response.extensions_mut().insert(held);
    if response.body().is_end_stream() {
        // Nothing left to send: release before the head goes out, so a client that sends its
        // next request as soon as it has this response finds the lock free.
        drop(timer);
        body::release(lease).await;
        return Ok(response.map(ResponseBody::unlocked));
    }
    Ok(response.map(|b| ResponseBody::locked(b, lease, timer)))
}

/// The response for `refusal`, made by the layer's [`MakeRefusal`].
fn refuse<K, X, R, B>(refusal: Refusal, config: &LeaseConfig<K, X, R>) -> Response<ResponseBody<B>>
where
    X: LeaseKind,
    R: MakeRefusal,
{
    X::log_refused(&refusal);
    refusal.respond(&config.refusal, ResponseBody::message)
}
