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

use crate::report::Outcome;
use crate::stats::Samples;
use crate::workloads::{Job, Peer, Workload, distlock_client};

const CALLERS: usize = 64;
const CONFIG: &str = "domain: bench\ndescriptors:\n  - key: api_key\n    rate_limit: { unit: second, requests_per_unit: 1000000 }\n    distlock: { algorithm: gcra, burst: 1000000 }\n";

/// What the callers share: operation numbers up to the cap while the budget lasts, and the
/// count of failed calls.
struct Calls {
    next: AtomicU64,
    failed: AtomicU64,
    cap: u64,
    started: Instant,
    budget: Duration,
}

impl Calls {
    /// The next operation's number, or `None` once the run is over.
    fn claim(&self) -> Option<u64> {
        let op = self.next.fetch_add(1, Ordering::Relaxed);
        (op < self.cap && self.started.elapsed() < self.budget).then_some(op)
    }

    /// A call started at `t` has ended: its latency if it succeeded, else one failure more.
    fn ended(&self, samples: &mut Samples, t: Instant, succeeded: bool) {
        if succeeded {
            samples.record(t.elapsed());
        } else {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub async fn run(job: Job<'_>) -> Result<Outcome, String> {
    let (workload, peer, targets, args) = job.parts();
    let url = targets.single()?;
    let spread: u64 = match workload {
        Workload::RlsOneDescriptor => 1,
        _ => 1_000,
    };
    let run_id: u32 = rand::random();
    let started = Instant::now();
    let calls = Arc::new(Calls {
        next: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        cap: args.ops.unwrap_or(u64::MAX),
        started,
        budget: args.duration.unwrap_or(Duration::from_secs(5)),
    });
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
                let calls = Arc::clone(&calls);
                tasks.spawn(async move {
                    let mut samples = Samples::with_capacity(4096);
                    while let Some(op) = calls.claim() {
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
                        let succeeded = client.should_rate_limit(request).await.is_ok();
                        calls.ended(&mut samples, t, succeeded);
                    }
                    samples
                });
            }
        }
        Peer::Raw => {
            let conn = crate::raw::connect(url).await?;
            for _ in 0..CALLERS {
                let mut conn = conn.clone();
                let calls = Arc::clone(&calls);
                tasks.spawn(async move {
                    let mut samples = Samples::with_capacity(4096);
                    while let Some(op) = calls.claim() {
                        let key = format!("bench:rls:{run_id}-{}", op % spread);
                        let t = Instant::now();
                        let succeeded =
                            crate::ratelimit::raw_gcra_check(&mut conn, &key, 1, 1_000_000)
                                .await
                                .is_ok();
                        calls.ended(&mut samples, t, succeeded);
                    }
                    samples
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
    Ok(Outcome {
        errors: calls.failed.load(Ordering::Relaxed),
        extra: vec![("descriptors", spread.to_string())],
        ..Outcome::timed(peer, workload.name(), &mut all, elapsed)
    })
}
