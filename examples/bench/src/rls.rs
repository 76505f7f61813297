//! `rls_one_descriptor` and `rls_many_descriptors` (only when named): Envoy's rate-limit
//! service (`distlock_tower::rls`) answering `ShouldRateLimit` over gRPC on loopback, 64
//! callers, one descriptor per request: all on one descriptor value, or spread over 1,000.
//! The limit is high enough never to refuse. The "raw" peer makes the same decisions with one
//! hand-written GCRA `EVALSHA` per request and no service in between: the floor the service's
//! gRPC hop, lookup and answer add to.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use distlock_tower::rls::{RateLimitServer, RlsConfig, Settings};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;
use tonic::transport::server::TcpIncoming;

use crate::cli::Args;
use crate::report::Outcome;
use crate::stats::Samples;
use crate::workloads::{Peer, Targets, Workload, distlock_client};

const CALLERS: usize = 64;
const CONFIG: &str = "domain: bench\ndescriptors:\n  - key: api_key\n    rate_limit: { unit: second, requests_per_unit: 1000000 }\n    distlock: { algorithm: gcra, burst: 1000000 }\n";

pub async fn run(
    workload: Workload,
    peer: Peer,
    targets: &Targets,
    args: &Args,
) -> Result<Outcome, String> {
    let url = targets.single()?;
    let spread: u64 = match workload {
        Workload::RlsOneDescriptor => 1,
        _ => 1_000,
    };
    let budget = args.duration.unwrap_or(Duration::from_secs(5));
    let cap = args.ops.unwrap_or(u64::MAX);
    let run_id: u32 = rand::random();
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    match peer {
        Peer::Distlock => {
            let client = distlock_client(workload, targets).await?;
            let config =
                RlsConfig::from_texts([("bench.yaml", CONFIG)]).map_err(|e| e.to_string())?;
            let server = RateLimitServer::new(client, config, Settings::default())
                .map_err(|e| e.to_string())?;
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| e.to_string())?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            tasks.spawn(async move {
                let _ = tonic::transport::Server::builder()
                    .add_service(server.into_service())
                    .serve_with_incoming(TcpIncoming::from(listener))
                    .await;
                Samples::with_capacity(0)
            });
            let channel = Channel::from_shared(format!("http://{addr}"))
                .map_err(|e| e.to_string())?
                .connect()
                .await
                .map_err(|e| e.to_string())?;
            for _ in 0..CALLERS {
                let mut client = RateLimitServiceClient::new(channel.clone());
                let (next, failed) = (Arc::clone(&next), Arc::clone(&failed));
                tasks.spawn(async move {
                    let mut samples = Samples::with_capacity(4096);
                    loop {
                        let op = next.fetch_add(1, Ordering::Relaxed);
                        if op >= cap || started.elapsed() >= budget {
                            return samples;
                        }
                        let value = format!("{run_id}-{}", op % spread);
                        let request = RateLimitRequest {
                            domain: "bench".to_owned(),
                            descriptors: vec![RateLimitDescriptor {
                                entries: vec![Entry {
                                    key: "api_key".to_owned(),
                                    value,
                                }],
                                ..RateLimitDescriptor::default()
                            }],
                            hits_addend: 1,
                        };
                        let t = Instant::now();
                        if client.should_rate_limit(request).await.is_ok() {
                            samples.record(t.elapsed());
                        } else {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        }
        Peer::Raw => {
            let conn = crate::raw::connect(url).await?;
            for _ in 0..CALLERS {
                let mut conn = conn.clone();
                let (next, failed) = (Arc::clone(&next), Arc::clone(&failed));
                tasks.spawn(async move {
                    let mut samples = Samples::with_capacity(4096);
                    loop {
                        let op = next.fetch_add(1, Ordering::Relaxed);
                        if op >= cap || started.elapsed() >= budget {
                            return samples;
                        }
                        let key = format!("bench:rls:{run_id}-{}", op % spread);
                        let t = Instant::now();
                        if crate::ratelimit::raw_gcra_check(&mut conn, &key, 1, 1_000_000)
                            .await
                            .is_ok()
                        {
                            samples.record(t.elapsed());
                        } else {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        }
    }
    let mut all = Samples::with_capacity(0);
    let mut waited = 0;
    while let Some(done) = tasks.join_next().await {
        if let Ok(samples) = done {
            all.merge(samples);
        }
        waited += 1;
        if waited == CALLERS {
            // The server task (distlock) runs until the set is dropped.
            break;
        }
    }
    tasks.abort_all();
    let elapsed = started.elapsed();
    let n = all.len() as u64;
    let (p50, p99, max) = all.percentiles();
    Ok(Outcome {
        peer: peer.name(),
        workload: workload.name(),
        ops_per_s: n as f64 / elapsed.as_secs_f64(),
        p50_us: p50,
        p99_us: p99,
        max_us: max,
        errors: failed.load(Ordering::Relaxed),
        violations: 0,
        n,
        extra: vec![("descriptors", spread.to_string())],
    })
}
