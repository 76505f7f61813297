use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use distlock::IdempotencyError;
use distlock::idempotency::{Begin, Claim, Idempotency, Record, Scope};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use sha2::{Digest, Sha256};
use tower::Service;

use super::HeldClaim;
use super::body::IdempotentBody;
use super::layer::{Config, REPLAYED_HEADER, ScopeSource};
use crate::extract::{ExtractKey, Extracted, Header, InvalidKey, MissingKey, checked};
use crate::refusal::{MakeRefusal, PlainText, Reason, Refusal, RefusedBy, is_grpc};

/// Middleware that runs a request with an idempotency key once and replays its response to
/// the key's later requests. Built by [`IdempotencyLayer`](super::IdempotencyLayer).
///
/// Cheap to clone: the settings are shared. It is always ready; the inner service is readied
/// once the request may run (after its key is claimed), so a request that waits for its key
/// holds nothing of the inner service.
pub struct Idempotent<S, R = PlainText> {
    pub(crate) inner: S,
    pub(crate) config: Arc<Config<R>>,
}

impl<S: Clone, R> Clone for Idempotent<S, R> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S, R> std::fmt::Debug for Idempotent<S, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idempotent")
            .field("namespace", &self.config.idempotency.namespace())
            .finish_non_exhaustive()
    }
}

impl<S, R> Idempotent<S, R> {
    define_inner_service_accessors!();
}

/// The future of [`Idempotent`]'s responses.
pub type ResponseFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<IdempotentBody<B>>, E>> + Send>>;

impl<S, R, ReqB, ResB> Service<Request<ReqB>> for Idempotent<S, R>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    R: MakeRefusal,
    ReqB: Body + From<Bytes> + Send + 'static,
    ReqB::Data: Send,
    ResB: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<IdempotentBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResB, S::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        let inner = self.inner.clone();
        let config = Arc::clone(&self.config);
        Box::pin(call(inner, config, request))
    }
}

/// Readies `inner` and calls it.
async fn run<S, ReqB, ResB>(
    mut inner: S,
    request: Request<ReqB>,
) -> Result<Response<ResB>, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    poll_fn(|cx| inner.poll_ready(cx)).await?;
    inner.call(request).await
}

