//! `layer_overhead`: the cost a `RateLimitLayer` (in-memory store, never denying) adds to a
//! request, driven in-process with `oneshot`. The "raw" peer is the same router without the
//! layer, so the ratio and the p50 difference are the layer's own cost.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use distlock::ratelimit::{Policy, Rate};
use distlock_tower::client_ip::ClientIp;
use distlock_tower::rate_limit::RateLimitLayer;
use http::Request;
use tower::ServiceExt;

use crate::cli::Args;
use crate::report::Outcome;
use crate::stats::Samples;
use crate::workloads::Peer;

fn router(peer: Peer) -> Result<Router, String> {
    let app = Router::new().route("/", get(|| async { "ok" }));
    Ok(match peer {
        Peer::Raw => app,
        Peer::Distlock => {
            let rate = Rate::per_second(1_000_000)
                .and_then(|r| r.burst(1_000_000))
                .map_err(|e| e.to_string())?;
            let policy = Policy::gcra("bench", rate).map_err(|e| e.to_string())?;
            let limiter = distlock::Client::in_memory()
                .rate_limiter(policy)
                .build()
                .map_err(|e| e.to_string())?;
            app.layer(RateLimitLayer::new(limiter, ClientIp::peer()))
        }
    })
}

pub async fn run(peer: Peer, args: &Args) -> Result<Outcome, String> {
    let app = router(peer)?;
    let budget = args.duration.unwrap_or(Duration::from_secs(5));
    let cap = args.ops.unwrap_or(200_000);
    let peer_addr = SocketAddr::from(([192, 0, 2, 7], 40_000));
    let mut samples = Samples::default();
    let mut errors = 0;
    let started = Instant::now();
    let mut n = 0u64;
    while n < cap && started.elapsed() < budget {
        let mut request = Request::get("/")
            .body(Body::empty())
            .map_err(|e| e.to_string())?;
        request.extensions_mut().insert(ConnectInfo(peer_addr));
        let start = Instant::now();
        match app.clone().oneshot(request).await {
            Ok(response) if response.status().is_success() => samples.record(start.elapsed()),
            Ok(_) | Err(_) => errors += 1,
        }
        n += 1;
    }
    let elapsed = started.elapsed();
    Ok(Outcome {
        errors,
        extra: vec![(
            "layer",
            if peer == Peer::Distlock {
                "true"
            } else {
                "false"
            }
            .to_owned(),
        )],
        ..Outcome::timed(peer, "layer_overhead", &mut samples, elapsed)
    })
}
