//! `Retry-After` on the layer's own answers: a busy lock tells the holder's remaining ttl,
//! whoever took it and with whatever ttl (not the layer's own ttl); a lost lease's `503`
//! says when to retry too.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use crate::app::{Fixture, Seen, app, call, layer, on_both_stores, retry_after, text};

on_both_stores!(
    busy_retry_after_is_the_holders_remaining_ttl,
    lease_lost_503_has_retry_after,
);

async fn busy_retry_after_is_the_holders_remaining_ttl(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let layer_ttl = Duration::from_secs(30);
    let app = app(layer(&fx).ttl(layer_ttl), &seen);
    let app_waiting = crate::app::app(
        layer(&fx).ttl(layer_ttl).wait(Duration::from_millis(200)),
        &seen,
    );
    let other = fx.another_client().await;

    // Taken directly with a 2 s ttl.
    let holder = other
        .lock("order:1")
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .expect("free");
    for (what, app) in [("at once", &app), ("after a wait", &app_waiting)] {
        let busy = call(app, "/orders/1").await;
        assert_eq!(busy.status(), StatusCode::LOCKED, "{what}");
        let secs = retry_after(&busy);
        assert!(
            (1..=2).contains(&secs),
            "{what}: Retry-After {secs} for a 2 s holder"
        );
    }
    holder.release().await.expect("release");

    // Taken with 30 s, then shortened to 3 s.
    let holder = other
        .lock("order:2")
        .ttl(layer_ttl)
        .acquire()
        .await
        .expect("free");
    holder.extend(Duration::from_secs(3)).await.expect("extend");
    for (what, app) in [("at once", &app), ("after a wait", &app_waiting)] {
        let busy = call(app, "/orders/2").await;
        assert_eq!(busy.status(), StatusCode::LOCKED, "{what}");
        let secs = retry_after(&busy);
        assert!(
            (1..=3).contains(&secs),
            "{what}: Retry-After {secs} after extend(3 s)"
        );
    }
    holder.release().await.expect("release");

    // Held through the layer itself with its own ttl (the body is not read yet).
    let first = call(&app, "/orders/3").await;
    let busy = call(&app, "/orders/3").await;
    let secs = retry_after(&busy);
    assert!(
        (29..=30).contains(&secs),
        "Retry-After {secs} for the layer's 30 s lease"
    );
    drop(first);
}

async fn lease_lost_503_has_retry_after(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let app = app(
        layer(&fx).ttl(Duration::from_millis(300)).watchdog(false),
        &seen,
    );
    let response = call(&app, "/slow/1/3000").await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry_after(&response), 1);
    assert!(text(response).await.contains("lost"));
}
