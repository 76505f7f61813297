use std::future::Future;

use bytes::Bytes;
use http::Response;
use http_body::Body;

use super::body::ResponseBody;

boxed_response_future! {
    /// Response future of [`Lock`](super::Lock) and of
    /// [`ConcurrencyLimit`](crate::concurrency::ConcurrencyLimit).
    ///
    /// Boxed: it awaits the runtime's acquisition, whose future type cannot be named, and one
    /// allocation per request is small next to a store round trip. Opaque, so that what it
    /// does inside can change without breaking anyone.
}

impl<B, E> ResponseFuture<B, E>
where
    B: Body<Data = Bytes> + Send + 'static,
    E: Send + 'static,
{
    /// The inner service's response, with no lease (a request without a key, allowed
    /// through).
    pub(crate) fn unlocked<F>(future: F) -> Self
    where
        F: Future<Output = Result<Response<B>, E>> + Send + 'static,
    {
        Self::new(async move { Ok(future.await?.map(ResponseBody::unlocked)) })
    }
}
