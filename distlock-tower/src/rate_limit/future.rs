use std::sync::Arc;

use bytes::Bytes;
use distlock::RateLimitError;
use distlock::ratelimit::{Decision, Origin};
use http::{Request, Response};
use http_body::Body;
use tokio::time::Instant;
use tower::Service;

use super::ResponseBody;
use super::checks::{Check, Checks};
use super::exempt::{self, Exemption, RequestHead};
use super::headers::describe;
use super::layer::{Config, Limiter};
use super::settle::{Charge, Settler};
use crate::extract::{ExtractKey, Extracted, MissingKey};
use crate::readiness::InnerService;
use crate::refusal::{MakeRefusal, Refusal, RefusedBy, is_grpc};
use crate::wrapped::{WrappedBody, WrappedService};

boxed_response_future! {
    /// Response future of [`RateLimit`](super::RateLimit).
    ///
    /// Boxed: it awaits the limiter's check, whose future type cannot be named, and one
    /// allocation per request is small next to a store round trip. Opaque, so that what it
    /// does inside can change without breaking anyone.
}

/// The `call` of [`RateLimit`](super::RateLimit): reads the subject, then the response future
/// checks it and calls the inner service or answers for it.
pub(crate) fn call<S, K, R, ReqBody, ResBody>(
    inner: &mut S,
    config: &Arc<Config<K, R>>,
    request: Request<ReqBody>,
) -> ResponseFuture<ResBody, S::Error>
where
    S: WrappedService<ReqBody, ResBody>,
    K: ExtractKey<ReqBody>,
    R: MakeRefusal,
    ReqBody: Send + 'static,
    ResBody: WrappedBody,
{
    let exempt = &config.options.exempt;
    let exemption = if exempt.is_empty() {
        None
    } else {
        exempt.before_key(&request)
    };
    let subject = match exemption {
        // Not read at all: a skipped request may carry no key.
        Some(_) => Extracted::Absent,
        None => crate::extract::checked(config.options.extract.extract_key(&request)),
    };
    let exemption = exemption.or_else(|| subject.key().and_then(|key| exempt.for_key(key)));
    let hint = match subject {
        Extracted::Absent => config.options.extract.absent_hint(),
        _ => None,
    };
    // The inner service is called later, in the future, once the request is allowed: take the
    // clone that `poll_ready` readied and leave a fresh clone in its place (which holds no
    // readiness, so the next `poll_ready` on this instance never waits on a reservation held
    // by this request).
    let clone = inner.clone();
    let readied = std::mem::replace(inner, clone);
    if let Some(exemption) = exemption {
        return ResponseFuture::new(pass_exempt(readied, request, exemption));
    }
    let cost = match &config.options.cost_by {
        Some(by) => (by.cost)(&RequestHead::of(&request)),
        None => config.options.cost,
    };
    ResponseFuture::new(run(
        readied,
        request,
        subject,
        hint,
        cost,
        Arc::clone(config),
    ))
}

