//! The `distlock-rls` binary as an operator runs it: `--check` on good and bad files, then
//! serving in memory and on Redis over gRPC and HTTP (`/healthcheck`, `/rlconfig`,
//! `/metrics`), stopping cleanly on `SIGTERM`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{ask, connect, descriptor, ok};
use crate::support::RedisServer;
use crate::support::files::{free_ports, make_temp_dir};

const BIN: &str = env!("CARGO_BIN_EXE_distlock-rls");

const CONFIG: &str = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: day, requests_per_unit: 2 }\n";

fn config_dir(text: &str) -> std::path::PathBuf {
    let dir = make_temp_dir("distlock-rls-bin-");
    std::fs::write(dir.join("edge.yaml"), text).expect("write");
    dir
}

#[test]
fn check_reads_the_files_and_says_what_is_wrong() {
    let good = config_dir(CONFIG);
    let out = Command::new(BIN)
        .args(["--check", "--config-dir"])
        .arg(&good)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{out:?}");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("edge.remote_address: unit=DAY requests_per_unit=2"),
        "{shown}"
    );

    let bad = config_dir(
        "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 2 }\n",
    );
    let out = Command::new(BIN)
        .args(["--check", "--config-dir"])
        .arg(&bad)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("edge.yaml") && said.contains("fortnight"),
        "{said}"
    );

    let out = Command::new(BIN)
        .arg("--frobnicate")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = Command::new(BIN).arg("--help").output().expect("runs");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--config-dir"));
    for dir in [good, bad] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The binary, killed on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &Path, store: &[&str]) -> (Running, SocketAddr, SocketAddr) {
    let ports = free_ports(2);
    let grpc: SocketAddr = format!("127.0.0.1:{}", ports[0]).parse().expect("addr");
    let http: SocketAddr = format!("127.0.0.1:{}", ports[1]).parse().expect("addr");
    let child = Command::new(BIN)
        .arg("--config-dir")
        .arg(dir)
        .args(store)
        .args(["--grpc", &grpc.to_string(), "--http", &http.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starts");
    (Running(child), grpc, http)
}

async fn get(http: SocketAddr, path: &str) -> Option<(u16, String)> {
    let response = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client")
        .get(format!("http://{http}{path}"))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

async fn serves(store: &[&str]) {
    let dir = config_dir(CONFIG);
    let (mut running, grpc, http) = start(&dir, store);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((200, body)) = get(http, "/healthcheck").await {
            assert_eq!(body, "OK");
            break;
        }
        assert!(Instant::now() < deadline, "the binary did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut client = connect(grpc).await;
    for expected in [true, true, false] {
        let r = ask(
            &mut client,
            "edge",
            vec![descriptor(&[("remote_address", "1.2.3.4")])],
            0,
        )
        .await
        .expect("answer");
        assert_eq!(ok(&r), expected);
    }
    let (_, config) = get(http, "/rlconfig").await.expect("rlconfig");
    assert!(config.contains("edge.remote_address"), "{config}");
    let (_, metrics) = get(http, "/metrics").await.expect("metrics");
    assert!(
        metrics.contains("ratelimit_service_rate_limit_over_limit")
            && metrics.contains("domain=\"edge\""),
        "{metrics}"
    );

    // SIGTERM: it stops serving and exits 0.
    let pid = i32::try_from(running.0.id()).expect("pid");
    // SAFETY: a plain kill(2) of our own child.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = running.0.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "still running after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_in_memory_and_stops_on_sigterm() {
    serves(&["--memory"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_on_redis() {
    let redis = RedisServer::start();
    serves(&["--redis", &redis.url()]).await;
}
