//! `Retry-After` on the layer's own answers: a busy lock tells the holder's remaining ttl,
//! whoever took it and with whatever ttl (not the layer's own ttl), or the longest of the
//! layer's latest holds when that is shorter; a lost lease's `503` says when to retry too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::StatusCode;

use crate::app::{Fixture, Seen, app, call, layer, on_both_stores, retry_after, text};

on_both_stores!(
    busy_retry_after_is_the_holders_remaining_ttl,
    busy_retry_after_is_the_layers_longest_latest_hold_when_shorter,
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
        .lock("http/order:1")
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
        .lock("http/order:2")
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

async fn busy_retry_after_is_the_layers_longest_latest_hold_when_shorter(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let app = app(layer(&fx).ttl(Duration::from_secs(30)), &seen);
    let other = fx.another_client().await;

    // Whole seconds, rounded up, at least 1: the most a hold inside `took` can be told.
    let at_most = |took: Duration| took.as_secs() + u64::from(took.subsec_nanos() > 0);

    // One quick request through the layer, read to its end: a hold of a few milliseconds.
    let started = Instant::now();
    let quick = call(&app, "/orders/1").await;
    assert_eq!(quick.status(), StatusCode::OK);
    text(quick).await;
    let quick_took = started.elapsed();
    // Held through the layer with its 30 s ttl (the body is not read yet): the lock would
    // live 30 s, but this layer's requests hold theirs for milliseconds.
    let first = call(&app, "/orders/2").await;
    let busy = call(&app, "/orders/2").await;
    assert_eq!(busy.status(), StatusCode::LOCKED);
    let secs = retry_after(&busy);
    assert!(
        secs <= at_most(quick_took).max(1),
        "Retry-After {secs} after a hold within {quick_took:?}"
    );
    drop(first);

    // A hold of 1.5 s through the layer: the hint for a 30 s holder is now 2 s (more only if
    // a busy machine made that hold longer).
    let started = Instant::now();
    let slow = call(&app, "/slow/3/1500").await;
    assert_eq!(slow.status(), StatusCode::OK);
    text(slow).await;
    let slow_took = started.elapsed();
    let holder = other
        .lock("http/order:4")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("free");
    let busy = call(&app, "/orders/4").await;
    assert_eq!(busy.status(), StatusCode::LOCKED);
    let secs = retry_after(&busy);
    assert!(
        (2..=at_most(slow_took)).contains(&secs),
        "Retry-After {secs}: the longest latest hold (1.5 s to {slow_took:?}), rounded up"
    );
    // Never more than the holder's remaining ttl.
    holder.extend(Duration::from_secs(1)).await.expect("extend");
    let busy = call(&app, "/orders/4").await;
    assert_eq!(retry_after(&busy), 1, "a holder with 1 s left");
    holder.release().await.expect("release");
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