async fn call<S, R, ReqB, ResB>(
    inner: S,
    config: Arc<Config<R>>,
    request: Request<ReqB>,
) -> Result<Response<IdempotentBody<ResB>>, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    R: MakeRefusal,
    ReqB: Body + From<Bytes> + Send + 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
{
    let passed = |response: Response<ResB>| response.map(IdempotentBody::passed);
    let grpc = is_grpc(request.headers());
    if !config.methods.contains(request.method()) {
        return run(inner, request).await.map(passed);
    }
    let refused = |refusal: Refusal| Ok(refuse(&config, grpc, refusal));
    let key = match key_of(&config.header, config.min_key_len, &request) {
        Extracted::Key(key) => key,
        Extracted::Absent => match config.missing_key {
            MissingKey::Allow => {
                tracing::debug!("request without an idempotency key; running it as it is");
                return run(inner, request).await.map(passed);
            }
            _ => return refused(Refusal::missing_key(RefusedBy::Idempotency)),
        },
        Extracted::Invalid(why) => {
            return refused(Refusal::invalid_key(RefusedBy::Idempotency, why));
        }
    };
    // Whose key it is, read from the request's head before its body is taken.
    let (parts, body) = request.into_parts();
    let head = Request::from_parts(parts, ());
    let scope = match &config.scope {
        ScopeSource::Global => None,
        ScopeSource::Caller(extract) => match checked(extract(&head)) {
            Extracted::Key(scope) => Some(scope),
            Extracted::Absent | Extracted::Invalid(_) => {
                return refused(idempotency(Reason::MissingScope, &key, None));
            }
        },
    };
    let (parts, ()) = head.into_parts();
    let Some(body) = read_body(body, config.max_request_body).await else {
        return refused(idempotency(Reason::BodyTooLarge, &key, None));
    };
    let scope_of = || scope.as_deref().map_or(Scope::Global, Scope::caller);
    let fingerprint = fingerprint(scope.as_deref(), &parts, &body);
    let claim = match config
        .idempotency
        .begin(scope_of(), &key, &fingerprint)
        .await
    {
        Ok(Begin::Run(claim)) => claim,
        Ok(Begin::Replay(record)) => return Ok(replay(&record)),
        Ok(Begin::Mismatch) => {
            tracing::debug!(
                key = %distlock::logging::redacted(&key),
                "idempotency key reused for another request"
            );
            return refused(idempotency(Reason::KeyReused, &key, None));
        }
        Ok(Begin::InFlight) => return refused(idempotency(Reason::InFlight, &key, None)),
        Ok(Begin::Interrupted) => return refused(idempotency(Reason::OutcomeUnknown, &key, None)),
        Ok(Begin::NotKept) => return refused(idempotency(Reason::ResponseNotKept, &key, None)),
        Ok(_) => return refused(internal(&key, None)),
        Err(err) => return refused(store_error(&key, err)),
    };
    let mut request = Request::from_parts(parts, ReqB::from(body));
    request
        .extensions_mut()
        .insert(HeldClaim::new(claim.lease().handle()));
    // From here the request runs to its end in a task of its own, whatever happens to this
    // future: a client that goes away, or an outer timeout, must not cut short a request
    // whose handler has begun (its retry would run it again). This future only waits for
    // its answer.
    let (answer, answered) = tokio::sync::oneshot::channel();
    let settings = Finish {
        idempotency: config.idempotency.clone(),
        stored_headers: config.stored_headers.clone(),
        store_server_errors: config.store_server_errors,
        max_response_body: config.max_response_body,
        key: key.clone(),
    };
    tokio::spawn(async move {
        let outcome = tokio::select! {
            biased;
            () = claim.lease().lost() => None,
            response = run(inner, request) => Some(response),
        };
        let answer_with = match outcome {
            None => {
                // The claim was lost: the handler is stopped (dropped) as a lock layer's
                // would be; its started marker stays, so retries get "outcome unknown".
                tracing::warn!(
                    namespace = settings.idempotency.namespace(),
                    key = %distlock::logging::redacted(&settings.key),
                    reason = ?claim.lease().lost_reason(),
                    "idempotency claim lost while the handler ran; the handler was stopped"
                );
                drop(claim);
                Answer::Refused(Reason::OutcomeUnknown)
            }
            Some(Err(err)) => {
                // The inner service failed (not a response): the claim ends, its marker
                // stays (what the service did before failing is unknown).
                drop(claim);
                Answer::Failed(err)
            }
            Some(Ok(response)) => settings.finish(claim, response).await,
        };
        // The caller may be gone: then the answer is only kept in the store.
        let _ = answer.send(answer_with);
    });
    match answered.await {
        Ok(Answer::Response(response)) => Ok(*response),
        Ok(Answer::Failed(err)) => Err(err),
        Ok(Answer::Refused(reason)) => refused(idempotency(reason, &key, None)),
        // The task panicked (the handler did): its claim was dropped with it, and its
        // marker stays.
        Err(_) => refused(idempotency(Reason::OutcomeUnknown, &key, None)),
    }
}

/// What the request's task hands back to the caller.
enum Answer<B, E> {
    Response(Box<Response<IdempotentBody<B>>>),
    Failed(E),
    Refused(Reason),
}

/// What the request's task needs to finish a request once its handler returned.
struct Finish {
    idempotency: Idempotency,
    stored_headers: Vec<HeaderName>,
    store_server_errors: bool,
    max_response_body: usize,
    key: String,
}

