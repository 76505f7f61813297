use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::settle::Settler;

pin_project! {
    /// Response body of [`RateLimit`](super::RateLimit): the inner service's body, or the
    /// body of a response the layer made itself (429, 503, 400), as its
    /// [`MakeRefusal`](crate::refusal::MakeRefusal) wrote it.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        // The inner service's body, whose request's cost is settled when it ends.
        Settling { #[pin] body: B, settler: Settler },
        Message { text: Option<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    /// A body whose request's cost is settled when it ends. A server never polls a body that
    /// is already at its end, nor the body of a response to `HEAD`: such a response is sent
    /// whole with its head, and settles now.
    pub(crate) fn settling(body: B, mut settler: Settler, head: bool) -> Self
    where
        B: Body,
    {
        if head || body.is_end_stream() {
            settler.finish(true);
        }
        Self {
            kind: Kind::Settling { body, settler },
        }
    }

    /// An empty message is at its end from the start, so the response goes out as a head
    /// alone (a gRPC trailers-only refusal is a `HEADERS` frame that ends the stream).
    pub(crate) fn message(text: impl Into<Bytes>) -> Self {
        let text: Bytes = text.into();
        Self {
            kind: Kind::Message {
                text: (!text.is_empty()).then_some(text),
            },
        }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody").finish_non_exhaustive()
    }
}

impl<B: Body<Data = Bytes>> Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Settling { mut body, settler } => {
                let frame = body.as_mut().poll_frame(cx);
                match &frame {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Some(data) = frame.data_ref() {
                            settler.sent(data.len());
                        }
                        // A server stops polling a body that says it has ended, so the
                        // last frame may be the end: `Ready(None)` never comes.
                        if body.is_end_stream() {
                            settler.finish(true);
                        }
                    }
                    Poll::Ready(Some(Err(_))) => settler.finish(false),
                    Poll::Ready(None) => settler.finish(true),
                    Poll::Pending => {}
                }
                frame
            }
            KindProj::Message { text } => Poll::Ready(text.take().map(|t| Ok(Frame::data(t)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } | Kind::Settling { body, .. } => body.is_end_stream(),
            Kind::Message { text } => text.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } | Kind::Settling { body, .. } => body.size_hint(),
            Kind::Message { text } => {
                SizeHint::with_exact(text.as_ref().map_or(0, |t| t.len() as u64))
            }
        }
    }
}
