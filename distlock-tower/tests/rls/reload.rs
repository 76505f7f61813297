//! Reloads: a changed file is put in use; a broken one is refused with its file and line,
//! counted, shown on the debug dump, and the configuration in use stays.

use std::time::{Duration, Instant};

use distlock::Client;
use distlock_tower::rls::{RateLimitServer, RlsConfig, Settings, watch};

use crate::common::{ask, descriptor, ok, serve};
use crate::support::files::make_temp_dir;

const FIRST: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: day, requests_per_unit: 1 }\n";
const SECOND: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: day, requests_per_unit: 3 }\n";
const BROKEN: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 3 }\n";

/// Polls `cond` every 20 ms for up to 10 s.
async fn eventually(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond().await {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_file_is_taken_and_a_broken_one_is_not() {
    let dir = make_temp_dir("distlock-rls-reload-");
    std::fs::write(dir.join("d.yaml"), FIRST).expect("write");
    let config = RlsConfig::from_dir(&dir).expect("valid");
    let server =
        RateLimitServer::new(Client::in_memory(), config, Settings::default()).expect("server");
    let served = serve(server.clone()).await;
    let _watch = watch(server.clone(), dir.clone(), Duration::from_millis(50));
    let mut c = served.client.clone();
    let limit = async |c: &mut _| {
        ask(c, "d", vec![descriptor(&[("k", "v")])], 0)
            .await
            .expect("answer")
            .statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit)
    };
    assert_eq!(limit(&mut c).await, Some(1));

    // A new rate: taken within a few periods (the counts of the key carry over: same name).
    std::fs::write(dir.join("d.yaml"), SECOND).expect("write");
    eventually("the new rate was taken", async || {
        limit(&mut c).await == Some(3)
    })
    .await;
    assert!(server.last_error().is_none());

    // A broken file: the rate in use stays, and the error names the file and the line.
    std::fs::write(dir.join("d.yaml"), BROKEN).expect("write");
    eventually("the broken file was seen", async || {
        server.last_error().is_some()
    })
    .await;
    let error = server.last_error().expect("error");
    assert!(error.contains("d.yaml"), "{error}");
    assert!(error.contains("fortnight"), "{error}");
    assert_eq!(
        limit(&mut c).await,
        Some(3),
        "the configuration in use stays"
    );
    assert!(
        server.dump().contains("# last reload failed"),
        "{}",
        server.dump()
    );
    let r = ask(&mut c, "d", vec![descriptor(&[("k", "v2")])], 0)
        .await
        .expect("answer");
    assert!(ok(&r));

    // Fixed: taken again, the error cleared.
    std::fs::write(dir.join("d.yaml"), FIRST).expect("write");
    eventually("the fixed file was taken", async || {
        server.last_error().is_none()
    })
    .await;
    assert_eq!(limit(&mut c).await, Some(1));
    // A second domain in a new file.
    std::fs::write(dir.join("e.yaml"), FIRST.replace("domain: d", "domain: e")).expect("write");
    eventually("the new domain was taken", async || {
        ask(&mut c, "e", vec![descriptor(&[("k", "v")])], 0)
            .await
            .expect("answer")
            .statuses[0]
            .current_limit
            .is_some()
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
