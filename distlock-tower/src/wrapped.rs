//! [`WrappedService`]: what every layer of this crate asks of the service it wraps, named
//! once.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tower::Service;

/// An HTTP service a layer of this crate can wrap: cloned (the readied clone goes with the
/// request, a fresh one stays for the next `poll_ready`), and called from a boxed, `Send`
/// response future.
pub(crate) trait WrappedService<ReqBody, ResBody>:
    Service<
        Request<ReqBody>,
        Response = Response<ResBody>,
        Future: Send + 'static,
        Error: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S, ReqBody, ResBody> WrappedService<ReqBody, ResBody> for S where
    S: Service<
            Request<ReqBody>,
            Response = Response<ResBody>,
            Future: Send + 'static,
            Error: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

/// A response body a layer of this crate can pass on.
pub(crate) trait WrappedBody: Body<Data = Bytes> + Send + 'static {}

impl<B: Body<Data = Bytes> + Send + 'static> WrappedBody for B {}
