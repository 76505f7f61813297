use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use distlock::{Lease, ReleaseOutcome};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::task::JoinHandle;

use crate::holds::HoldTimer;

pin_project! {
    /// Response body of [`Lock`](super::Lock): the inner service's body, owning the lease
    /// until the body is finished.
    ///
    /// Frames, size hints and errors are the inner body's. When the inner body ends, the lease
    /// is released **before** the last frame (or the end) is handed on, so a client that has
    /// read the whole response and sends its next request at once finds the lock free. Until
    /// then [`is_end_stream`](Body::is_end_stream) says `false`. A body dropped early (client
    /// gone) releases the lease in the background. Refusals made by the layer itself (423,
    /// 503...) use this type too, with the body its
    /// [`MakeRefusal`](crate::refusal::MakeRefusal) wrote and no lease.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
        lease: LeaseSlot,
        // The inner body's last frame, held back while the lease is released.
        last: Option<Frame<Bytes>>,
        // The inner body has ended (or failed): it is not polled again.
        done: bool,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Message { text: Option<Bytes> },
    }
}

/// Where the lease is.
enum LeaseSlot {
    /// Not held (no lock, or released).
    Empty,
    /// Held, and timed for the layer's recent holds (the timer ends when the lease leaves).
    Held(Lease, HoldTimer),
    /// Being released by a task: a body dropped meanwhile does not cancel the release.
    Releasing(JoinHandle<()>),
}

impl LeaseSlot {
    fn is_empty(&self) -> bool {
        matches!(self, Self::Empty)
    }

    fn start_release(&mut self) {
        if let Self::Held(..) = self {
            let Self::Held(lease, timer) = std::mem::replace(self, Self::Empty) else {
                return;
            };
            drop(timer);
            if let Some(task) = spawn_release(lease) {
                *self = Self::Releasing(task);
            }
        }
    }

    /// Drops the lease now: [`Lease`]'s `Drop` releases it in the background.
    fn drop_lease(&mut self) {
        if let Self::Held(..) = self {
            *self = Self::Empty;
        }
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn locked(body: B, lease: Lease, timer: HoldTimer) -> Self {
        Self {
            kind: Kind::Inner { body },
            lease: LeaseSlot::Held(lease, timer),
            last: None,
            done: false,
        }
    }

    pub(crate) fn unlocked(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
            lease: LeaseSlot::Empty,
            last: None,
            done: false,
        }
    }