impl Finish {
    /// Reads the response's body (up to the cap), stores the record under `claim`, ends the
    /// claim, and gives back the response to send.
    async fn finish<B, E>(self, claim: Claim, response: Response<B>) -> Answer<B, E>
    where
        B: Body<Data = Bytes> + Send + 'static,
    {
        let status = response.status();
        if status.is_server_error() && !self.store_server_errors {
            // The handler says it failed: the key may run again.
            if let Err(err) = self.idempotency.discard(claim).await {
                tracing::debug!(error = %err, "could not free an idempotency key; its claim expires, and its marker answers until the record ttl");
            }
            return Answer::Response(Box::new(response.map(IdempotentBody::passed)));
        }
        let headers = self
            .stored_headers
            .iter()
            .flat_map(|name| {
                response
                    .headers()
                    .get_all(name)
                    .iter()
                    .map(|value| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            })
            .collect();
        let (parts, body) = response.into_parts();
        let mut body = Box::pin(body);
        let mut kept = BytesMut::new();
        let mut trailers: Option<HeaderMap> = None;
        loop {
            let frame = match poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
                None => break,
                Some(Ok(frame)) => frame,
                Some(Err(_)) => {
                    // A broken body: what the handler meant to answer is unknown. The marker
                    // stays.
                    drop(claim);
                    return Answer::Refused(Reason::OutcomeUnknown);
                }
            };
            match frame.into_data() {
                Ok(data) => {
                    if kept.len() + data.len() > self.max_response_body {
                        // Over the cap: the request finished, but its response is not kept.
                        // Its key is not run again; the response goes on to the client,
                        // what was read of it first.
                        let done = self.idempotency.complete_not_kept(claim).await;
                        self.log_unstored(done);
                        kept.extend_from_slice(&data);
                        let body = IdempotentBody::resumed(kept.freeze(), body);
                        return Answer::Response(Box::new(Response::from_parts(parts, body)));
                    }
                    kept.extend_from_slice(&data);
                }
                Err(frame) => {
                    if let Ok(map) = frame.into_trailers() {
                        trailers.get_or_insert_with(HeaderMap::new).extend(map);
                    }
                }
            }
        }
        let kept = kept.freeze();
        let record = Record::new(status.as_u16(), headers, kept.to_vec());
        let done = self.idempotency.complete(claim, &record).await;
        self.log_unstored(done);
        let body = IdempotentBody::buffered(kept, trailers);
        Answer::Response(Box::new(Response::from_parts(parts, body)))
    }

    /// Says why a finished request's outcome could not be written, if it could not.
    fn log_unstored(&self, done: Result<bool, IdempotencyError>) {
        let key = distlock::logging::redacted(&self.key);
        match done {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                namespace = self.idempotency.namespace(),
                %key,
                "idempotency claim lost before the response was stored; its retries get \
                 \"outcome unknown\""
            ),
            Err(err) => tracing::warn!(
                namespace = self.idempotency.namespace(),
                %key,
                error = %err,
                "could not store the response of an idempotent request; its retries get \
                 \"outcome unknown\""
            ),
        }
    }
}

/// The request's key: the header's value, or the string inside it when it is a structured
/// field string (`"..."`, as the draft writes it); at least `min_len` bytes.
fn key_of<B>(header: &HeaderName, min_len: usize, request: &Request<B>) -> Extracted {
    let key = match Header(header.clone()).extract_key(request) {
        Extracted::Key(key) => match key.strip_prefix('"') {
            None => key,
            Some(quoted) => match quoted.strip_suffix('"') {
                Some("") => return Extracted::Invalid(InvalidKey::Empty),
                Some(inner) if !inner.contains(['"', '\\']) => inner.to_owned(),
                _ => {
                    return Extracted::Invalid(InvalidKey::custom(
                        "a quoted key must be a plain structured-field string",
                    ));
                }
            },
        },
        other => return other,
    };
    if key.len() < min_len {
        return Extracted::Invalid(InvalidKey::TooShort(min_len));
    }
    Extracted::Key(key)
}

