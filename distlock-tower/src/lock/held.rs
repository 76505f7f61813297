use std::ops::Deref;

use distlock::LeaseHandle;

/// The lock a request holds, for its handler: fence, name, lost signal.
///
/// [`Lock`](super::Lock) puts it in the request's extensions; in axum, take it as an argument
/// (`lock: HeldLock`, or `Option<HeldLock>` on routes where requests without a key pass
/// through unlocked; feature `axum`). It dereferences to [`LeaseHandle`]:
/// [`fence`](LeaseHandle::fence), [`lost`](LeaseHandle::lost),
/// [`is_lost`](LeaseHandle::is_lost), [`ensure_held`](LeaseHandle::ensure_held). It cannot
/// release the lock: the layer does that once the response has been sent.
///
/// The layer puts it in the response's extensions too, so that outer layers and logging can
/// see which lock (and which fence) a response was made under. By the time they look, the
/// lock may already be released: [`is_lost`](LeaseHandle::is_lost) then says so.
///
/// ```
/// use distlock_tower::lock::HeldLock;
///
/// async fn settle(lock: HeldLock) -> String {
///     // Pass the fence to the resource you protect, so it can refuse a stale holder.
///     format!("settled under fence {}", lock.fence())
/// }
/// # let _ = axum::routing::post::<_, _, ()>(settle);
/// ```
#[derive(Clone, Debug)]
pub struct HeldLock {
    handle: LeaseHandle,
}

impl HeldLock {
    pub(crate) fn new(handle: LeaseHandle) -> Self {
        Self { handle }
    }

    /// The underlying lease handle.
    #[must_use]
    pub fn handle(&self) -> &LeaseHandle {
        &self.handle
    }

    /// Unwraps the lease handle, e.g. to move it into a task the handler spawns.
    #[must_use]
    pub fn into_handle(self) -> LeaseHandle {
        self.handle
    }
}

impl Deref for HeldLock {
    type Target = LeaseHandle;

    fn deref(&self) -> &LeaseHandle {
        &self.handle
    }
}

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for HeldLock {
    type Rejection = MissingHeldLock;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Self>()
            .cloned()
            .ok_or(MissingHeldLock)
    }
}

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl<S: Send + Sync> axum::extract::OptionalFromRequestParts<S> for HeldLock {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Self>().cloned())
    }
}

/// Rejection of the [`HeldLock`] extractor on a request that holds no lock: the route is not
/// behind a [`LockLayer`](super::LockLayer), or its request had no key and was let through.
/// A server bug, so `500 Internal Server Error`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingHeldLock;

impl std::fmt::Display for MissingHeldLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("this request holds no lock: is the route behind a LockLayer?")
    }
}

impl std::error::Error for MissingHeldLock {}

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl axum::response::IntoResponse for MissingHeldLock {
    fn into_response(self) -> axum::response::Response {
        (http::StatusCode::INTERNAL_SERVER_ERROR, self.to_string()).into_response()
    }
}
