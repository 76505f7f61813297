//! The store killed: the configured outage answer, per descriptor, within the deadline.

use std::time::Duration;

use distlock::Client;
use distlock_tower::rls::{OutageAnswer, Settings};

use crate::common::{ask, descriptor, ok, serve, server};
use crate::support::RedisServer;

const CONFIG: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: day, requests_per_unit: 5 }\n";

async fn client(redis: &RedisServer) -> Client {
    Client::builder()
        .response_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(200))
        .reconnect_retries(0)
        .connect(&redis.url())
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_store_gets_the_configured_answer() {
    let mut redis = RedisServer::start();
    let mut served = Vec::new();
    for outage in [
        OutageAnswer::Unavailable,
        OutageAnswer::OverLimit,
        OutageAnswer::Ok,
        OutageAnswer::LocalFallback,
    ] {
        let mut settings = Settings::default();
        settings.outage = outage;
        settings.deadline = Duration::from_millis(150);
        served.push((
            outage,
            serve(server(client(&redis).await, CONFIG, settings)).await,
        ));
    }
    for (_, s) in &mut served {
        let r = ask(&mut s.client, "d", vec![descriptor(&[("k", "v")])], 0)
            .await
            .expect("answer");
        assert!(ok(&r), "the store answers");
    }
    redis.kill();
    for (outage, s) in &mut served {
        let answer = ask(&mut s.client, "d", vec![descriptor(&[("k", "v")])], 0).await;
        match outage {
            OutageAnswer::Unavailable => {
                let err = answer.expect_err("UNAVAILABLE");
                assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
            }
            OutageAnswer::OverLimit => assert!(!ok(&answer.expect("an answer"))),
            OutageAnswer::Ok => assert!(ok(&answer.expect("an answer"))),
            OutageAnswer::LocalFallback => {
                // Counted in this process: 5 a day pass, then not.
                assert!(ok(&answer.expect("an answer")));
                let mut passed = 1;
                for _ in 0..10 {
                    let r = ask(&mut s.client, "d", vec![descriptor(&[("k", "v")])], 0)
                        .await
                        .expect("answer");
                    passed += u32::from(ok(&r));
                }
                assert_eq!(passed, 5, "the local fallback keeps the limit");
            }
            _ => unreachable!("every answer is listed"),
        }
    }
}