    /// An empty message is at its end from the start, so the response goes out as a head
    /// alone (a gRPC trailers-only refusal is a `HEADERS` frame that ends the stream).
    pub(crate) fn message(text: Bytes) -> Self {
        Self {
            kind: Kind::Message {
                text: (!text.is_empty()).then_some(text),
            },
            lease: LeaseSlot::Empty,
            last: None,
            done: false,
        }
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lease = match &self.lease {
            LeaseSlot::Empty => "none",
            LeaseSlot::Held(..) => "held",
            LeaseSlot::Releasing(_) => "releasing",
        };
        f.debug_struct("ResponseBody")
            .field("lease", &lease)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<B> Body for ResponseBody<B>
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
        loop {
            if let LeaseSlot::Releasing(task) = this.lease {
                // A failed release was logged by the task; a panicked one leaves the key to
                // expire. Either way the response goes on.
                let _ = ready!(Pin::new(task).poll(cx));
                *this.lease = LeaseSlot::Empty;
            }
            if this.lease.is_empty()
                && let Some(frame) = this.last.take()
            {
                return Poll::Ready(Some(Ok(frame)));
            }
            if *this.done {
                return Poll::Ready(None);
            }
            let polled = match this.kind.as_mut().project() {
                KindProj::Inner { body } => ready!(body.poll_frame(cx)),
                KindProj::Message { text } => text.take().map(|text| Ok(Frame::data(text))),
            };
            match polled {
                Some(Ok(frame)) => {
                    if this.lease.is_empty() || !this.kind.as_ref().get_ref().is_end_stream() {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    // The inner body's last frame: release first.
                    *this.last = Some(frame);
                    *this.done = true;
                    this.lease.start_release();
                }
                Some(Err(err)) => {
                    // The response is cut short; nothing more will be sent under the lock.
                    *this.done = true;
                    this.lease.drop_lease();
                    return Poll::Ready(Some(Err(err)));
                }
                None => {
                    *this.done = true;
                    this.lease.start_release();
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.lease.is_empty() && self.last.is_none() && (self.done || self.kind.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        if let Some(frame) = &self.last {
            let len = frame.data_ref().map_or(0, |data| data.remaining() as u64);
            return SizeHint::with_exact(len);
        }
        if self.done {
            return SizeHint::with_exact(0);
        }
        self.kind.size_hint()
    }
}

impl<B: Body<Data = Bytes>> Kind<B> {
    fn is_end_stream(&self) -> bool {
        match self {
            Self::Inner { body } => body.is_end_stream(),
            Self::Message { text } => text.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Inner { body } => body.size_hint(),
            Self::Message { text } => {
                SizeHint::with_exact(text.as_ref().map_or(0, |text| text.len() as u64))
            }
        }
    }
}

/// Releases `lease` and waits for the outcome (bounded by the client's response timeout).
pub(crate) async fn release(lease: Lease) {
    if let Some(task) = spawn_release(lease) {
        // Dropping this future (the request was cancelled) leaves the task to finish.
        let _ = task.await;
    }
}

/// Starts releasing `lease` on a task of its own, so that nothing cancels it half-way.
///
/// A lease that is already lost is just dropped: releasing it cannot succeed, and the
/// response should not wait on a store that may be down. Outside a tokio runtime, dropping is
/// all there is (the key expires after its ttl).
fn spawn_release(lease: Lease) -> Option<JoinHandle<()>> {
    if lease.is_lost() {
        return None;
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    Some(runtime.spawn(async move {
        let name = lease.name().to_owned();
        let fence = lease.minted_fence();
        match lease.release().await {
            Ok(ReleaseOutcome::Released) => {}
            Ok(outcome) => {
                tracing::warn!(lock = %name, fence, ?outcome, "the lock was no longer held when the response ended");
            }
            Err(err) => {
                tracing::warn!(lock = %name, fence, error = %err, "release failed; the lock expires after its ttl");
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::time::Duration;

    use distlock::Client;
    use http::HeaderMap;
    use http_body_util::BodyExt;

    use super::*;
    use crate::holds::RecentHolds;

    /// A timer for a layer nobody asks about.
    fn timer() -> HoldTimer {
        HoldTimer::start(&Arc::default())
    }

    /// A body that yields the given frames, then (optionally) an error.
    struct Frames {
        frames: VecDeque<Frame<Bytes>>,
        fail: bool,
    }

    impl Body for Frames {
        type Data = Bytes;
        type Error = &'static str;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
            match self.frames.pop_front() {
                Some(frame) => Poll::Ready(Some(Ok(frame))),
                None if self.fail => Poll::Ready(Some(Err("broken"))),
                None => Poll::Ready(None),
            }
        }

        fn is_end_stream(&self) -> bool {
            self.frames.is_empty() && !self.fail
        }

        fn size_hint(&self) -> SizeHint {
            let mut hint = SizeHint::new();
            hint.set_lower(7);
            hint
        }
    }

    async fn lease(client: &Client) -> Lease {
        client.lock("body").acquire().await.expect("free lock")
    }

    async fn is_free(client: &Client) -> bool {
        let inspect = client.__inspect();
        let key = inspect.lock_key("body").expect("valid name");
        inspect.pttl(&key).await.expect("memory store").is_none()
    }

    #[tokio::test]
    async fn forwards_hints_and_releases_before_the_last_frame() {
        let client = Client::in_memory();
        let inner = http_body_util::Full::new(Bytes::from_static(b"hello"));
        let mut body = ResponseBody::locked(inner, lease(&client).await, timer());
        assert_eq!(body.size_hint().exact(), Some(5));
        assert!(!body.is_end_stream());

        let frame = body.frame().await.expect("a frame").expect("no error");
        assert_eq!(
            frame.into_data().expect("data"),
            Bytes::from_static(b"hello")
        );
        assert!(
            is_free(&client).await,
            "released before the last frame was handed on"
        );
        assert!(body.is_end_stream());
        assert_eq!(body.size_hint().exact(), Some(0));
        assert!(body.frame().await.is_none());
    }

    #[tokio::test]
    async fn keeps_the_lease_until_the_stream_ends_and_passes_trailers() {
        let client = Client::in_memory();
        let mut trailers = HeaderMap::new();
        trailers.insert("x-done", http::HeaderValue::from_static("1"));
        let inner = Frames {
            frames: VecDeque::from([
                Frame::data(Bytes::from_static(b"a")),
                Frame::trailers(trailers),
            ]),
            fail: false,
        };
        let holds = Arc::new(RecentHolds::default());
        let mut body = ResponseBody::locked(inner, lease(&client).await, HoldTimer::start(&holds));
        assert_eq!(body.size_hint().lower(), 7, "the inner body's hint");
        assert!(body.frame().await.expect("frame").expect("ok").is_data());
        assert!(!is_free(&client).await, "held while more may come");
        assert_eq!(holds.longest(), None, "a hold counts once it ends");
        let last = body.frame().await.expect("frame").expect("ok");
        assert_eq!(last.trailers_ref().expect("trailers")["x-done"], "1");
        assert!(is_free(&client).await);
        assert!(holds.longest().is_some(), "the ended hold is counted");
        assert!(body.frame().await.is_none());
    }

    #[tokio::test]
    async fn an_error_is_passed_on_and_releases() {
        let client = Client::in_memory();
        let inner = Frames {
            frames: VecDeque::new(),
            fail: true,
        };
        let mut body = ResponseBody::locked(inner, lease(&client).await, timer());
        assert_eq!(body.frame().await.expect("frame").err(), Some("broken"));
        assert!(body.is_end_stream());
        // Released in the background, since the response was cut short.
        for _ in 0..100 {
            if is_free(&client).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("not released after the body failed");
    }

    #[tokio::test]
    async fn dropping_the_body_releases() {
        let client = Client::in_memory();
        let inner = http_body_util::Empty::<Bytes>::new();
        let body = ResponseBody::locked(inner, lease(&client).await, timer());
        drop(body);
        for _ in 0..100 {
            if is_free(&client).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("not released after the body was dropped");
    }

    #[tokio::test]
    async fn a_message_is_one_frame() {
        let body = ResponseBody::<http_body_util::Empty<Bytes>>::message(Bytes::from_static(b"no"));
        assert_eq!(body.size_hint().exact(), Some(2));
        assert!(!body.is_end_stream());
        let Ok(collected) = body.collect().await;
        assert_eq!(collected.to_bytes(), Bytes::from_static(b"no"));
    }
}
