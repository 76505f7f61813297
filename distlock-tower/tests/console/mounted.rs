//! The console mounted in a router, and requests to it through `oneshot` (what the API and
//! access tests share).

use axum::Router;
use axum::body::Body;
use distlock_tower::console::Console;
use http::{Request, Response};
use tower::ServiceExt as _;

/// Where the tests mount the console.
pub const MOUNT: &str = "/admin/console";

/// A router with `console` at [`MOUNT`].
pub fn app(console: Console) -> Router {
    Router::new().nest(MOUNT, console.router())
}

/// `method` of `path` (under the mount) with `headers`, through `app`.
pub async fn send(
    app: &Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response<Body> {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("{MOUNT}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    app.clone()
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("the router answers")
}

/// The whole body as text.
pub async fn body_of(response: Response<Body>) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}
