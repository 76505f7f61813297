//! The response body of the idempotency layer: a first request's response as it was read
//! whole (and stored), or its first part and the rest still coming (a response over the
//! cap), a response made by the layer (a replay, a refusal), or the inner service's body
//! passed through (a request the layer does not keep).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

/// The response body of [`Idempotent`](super::Idempotent): bytes the layer holds (a
/// response it read whole to store it, a replay, a refusal), followed by what is left of the
/// inner service's body, if anything.
///
/// A first request's response is read whole before it is sent (up to the layer's cap), so
/// that its record is stored whether or not the client stays to read it.
pub struct IdempotentBody<B> {
    head: Option<Bytes>,
    /// Boxed: a body over the cap was polled before it is handed on.
    rest: Option<Pin<Box<B>>>,
    trailers: Option<HeaderMap>,
}

impl<B> IdempotentBody<B> {
    /// The inner service's body, untouched.
    pub(crate) fn passed(inner: B) -> Self {
        Self {
            head: None,
            rest: Some(Box::pin(inner)),
            trailers: None,
        }
    }

    /// `bytes` the layer made. An empty body is at its end from the start, so the response
    /// goes out as a head alone (a gRPC trailers-only refusal is a `HEADERS` frame that ends
    /// the stream).
    pub(crate) fn made(bytes: Bytes) -> Self {
        Self::buffered(bytes, None)
    }

    /// A body read whole: its bytes, then its trailers.
    pub(crate) fn buffered(bytes: Bytes, trailers: Option<HeaderMap>) -> Self {
        Self {
            head: (!bytes.is_empty()).then_some(bytes),
            rest: None,
            trailers,
        }
    }

    /// What was read of a body, then the rest of it.
    pub(crate) fn resumed(read: Bytes, rest: Pin<Box<B>>) -> Self {
        Self {
            head: (!read.is_empty()).then_some(read),
            rest: Some(rest),
            trailers: None,
        }
    }
}

impl<B> std::fmt::Debug for IdempotentBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotentBody")
            .field("held", &self.head.as_ref().map_or(0, Bytes::len))
            .field("streaming", &self.rest.is_some())
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
        let this = self.get_mut();
        if let Some(head) = this.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if let Some(rest) = this.rest.as_mut() {
            return rest.as_mut().poll_frame(cx);
        }
        Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_none()
            && self.trailers.is_none()
            && self.rest.as_ref().is_none_or(|rest| rest.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let held = self.head.as_ref().map_or(0, |h| h.len() as u64);
        match &self.rest {
            Some(rest) => {
                let inner = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower() + held);
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper + held);
                }
                hint
            }
            None => SizeHint::with_exact(held),
        }
    }
}
