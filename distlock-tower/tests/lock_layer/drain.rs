//! Issue 44: while the layer's client is shutting down, a new request is refused with `503`
//! and `Retry-After`, and a request already in flight finishes under its lock.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::StatusCode;

use crate::app::{Fixture, Seen, app, call, layer, on_both_stores, text};
use crate::common::assert_refused_for_shutdown;

on_both_stores!(a_closed_client_refuses_new_requests_while_in_flight_ones_finish);

async fn a_closed_client_refuses_new_requests_while_in_flight_ones_finish(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let app = app(layer(&fx), &seen);
    // In flight: its handler sleeps half a second under the lock `order:1`.
    let in_flight = tokio::spawn({
        let app = app.clone();
        async move {
            let response = call(&app, "/slow/1/500").await;
            (response.status(), text(response).await)
        }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen.inside.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first request never ran"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    fx.client.close();
    let refused = call(&app, "/orders/2").await;
    assert_refused_for_shutdown(&refused);
    assert!(text(refused).await.contains("shutting down"));
    assert_eq!(
        seen.calls.load(Ordering::SeqCst),
        1,
        "the refused request never reached the handler"
    );

    let (status, body) = in_flight.await.expect("in-flight request");
    assert_eq!(status, StatusCode::OK, "finished under its lock: {body}");
    assert!(body.parse::<u64>().is_ok(), "its fence: {body}");
    assert!(!seen.cancelled.load(Ordering::SeqCst), "not cut short");

    // Its lock went back at its end; the drain finds nothing left of it.
    let report = fx.client.shutdown(Duration::from_secs(5)).await;
    assert!(report.not_released.is_empty(), "{report:?}");
    assert!(fx.wait_free("http/order:1", Duration::from_secs(2)).await);
}
