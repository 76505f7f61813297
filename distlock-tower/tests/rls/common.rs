//! Serving a `RateLimitServer` on a loopback port and calling it as Envoy does.

use std::net::SocketAddr;

use distlock_tower::rls::{RateLimitServer, RlsConfig, Settings};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};

/// A served service and a client of it.
pub struct Served {
    pub client: RateLimitServiceClient<Channel>,
    _task: JoinHandle<()>,
}

/// Serves `server` on a free loopback port with tonic's server, and connects a client.
pub async fn serve(server: RateLimitServer) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let service = server.into_service();
    let task = tokio::spawn(async move {
        Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .expect("the gRPC server runs");
    });
    Served {
        client: connect(addr).await,
        _task: task,
    }
}

/// A client of the service at `addr`, on its own HTTP/2 connection.
pub async fn connect(addr: SocketAddr) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::new(crate::shared::grpc_channel(addr).await)
}

/// A service answering the YAML `config` (one domain) on `store`.
pub fn server(store: distlock::Client, config: &str, settings: Settings) -> RateLimitServer {
    let config = RlsConfig::from_texts([("test.yaml", config)]).expect("a valid configuration");
    RateLimitServer::new(store, config, settings).expect("limiters build")
}

/// A descriptor of `(key, value)` entries.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

/// `ShouldRateLimit` for `descriptors` of `domain`, `hits` hits each (0: the default, 1).
pub async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
    hits: u32,
) -> Result<RateLimitResponse, tonic::Status> {
    client
        .should_rate_limit(RateLimitRequest {
            domain: domain.to_owned(),
            descriptors,
            hits_addend: hits,
        })
        .await
        .map(tonic::Response::into_inner)
}

/// Whether the answer is `OK` overall.
pub fn ok(response: &RateLimitResponse) -> bool {
    response.overall_code == Code::Ok as i32
}

/// The value of response header `name`, if the answer adds it.
pub fn header<'a>(response: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key == name)
        .map(|h| h.value.as_str())
}

/// `ShouldRateLimit` for one descriptor of `entries` in `domain`, one hit.
pub async fn ask_one(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    entries: &[(&str, &str)],
) -> RateLimitResponse {
    ask(client, domain, vec![descriptor(entries)], 0)
        .await
        .expect("an answer")
}

/// Whether each of `times` requests of `descriptors` in `domain` was answered `OK`.
pub async fn oks(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    descriptors: &[RateLimitDescriptor],
    times: usize,
) -> Vec<bool> {
    let mut seen = Vec::with_capacity(times);
    for _ in 0..times {
        let answer = ask(client, domain, descriptors.to_vec(), 0)
            .await
            .expect("an answer");
        seen.push(ok(&answer));
    }
    seen
}
