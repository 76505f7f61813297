use std::ops::Deref;

use distlock::LeaseHandle;

/// The permit a request holds under a [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer):
/// its lease (fence, lost signal), for the handler.
///
/// The layer puts it in the request's extensions (in axum, take it as an argument:
/// `permit: HeldPermit`, feature `axum`) and in the response's. It dereferences to
/// [`LeaseHandle`]; it cannot release the permit: the layer does that once the response has
/// been sent.
#[derive(Clone, Debug)]
pub struct HeldPermit {
    handle: LeaseHandle,
}

impl HeldPermit {
    pub(crate) fn new(handle: LeaseHandle) -> Self {
        Self { handle }
    }

    /// The underlying lease handle.
    #[must_use]
    pub fn handle(&self) -> &LeaseHandle {
        &self.handle
    }
}

impl Deref for HeldPermit {
    type Target = LeaseHandle;

    fn deref(&self) -> &LeaseHandle {
        &self.handle
    }
}

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for HeldPermit {
    type Rejection = crate::lock::MissingHeldLock;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Self>()
            .cloned()
            .ok_or(crate::lock::MissingHeldLock)
    }
}
