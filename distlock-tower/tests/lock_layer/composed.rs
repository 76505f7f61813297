//! TESTPLAN 31 for the lock layer: a request waiting for its lock holds no readiness of the
//! inner service, so an inner `ConcurrencyLimitLayer(1)` still serves a request on another
//! key while it waits, also when one service instance is driven with `ready` and `call` in a
//! loop.

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use distlock_tower::extract::PathSegment;
use distlock_tower::lock::{HeldLock, LockLayer};
use http::{Request, Response, StatusCode};
use tower::limit::ConcurrencyLimitLayer;
use tower::{Service, ServiceBuilder, ServiceExt};

use crate::app::{Fixture, call, on_both_stores, text};

on_both_stores!(
    a_request_waiting_for_its_lock_holds_no_readiness_of_the_inner_service,
    one_instance_driven_with_ready_and_call_in_a_loop,
);

async fn a_request_waiting_for_its_lock_holds_no_readiness_of_the_inner_service(fx: Fixture) {
    let app: Router = Router::new()
        .route(
            "/{key}",
            get(|lock: HeldLock| async move { lock.name().to_owned() }),
        )
        .layer(
            ServiceBuilder::new()
                .layer(
                    LockLayer::builder(fx.client.clone(), PathSegment(0))
                        .wait(Duration::from_secs(5))
                        .build()
                        .expect("valid settings"),
                )
                .layer(ConcurrencyLimitLayer::new(1)),
        )
        // Each route's service built once, as `into_make_service` does for a served app;
        // without it axum layers a handler anew per request, each with its own limit.
        .with_state(());
    let holder = hold_a(&fx).await;

    let waiting = tokio::spawn({
        let app = app.clone();
        async move {
            let response = call(&app, "/a").await;
            (response.status(), text(response).await)
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "the request on `a` waits for its lock"
    );

    let other = tokio::time::timeout(Duration::from_secs(1), call(&app, "/b"))
        .await
        .expect("a request on another key is served while the first waits for its lock");
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(text(other).await, "http/b");
    assert!(!waiting.is_finished(), "still waiting for `a`");

    release_wakes_a(holder, waiting).await;
}

/// One service instance driven with `ready().await` then `call` in a loop, the calls running
/// concurrently: a request waiting for its lock must not keep the next `ready()` waiting.
async fn one_instance_driven_with_ready_and_call_in_a_loop(fx: Fixture) {
    let mut service = ServiceBuilder::new()
        .layer(
            LockLayer::builder(fx.client.clone(), PathSegment(0))
                .wait(Duration::from_secs(5))
                .build()
                .expect("valid settings"),
        )
        .layer(ConcurrencyLimitLayer::new(1))
        .service_fn(|request: Request<Body>| async move {
            let name = request
                .extensions()
                .get::<HeldLock>()
                .map_or_else(String::new, |l| l.name().to_owned());
            Ok::<_, Infallible>(Response::new(Body::from(name)))
        });
    let holder = hold_a(&fx).await;
    let mut tasks = Vec::new();
    for key in ["a", "b", "c"] {
        let ready = tokio::time::timeout(Duration::from_millis(500), service.ready())
            .await
            .unwrap_or_else(|_| panic!("`ready()` for {key} waited on another request"));
        let future = ready.expect("infallible").call(
            Request::get(format!("/{key}"))
                .body(Body::empty())
                .expect("request"),
        );
        tasks.push(tokio::spawn(async move {
            let response = future.await.expect("infallible");
            let status = response.status();
            let body = http_body_util::BodyExt::collect(response.into_body())
                .await
                .expect("in-memory body")
                .to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        }));
    }
    let a = tasks.remove(0);
    for (task, key) in tasks.into_iter().zip(["b", "c"]) {
        let (status, body) = tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .unwrap_or_else(|_| panic!("{key} was served while `a` waits"))
            .expect("request task");
        assert_eq!((status, body), (StatusCode::OK, format!("http/{key}")));
    }
    assert!(!a.is_finished(), "`a` still waits for its lock");
    release_wakes_a(holder, a).await;
}

/// Takes lock `http/a` on another client of the store: held elsewhere (another replica, a
/// background job).
async fn hold_a(fx: &Fixture) -> distlock::Lease {
    fx.another_client()
        .await
        .lock("http/a")
        .acquire()
        .await
        .expect("lock a is free")
}

/// Releases `holder`; the request `waiting` for lock `a` must then be woken (within 3 s) and
/// served under it.
async fn release_wakes_a(
    holder: distlock::Lease,
    waiting: tokio::task::JoinHandle<(StatusCode, String)>,
) {
    holder.release().await.expect("release");
    let (status, body) = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("woken by the release")
        .expect("request task");
    assert_eq!((status, body.as_str()), (StatusCode::OK, "http/a"));
}
