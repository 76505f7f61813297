//! Store faults through the layer (Redis only): fail closed answers 503 with `Retry-After`
//! within the limiter's deadline; fail open passes without rate-limit fields.

use std::time::Duration;

use distlock::Client;
use distlock::ratelimit::{Outage, Policy, Rate};
use distlock_tower::client_ip::ClientIp;
use distlock_tower::rate_limit::RateLimitLayer;
use http::StatusCode;
use tokio::time::Instant;

use crate::app::{call, header, request_from, retry_after, routes};
use crate::support::{Proxy, RedisServer};

const DEADLINE: Duration = Duration::from_millis(150);
const SLACK: Duration = Duration::from_millis(150);

async fn client_via(proxy: &Proxy) -> Client {
    Client::builder()
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .reconnect_retries(1)
        .connect(&proxy.url())
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_trouble_becomes_the_outage_policys_response() {
    let mut server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let client = client_via(&proxy).await;
    let policy = Policy::gcra("api", Rate::per_minute(60).expect("valid")).expect("valid");
    let closed = routes().layer(RateLimitLayer::new(
        client.rate_limiter(policy.clone()).deadline(DEADLINE),
        ClientIp::peer(),
    ));
    let open = routes().layer(RateLimitLayer::new(
        client
            .rate_limiter(policy)
            .deadline(DEADLINE)
            .on_outage(Outage::FailOpen),
        ClientIp::peer(),
    ));
    let peer = "192.0.2.1:1";
    assert_eq!(
        call(&closed, request_from("/", peer, &[])).await.status(),
        StatusCode::OK
    );

    for fault in ["slow", "killed"] {
        if fault == "slow" {
            proxy.delay(Duration::from_secs(1));
        } else {
            proxy.pass();
            server.kill();
        }
        let start = Instant::now();
        let response = call(&closed, request_from("/", peer, &[])).await;
        let took = start.elapsed();
        assert_eq!(
            response.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "{fault}"
        );
        assert_eq!(retry_after(&response), 1);
        assert!(took <= DEADLINE + SLACK, "{fault}: 503 after {took:?}");

        let start = Instant::now();
        let response = call(&open, request_from("/", peer, &[])).await;
        let took = start.elapsed();
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "{fault}: fail open passes"
        );
        assert!(header(&response, "ratelimit").is_none(), "{fault}");
        assert!(took <= DEADLINE + SLACK, "{fault}: passed after {took:?}");
    }
}