/// The whole body, or `None` when it is over `cap` or cannot be read.
async fn read_body<B: Body>(body: B, cap: usize) -> Option<Bytes> {
    let mut body = std::pin::pin!(body);
    let mut out = BytesMut::new();
    while let Some(frame) = poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let Ok(frame) = frame else {
            return None;
        };
        if let Ok(mut data) = frame.into_data() {
            if out.len() + data.remaining() > cap {
                return None;
            }
            while data.has_remaining() {
                let chunk = data.chunk();
                let n = chunk.len();
                out.extend_from_slice(chunk);
                data.advance(n);
            }
        }
    }
    Some(out.freeze())
}

/// SHA-256 of the scope, the method, the path with its query, and the body.
fn fingerprint(scope: Option<&str>, parts: &http::request::Parts, body: &[u8]) -> [u8; 32] {
    let mut hash = Sha256::new();
    match scope {
        // Length-prefixed, so that no scope and method can pass for another pair.
        Some(scope) => {
            hash.update((scope.len() as u64).to_be_bytes());
            hash.update(scope.as_bytes());
        }
        None => hash.update(b"global"),
    }
    hash.update(parts.method.as_str().as_bytes());
    hash.update(b"\n");
    hash.update(
        parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .as_bytes(),
    );
    hash.update(b"\n");
    hash.update(body);
    hash.finalize().into()
}

/// The stored response, marked as a replay.
fn replay<B>(record: &Record) -> Response<IdempotentBody<B>> {
    let mut response = Response::new(IdempotentBody::made(Bytes::from(record.body.clone())));
    *response.status_mut() =
        StatusCode::from_u16(record.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in &record.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::from_bytes(value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response.headers_mut().insert(
        HeaderName::from_static(REPLAYED_HEADER),
        HeaderValue::from_static("true"),
    );
    response
}

/// A refusal of this layer for `reason`, with its status.
fn idempotency(reason: Reason, key: &str, err: Option<IdempotencyError>) -> Refusal {
    let (status, retry_after) = match reason {
        Reason::InFlight => (StatusCode::CONFLICT, Some(Duration::from_secs(1))),
        Reason::OutcomeUnknown | Reason::ResponseNotKept => (StatusCode::CONFLICT, None),
        Reason::KeyReused => (StatusCode::UNPROCESSABLE_ENTITY, None),
        Reason::BodyTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, None),
        Reason::MissingScope | Reason::UnusableKey => (StatusCode::BAD_REQUEST, None),
        Reason::StoreUnavailable | Reason::ShuttingDown => (
            StatusCode::SERVICE_UNAVAILABLE,
            Some(Duration::from_secs(1)),
        ),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, None),
    };
    Refusal::idempotency(reason, status, Some(key), err, retry_after)
}

fn internal(key: &str, err: Option<IdempotencyError>) -> Refusal {
    idempotency(Reason::Internal, key, err)
}

fn store_error(key: &str, err: IdempotencyError) -> Refusal {
    match err {
        IdempotencyError::Store(_) => {
            tracing::warn!(
                key = %distlock::logging::redacted(key),
                error = %err,
                "idempotency store unavailable"
            );
            idempotency(Reason::StoreUnavailable, key, Some(err))
        }
        IdempotencyError::InvalidName(_) => idempotency(Reason::UnusableKey, key, Some(err)),
        // The claim is a lease: a client that is shutting down takes no new one.
        IdempotencyError::Lock(distlock::LockError::ShuttingDown { .. }) => {
            idempotency(Reason::ShuttingDown, key, Some(err))
        }
        other => internal(key, Some(other)),
    }
}

/// The response for `refusal` of a request that was a gRPC call or not.
fn refuse<R: MakeRefusal, B>(
    config: &Config<R>,
    grpc: bool,
    refusal: Refusal,
) -> Response<IdempotentBody<B>> {
    refusal
        .for_grpc(grpc)
        .respond(&config.refusal, IdempotentBody::made)
}
