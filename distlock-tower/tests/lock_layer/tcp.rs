//! The layer over real TCP: `axum::serve` on 127.0.0.1 and an HTTP client, on both stores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::StatusCode;

use crate::app::{Fixture, Seen, TTL, app, http_client, http_get, layer, on_both_stores, serve};

on_both_stores!(
    busy_over_tcp_is_423_with_retry_after,
    streaming_body_keeps_the_lease_until_it_ends,
    client_gone_mid_stream_releases_the_lease,
    hundred_concurrent_clients_run_one_at_a_time,
);

fn parse_retry_after(response: &reqwest::Response) -> u64 {
    response
        .headers()
        .get("retry-after")
        .expect("Retry-After is set")
        .to_str()
        .expect("ASCII")
        .parse()
        .expect("whole seconds")
}

async fn busy_over_tcp_is_423_with_retry_after(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let (addr, _server) = serve(app(layer(&fx), &seen)).await;
    let http = http_client();
    // Two chunks a second apart: once the first has arrived, the lock is held.
    let mut holder = http_get(&http, format!("http://{addr}/stream/1/2/1000")).await;
    assert!(holder.chunk().await.expect("chunk").is_some());
    let busy = http_get(&http, format!("http://{addr}/orders/1")).await;
    assert_eq!(busy.status(), StatusCode::LOCKED);
    let secs = parse_retry_after(&busy);
    assert!((1..=TTL.as_secs()).contains(&secs), "Retry-After {secs}");
    assert!(busy.text().await.expect("body").contains("locked"));
    while holder.chunk().await.expect("chunk").is_some() {}
    let after = http_get(&http, format!("http://{addr}/orders/1")).await;
    assert_eq!(
        after.status(),
        StatusCode::OK,
        "free once the holder's response was read"
    );
}

async fn streaming_body_keeps_the_lease_until_it_ends(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let (addr, _server) = serve(app(layer(&fx), &seen)).await;
    let http = http_client();
    // Five chunks, 200 ms apart: the handler returns at once, the body takes ~800 ms.
    let mut stream = http_get(&http, format!("http://{addr}/stream/1/5/200")).await;
    assert_eq!(stream.status(), StatusCode::OK);
    let mut chunks = 0;
    while let Some(chunk) = stream.chunk().await.expect("chunk") {
        assert!(chunk.starts_with(b"chunk "));
        chunks += 1;
        // Chunks 4 and 5 are still to come, the last one about 400 ms away.
        if chunks <= 3 {
            // The handler has long returned, but the body is still streaming.
            let busy = http_get(&http, format!("http://{addr}/orders/1")).await;
            assert_eq!(
                busy.status(),
                StatusCode::LOCKED,
                "refused while chunk {chunks} of 5 streams"
            );
        }
    }
    assert_eq!(chunks, 5);
    // No sleep, no retry: the lease was released before the end of the body was sent.
    let after = http_get(&http, format!("http://{addr}/orders/1")).await;
    assert_eq!(after.status(), StatusCode::OK);
    after.text().await.expect("body");
    assert!(fx.is_free("http/order:1").await);
}

async fn client_gone_mid_stream_releases_the_lease(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let (addr, _server) = serve(app(layer(&fx), &seen)).await;
    let http = http_client();
    // 100 chunks, 50 ms apart: ~5 s if read to the end.
    let mut stream = http_get(&http, format!("http://{addr}/stream/1/100/50")).await;
    assert!(stream.chunk().await.expect("chunk").is_some());
    assert!(!fx.is_free("http/order:1").await);
    let gone = Instant::now();
    drop(stream); // closes the connection mid-body
    assert!(
        fx.wait_free("http/order:1", Duration::from_secs(2)).await,
        "the lease outlived the client by 2 s"
    );
    let released_after = gone.elapsed();
    let after = http_get(&http, format!("http://{addr}/orders/1")).await;
    assert_eq!(after.status(), StatusCode::OK);
    eprintln!("released {released_after:?} after the client went away");
}

async fn hundred_concurrent_clients_run_one_at_a_time(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let (addr, _server) = serve(app(layer(&fx).wait(Duration::from_secs(60)), &seen)).await;
    let http = http_client();
    let started = Instant::now();
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let http = http.clone();
            tokio::spawn(async move {
                let response = http_get(&http, format!("http://{addr}/count/1")).await;
                (response.status(), response.text().await.expect("body"))
            })
        })
        .collect();
    seen.assert_ran_one_at_a_time(tasks).await;
    eprintln!(
        "100 serialized requests over TCP in {:?}",
        started.elapsed()
    );
}
