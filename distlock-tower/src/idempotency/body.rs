//! The response body of the idempotency layer: the inner service's body passed through (and
//! captured as it is sent, when it is a first request's response), or a body the layer made
//! (a replay, a refusal).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use distlock::idempotency::{Claim, Idempotency, Record};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

/// What a first request's response is stored as, gathered while its body is sent.
pub(crate) struct Capture {
    pub(crate) claim: Claim,
    pub(crate) idempotency: Idempotency,
    pub(crate) ttl: Duration,
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    pub(crate) body: BytesMut,
    pub(crate) cap: usize,
}

impl Capture {
    /// Adds a chunk; `false` once the body is over the cap (then the capture is dropped, and
    /// its claim freed with nothing stored).
    fn push(&mut self, data: &Bytes) -> bool {
        if self.body.len() + data.len() > self.cap {
            return false;
        }
        self.body.extend_from_slice(data);
        true
    }

    /// Frees the key without storing anything.
    pub(crate) async fn free(self) {
        if let Err(err) = self.claim.release().await {
            tracing::debug!(error = %err, "could not free an idempotency key; it expires with its claim");
        }
    }

    /// Stores the response and frees the key.
    pub(crate) async fn store(self) {
        let record = Record::new(self.status, self.headers, self.body.to_vec());
        match self
            .idempotency
            .complete(self.claim, &record, self.ttl)
            .await
        {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                namespace = self.idempotency.namespace(),
                "idempotency claim lost before the response was stored; not stored"
            ),
            Err(err) => tracing::warn!(
                namespace = self.idempotency.namespace(),
                error = %err,
                "could not store the response of an idempotent request"
            ),
        }
    }
}

type Storing = Pin<Box<dyn Future<Output = ()> + Send>>;

pin_project! {
    /// The response body of [`Idempotent`](super::Idempotent): the inner service's body, or
    /// one the layer made (a replayed response, a refusal).
    ///
    /// A first request's body is copied as it is sent, up to the layer's cap; once its last
    /// chunk is ready, the response is stored before that chunk is handed on, so a client
    /// that has read a whole response finds it stored when it retries.
    pub struct IdempotentBody<B> {
        #[pin]
        inner: Option<B>,
        made: Option<Bytes>,
        capture: Option<Capture>,
        storing: Option<Storing>,
        held: Option<Frame<Bytes>>,
        ended: bool,
    }
}

impl<B> IdempotentBody<B> {
    pub(crate) fn passed(inner: B, capture: Option<Capture>) -> Self {
        Self {
            inner: Some(inner),
            made: None,
            capture,
            storing: None,
            held: None,
            ended: false,
        }
    }

    /// An empty body is at its end from the start, so the response goes out as a head alone
    /// (a gRPC trailers-only refusal is a `HEADERS` frame that ends the stream).
    pub(crate) fn made(bytes: Bytes) -> Self {
        Self {
            inner: None,
            made: (!bytes.is_empty()).then_some(bytes),
            capture: None,
            storing: None,
            held: None,
            ended: false,
        }
    }
}

impl<B> std::fmt::Debug for IdempotentBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotentBody")
            .field("capturing", &self.capture.is_some())
            .finish_non_exhaustive()
    }
}

impl<B> Body for IdempotentBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        if let Some(storing) = this.storing.as_mut() {
            ready!(storing.as_mut().poll(cx));
            *this.storing = None;
            *this.ended = this.held.is_none();
            return Poll::Ready(this.held.take().map(Ok));
        }
        if *this.ended {
            return Poll::Ready(None);
        }
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return Poll::Ready(this.made.take().map(|b| Ok(Frame::data(b))));
        };
        match ready!(inner.poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let (Some(capture), Some(data)) = (this.capture.as_mut(), frame.data_ref())
                    && !capture.push(data)
                    && let Some(capture) = this.capture.take()
                {
                    tracing::debug!("response body over the idempotency cap: not stored");
                    // The key is freed before this chunk goes out, so a client that read the
                    // whole response finds the key free when it repeats the request.
                    let mut freeing: Storing = Box::pin(capture.free());
                    if freeing.as_mut().poll(cx).is_pending() {
                        *this.storing = Some(freeing);
                        *this.held = Some(frame);
                        return Poll::Pending;
                    }
                }
                let last = this
                    .inner
                    .as_ref()
                    .as_pin_ref()
                    .is_some_and(|body| body.is_end_stream());
                if last && let Some(capture) = this.capture.take() {
                    // Stored before the last chunk goes out (see the type's docs).
                    let mut storing: Storing = Box::pin(capture.store());
                    if storing.as_mut().poll(cx).is_pending() {
                        *this.storing = Some(storing);
                        *this.held = Some(frame);
                        return Poll::Pending;
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(err)) => {
                // A broken body: nothing is stored, the key is freed (the claim is dropped).
                *this.capture = None;
                Poll::Ready(Some(Err(err)))
            }
            None => {
                if let Some(capture) = this.capture.take() {
                    let mut storing: Storing = Box::pin(capture.store());
                    if storing.as_mut().poll(cx).is_pending() {
                        *this.storing = Some(storing);
                        return Poll::Pending;
                    }
                }
                *this.ended = true;
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        if self.storing.is_some() || self.capture.is_some() {
            return false;
        }
        if self.ended {
            return true;
        }
        match &self.inner {
            Some(inner) => inner.is_end_stream(),
            None => self.made.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.inner, &self.made) {
            (Some(inner), _) => inner.size_hint(),
            (None, Some(made)) => SizeHint::with_exact(made.len() as u64),
            (None, None) => SizeHint::with_exact(0),
        }
    }
}
