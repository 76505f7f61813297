use std::convert::Infallible;
use std::ops::Deref;

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::response::{IntoResponse, Response};
use distlock::LeaseHandle;
use http::StatusCode;
use http::request::Parts;

/// The lock a request holds, for its handler: fence, name, lost signal.
///
/// [`Lock`](super::Lock) puts it in the request's extensions; in axum, take it as an argument
/// (`lock: HeldLock`, or `Option<HeldLock>` on routes where requests without a key pass
/// through unlocked). It dereferences to [`LeaseHandle`]: [`fence`](LeaseHandle::fence),
/// [`lost`](LeaseHandle::lost), [`is_lost`](LeaseHandle::is_lost),
/// [`ensure_held`](LeaseHandle::ensure_held). It cannot release the lock: the layer does that
/// once the response has been sent.
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

impl<S: Send + Sync> FromRequestParts<S> for HeldLock {
    type Rejection = MissingHeldLock;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Self>()
            .cloned()
            .ok_or(MissingHeldLock)
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for HeldLock {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
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

impl IntoResponse for MissingHeldLock {
    fn into_response(self) -> Response {
        (StatusCode::INTERNAL_SERVER_ERROR, self.to_string()).into_response()
    }
}