/// Calls the inner service for a request exempt from the limit, and records why.
async fn pass_exempt<S, ReqBody, ResBody>(
    readied: S,
    request: Request<ReqBody>,
    exemption: Exemption,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Body<Data = Bytes>,
{
    exempt::record(exemption);
    let mut response = InnerService::Ready(readied)
        .call(request)
        .await?
        .map(ResponseBody::inner);
    response.extensions_mut().insert(exemption);
    Ok(response)
}

/// Checks the request (waiting if configured), then calls the inner service or answers
/// for it.
///
/// `readied` is the inner service that the layer's `poll_ready` readied; it is given back
/// (see [`InnerService`]) before the request sleeps in wait mode. `hint` is the extractor's
/// [`absent_hint`](crate::ExtractKey::absent_hint) when the key is absent.
async fn run<S, K, R, ReqBody, ResBody>(
    readied: S,
    request: Request<ReqBody>,
    subject: Extracted,
    hint: Option<&'static str>,
    cost: u32,
    config: Arc<Config<K, R>>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    R: MakeRefusal,
    ResBody: Body<Data = Bytes>,
{
    let mut inner = InnerService::Ready(readied);
    let grpc = is_grpc(request.headers());
    let subject = match subject {
        Extracted::Key(subject) => subject,
        Extracted::Absent => {
            return match config.options.missing_key {
                MissingKey::Allow => {
                    tracing::debug!(
                        hint,
                        "request without a rate-limit key; passing it unmetered"
                    );
                    Ok(inner.call(request).await?.map(ResponseBody::inner))
                }
                MissingKey::Reject => {
                    tracing::debug!(hint, "request without a rate-limit key; answering 400");
                    Ok(refuse(
                        Refusal::missing_key(RefusedBy::RateLimit).for_grpc(grpc),
                        &config,
                        None,
                    ))
                }
            };
        }
        // Never unmetered, whatever `MissingKey` says: a client must not escape its limit by
        // sending its key header twice.
        Extracted::Invalid(why) => {
            return Ok(refuse(
                Refusal::invalid_key(RefusedBy::RateLimit, why).for_grpc(grpc),
                &config,
                None,
            ));
        }
    };
    let limiter = config.options.limiter_for(matched_route(&request));
    if let Some(by) = &config.options.cost_by
        && cost > by.cap
    {
        // Priced above what the layer allows at once: refused before any round trip.
        let policy = limiter
            .limiter
            .policies()
            .first()
            .map(|p| p.name().to_owned())
            .unwrap_or_default();
        let err = RateLimitError::CostTooLarge {
            cost,
            policy,
            capacity: by.cap,
        };
        return Ok(refuse(
            Refusal::rate_limit_error(&subject, err).for_grpc(grpc),
            &config,
            None,
        ));
    }
    let decision = match check(limiter, &subject, cost, &config, &mut inner).await {
        Ok(decision) => decision,
        Err(refusal) => return Ok(refuse(refusal.for_grpc(grpc), &config, Some(limiter))),
    };
    let granted = Instant::now();
    let head = request.method() == http::Method::HEAD;
    let response = inner.call(request).await?;
    let mut response = match &config.options.settle {
        // Only what the store counted is settled there: not a decision that fell back to
        // this process's own count, failed open, or was let through by shadow mode. (A hybrid
        // limiter's local answer spends units the store counted when they were leased.)
        Some(settle)
            if matches!(decision.origin, Origin::Store | Origin::LocalShare)
                && !decision.shadowed =>
        {
            let settler = Settler::new(Charge {
                limiter: limiter.limiter.clone(),
                subject: subject.clone(),
                settle: Arc::clone(settle),
                status: response.status(),
                charged: cost,
                started: granted,
            });
            response.map(|body| ResponseBody::settling(body, settler, head))
        }
        _ => response.map(ResponseBody::inner),
    };
    tell(
        &mut response,
        limiter,
        &config,
        Check::new(subject, decision),
    );
    Ok(response)
}

/// Tells the client and outer layers what the limiter decided: the rate-limit fields (as
/// configured) and `check` in [`Checks`].
fn tell<B, K, R>(
    response: &mut Response<B>,
    limiter: &Limiter,
    config: &Config<K, R>,
    check: Check,
) {
    describe(
        response.headers_mut(),
        &check.decision,
        &limiter.policy_field,
        config.options.headers,
        &config.options.hidden,
    );
    Checks::record(response.extensions_mut(), check);
}

/// The route template axum matched, which selects a per-route limiter.
#[cfg(feature = "axum")]
fn matched_route<B>(request: &Request<B>) -> Option<&str> {
    request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(axum::extract::MatchedPath::as_str)
}

/// Without axum there are no per-route limiters.
#[cfg(not(feature = "axum"))]
fn matched_route<B>(_: &Request<B>) -> Option<&str> {
    None
}

/// The allowed decision, or the refusal. With a wait configured, the request reserves its
/// turn (GCRA and token-bucket policies: requests are served in the order they came, across
/// every replica), gives back the inner service's readiness and sleeps until it; with window
/// algorithms it sleeps until the store's `retry_after` and checks again, while the wait fits.
async fn check<S: Clone, K, R>(
    limiter: &Limiter,
    subject: &str,
    cost: u32,
    config: &Config<K, R>,
    inner: &mut InnerService<S>,
) -> Result<Decision, Refusal> {
    let started = Instant::now();
    loop {
        let left = config.options.max_wait.saturating_sub(started.elapsed());
        match limiter.limiter.reserve(subject, cost, left).await {
            Ok(reservation) if reservation.is_granted() => {
                if !reservation.delay().is_zero() {
                    // Nothing of the inner service is held while waiting (a concurrency
                    // permit, say); dropping this future gives the turn back.
                    inner.release_readiness();
                }
                return Ok(reservation.ready().await);
            }
            Ok(reservation) => {
                let decision = reservation.decision().clone();
                let retry = decision.retry_after;
                if !retry.is_zero()
                    && started.elapsed().saturating_add(retry) <= config.options.max_wait
                {
                    inner.release_readiness();
                    tokio::time::sleep(retry).await;
                    continue;
                }
                let hidden = super::headers::is_hidden(&config.options.hidden, &decision.policy);
                return Err(Refusal::too_many_requests(subject, decision, hidden));
            }
            Err(err) => {
                match &err {
                    RateLimitError::InvalidSubject(_) => {
                        tracing::debug!(subject, error = %err, "unusable rate-limit key");
                    }
                    // The limiter fails closed: the store could not answer within its deadline.
                    RateLimitError::Store(_)
                    | RateLimitError::Overloaded { .. }
                    | RateLimitError::CircuitOpen { .. } => {
                        tracing::warn!(subject = %distlock::logging::redacted(subject), error = %err, "rate-limit store unavailable");
                    }
                    // The subject's own rate (a per-subject lookup) cannot take the layer's
                    // cost: a `413` for the client, a configuration to fix for the operator.
                    RateLimitError::CostTooLarge { .. } => {
                        tracing::warn!(subject = %distlock::logging::redacted(subject), error = %err, "rate-limit cost too large for the subject's policy");
                    }
                    // Anything else is a `500`, which the refusal logs at ERROR once.
                    _ => {}
                }
                return Err(Refusal::rate_limit_error(subject, err));
            }
        }
    }
}

/// The response for `refusal`, made by the layer's [`MakeRefusal`]; a `429` also gets the
/// rate-limit fields and its [`Check`] in the extensions.
fn refuse<B, K, R: MakeRefusal>(
    refusal: Refusal,
    config: &Config<K, R>,
    limiter: Option<&Limiter>,
) -> Response<ResponseBody<B>> {
    let decision = refusal.decision().cloned();
    tracing::debug!(
        subject = refusal.key().map(|k| tracing::field::display(distlock::logging::redacted(k))),
        policy = decision.as_ref().map(|d| &*d.policy),
        origin = decision.as_ref().map(|d| tracing::field::debug(d.origin)),
        retry_after = refusal.retry_after_secs(),
        status = refusal.status().as_u16(),
        reason = refusal.reason().code(),
        detail = %refusal.detail(),
        "request refused"
    );
    let subject = refusal.key().map(str::to_owned);
    let mut response = refusal.respond(&config.refusal, ResponseBody::message);
    if let (Some(decision), Some(limiter), Some(subject)) = (decision, limiter, subject) {
        tell(
            &mut response,
            limiter,
            config,
            Check::new(subject, decision),
        );
    }
    response
}
