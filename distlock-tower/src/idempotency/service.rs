use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use distlock::IdempotencyError;
use distlock::idempotency::{Begin, Record};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use sha2::{Digest, Sha256};
use tower::Service;

use super::body::{Capture, IdempotentBody};
use super::layer::{Config, REPLAYED_HEADER};
use crate::extract::{ExtractKey, Extracted, Header, InvalidKey, MissingKey};
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
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    R: MakeRefusal,
    ReqB: Body + From<Bytes> + Send + 'static,
    ResB: Body<Data = Bytes>,
{
    let passed = |response: Response<ResB>| response.map(|b| IdempotentBody::passed(b, None));
    let grpc = is_grpc(request.headers());
    if !config.methods.contains(request.method()) {
        return run(inner, request).await.map(passed);
    }
    let key = match key_of(&config.header, &request) {
        Extracted::Key(key) => key,
        Extracted::Absent => match config.missing_key {
            MissingKey::Allow => {
                tracing::debug!("request without an idempotency key; running it as it is");
                return run(inner, request).await.map(passed);
            }
            _ => {
                return Ok(refuse(
                    &config,
                    grpc,
                    Refusal::missing_key(RefusedBy::Idempotency),
                ));
            }
        },
        Extracted::Invalid(why) => {
            return Ok(refuse(
                &config,
                grpc,
                Refusal::invalid_key(RefusedBy::Idempotency, why),
            ));
        }
    };
    let (parts, body) = request.into_parts();
    let Some(body) = read_body(body, config.max_request_body).await else {
        return Ok(refuse(
            &config,
            grpc,
            Refusal::idempotency(
                Reason::BodyTooLarge,
                StatusCode::PAYLOAD_TOO_LARGE,
                Some(&key),
                None,
                None,
            ),
        ));
    };
    let fingerprint = fingerprint(&parts, &body);
    let claim = match config.idempotency.begin(&key, &fingerprint).await {
        Ok(Begin::Run(claim)) => claim,
        Ok(Begin::Replay(record)) => return Ok(replay(&record)),
        Ok(Begin::Mismatch) => {
            tracing::debug!(key = %key, "idempotency key reused for another request");
            return Ok(refuse(
                &config,
                grpc,
                Refusal::idempotency(
                    Reason::KeyReused,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Some(&key),
                    None,
                    None,
                ),
            ));
        }
        Ok(Begin::InFlight) => {
            return Ok(refuse(
                &config,
                grpc,
                Refusal::idempotency(
                    Reason::InFlight,
                    StatusCode::CONFLICT,
                    Some(&key),
                    None,
                    Some(Duration::from_secs(1)),
                ),
            ));
        }
        Ok(_) => return Ok(refuse(&config, grpc, internal(&key, None))),
        Err(err) => return Ok(refuse(&config, grpc, store_error(&key, err))),
    };
    let request = Request::from_parts(parts, ReqB::from(body));
    // A panic or a dropped future from here on drops the claim: the key is freed, nothing
    // stored.
    let response = run(inner, request).await?;
    let status = response.status();
    if status.is_server_error() && !config.store_server_errors {
        if let Err(err) = claim.release().await {
            tracing::debug!(error = %err, "could not free an idempotency key; it expires with its claim");
        }
        return Ok(response.map(|b| IdempotentBody::passed(b, None)));
    }
    let headers = config
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
    let capture = Capture {
        claim,
        idempotency: config.idempotency.clone(),
        ttl: config.record_ttl,
        status: status.as_u16(),
        headers,
        body: BytesMut::new(),
        cap: config.max_response_body,
    };
    if response.body().is_end_stream() {
        // An empty body is never polled: store it now.
        capture.store().await;
        return Ok(response.map(|b| IdempotentBody::passed(b, None)));
    }
    Ok(response.map(|b| IdempotentBody::passed(b, Some(capture))))
}

/// The request's key: the header's value, or the string inside it when it is a structured
/// field string (`"..."`, as the draft writes it).
fn key_of<B>(header: &HeaderName, request: &Request<B>) -> Extracted {
    match Header(header.clone()).extract_key(request) {
        Extracted::Key(key) => match key.strip_prefix('"') {
            None => Extracted::Key(key),
            Some(quoted) => match quoted.strip_suffix('"') {
                Some("") => Extracted::Invalid(InvalidKey::Empty),
                Some(inner) if !inner.contains(['"', '\\']) => Extracted::Key(inner.to_owned()),
                _ => Extracted::Invalid(InvalidKey::custom(
                    "a quoted key must be a plain structured-field string",
                )),
            },
        },
        other => other,
    }
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

/// SHA-256 of the method, the path with its query, and the body.
fn fingerprint(parts: &http::request::Parts, body: &[u8]) -> [u8; 32] {
    let mut hash = Sha256::new();
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

fn internal(key: &str, err: Option<IdempotencyError>) -> Refusal {
    Refusal::idempotency(
        Reason::Internal,
        StatusCode::INTERNAL_SERVER_ERROR,
        Some(key),
        err,
        None,
    )
}

fn store_error(key: &str, err: IdempotencyError) -> Refusal {
    match err {
        IdempotencyError::Store(_) => {
            tracing::warn!(key = %key, error = %err, "idempotency store unavailable");
            Refusal::idempotency(
                Reason::StoreUnavailable,
                StatusCode::SERVICE_UNAVAILABLE,
                Some(key),
                Some(err),
                Some(Duration::from_secs(1)),
            )
        }
        IdempotencyError::InvalidName(_) => Refusal::idempotency(
            Reason::UnusableKey,
            StatusCode::BAD_REQUEST,
            Some(key),
            Some(err),
            None,
        ),
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
