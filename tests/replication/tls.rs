//! TLS (distlock's `tls` feature): what redis-rs 1.8 with rustls needs to reach a
//! `rediss://` server whose certificate comes from a private CA, proven against the harness's
//! [`TlsServer`].
//!
//! * rustls needs a process-wide crypto provider, and distlock's `tls` feature (redis-rs's
//!   `tokio-rustls-comp` + `tls-rustls-webpki-roots`) enables none: without one, the first
//!   TLS connect fails inside `rustls::ClientConfig::builder()`. The raw redis-rs tests here
//!   install `ring`'s ([`install_crypto_provider`]); distlock installs it itself before its
//!   first connection, which a fresh child process proves (nothing else in it installs one).
//! * A plain `rediss://` URL trusts only the webpki roots: a private CA must be passed as
//!   `redis::TlsCertificates { root_cert: Some(ca_pem), client_tls }` to
//!   `redis::Client::build_with_tls`, to `ClusterClientBuilder::certs`, or (for a connection
//!   manager) through the `Client` it is made from.
//! * The `#insecure` fragment parses, but needs redis-rs's `tls-rustls-insecure` feature to
//!   connect (not enabled): `InvalidClientConfig`.
//! * The library's `ClientBuilder::tls_root_certificate` / `tls_client_identity` do the same
//!   for `Client::connect`; a wrong CA is `StoreError::Unreachable` ("invalid peer
//!   certificate: UnknownIssuer").

use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::{AsyncConnectionConfig, ClientTlsConfig, RedisError, TlsCertificates};

use crate::support::child::{self, ChildProcess};
use crate::support::tls::{ClientAuth, TlsSentinelSetup, TlsServer};

/// Installs rustls's `ring` provider as the process default (once; later calls are no-ops).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// What a client that trusts `ca` (and presents `identity`, if any) passes to redis-rs.
fn certificates(ca: &[u8], identity: Option<(&[u8], &[u8])>) -> TlsCertificates {
    TlsCertificates {
        client_tls: identity.map(|(cert, key)| ClientTlsConfig {
            client_cert: cert.to_vec(),
            client_key: key.to_vec(),
        }),
        root_cert: Some(ca.to_vec()),
    }
}

fn config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)))
}

/// Connects with `certs` and sends `PING`.
async fn ping_with(server: &TlsServer, certs: TlsCertificates) -> Result<String, RedisError> {
    install_crypto_provider();
    let client = redis::Client::build_with_tls(server.url(), certs)?;
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config())
        .await?;
    redis::cmd("PING").query_async(&mut conn).await
}

fn describe(err: &RedisError) -> String {
    format!(
        "kind {:?}, code {:?}, io {}, message: {err}",
        err.kind(),
        err.code(),
        err.is_io_error()
    )
}

/// The certificates are usable by redis-server and by the harness's `redis-cli --tls`.
#[test]
fn tls_server_starts_and_redis_cli_talks_to_it() {
    let server = TlsServer::builder()
        .client_auth(ClientAuth::Required)
        .start();
    assert!(server.url().starts_with("rediss://127.0.0.1:"));
    assert_eq!(
        server.cli(&["PING"]).expect("redis-cli PING").trim(),
        "PONG"
    );
    assert!(
        server.log().contains("Ready to accept connections"),
        "{}",
        server.log()
    );
}

#[tokio::test]
async fn a_client_that_trusts_the_ca_connects() {
    let server = TlsServer::start();
    let reply = ping_with(&server, certificates(server.ca_pem(), None)).await;
    assert_eq!(
        reply.as_deref().map_err(describe),
        Ok("PONG"),
        "log:\n{}",
        server.log()
    );
}

#[tokio::test]
async fn tls_auth_clients_yes_needs_the_client_certificate() {
    let server = TlsServer::builder()
        .client_auth(ClientAuth::Required)
        .start();
    let certs = server.certs();
    let with = ping_with(
        &server,
        certificates(
            certs.ca_pem(),
            Some((certs.client_cert_pem(), certs.client_key_pem())),
        ),
    )
    .await;
    assert_eq!(with.as_deref().map_err(describe), Ok("PONG"));

    let without = ping_with(&server, certificates(certs.ca_pem(), None)).await;
    let err = without.expect_err("no client certificate: refused");
    eprintln!(
        "tls-auth-clients yes, no client certificate: {}",
        describe(&err)
    );

    let foreign = ping_with(
        &server,
        certificates(
            certs.ca_pem(),
            Some((certs.other_client_cert_pem(), certs.other_client_key_pem())),
        ),
    )
    .await;
    let err = foreign.expect_err("a client certificate from another CA: refused");
    eprintln!(
        "tls-auth-clients yes, client certificate from another CA: {}",
        describe(&err)
    );
}

#[tokio::test]
async fn a_client_that_trusts_another_ca_is_refused() {
    let server = TlsServer::start();
    let err = ping_with(&server, certificates(server.certs().other_ca_pem(), None))
        .await
        .expect_err("the wrong CA must not connect");
    eprintln!("wrong CA: {}", describe(&err));
    assert!(err.is_io_error(), "{}", describe(&err));
    assert!(
        err.to_string()
            .contains("invalid peer certificate: UnknownIssuer"),
        "{}",
        describe(&err)
    );

    // No CA at all: the bundled webpki roots do not know ours either.
    install_crypto_provider();
    let client = redis::Client::open(server.url()).expect("rediss:// parses");
    let err = client
        .get_multiplexed_async_connection_with_config(&config())
        .await
        .expect_err("the webpki roots do not trust a private CA");
    eprintln!("plain rediss:// URL (webpki roots): {}", describe(&err));
    assert!(
        err.to_string().contains("UnknownIssuer"),
        "{}",
        describe(&err)
    );
}

#[tokio::test]
async fn the_insecure_fragment_needs_a_feature_distlock_does_not_enable() {
    let server = TlsServer::start();
    install_crypto_provider();
    let url = format!("{}#insecure", server.url());
    let result = match redis::Client::open(url.as_str()) {
        Ok(client) => client
            .get_multiplexed_async_connection_with_config(&config())
            .await
            .map(drop),
        Err(e) => Err(e),
    };
    let err = result.expect_err("#insecure without tls-rustls-insecure");
    eprintln!("{url}: {}", describe(&err));
    assert_eq!(err.kind(), redis::ErrorKind::InvalidClientConfig);
}

#[tokio::test]
async fn a_connection_manager_over_tls_reconnects_after_a_restart() {
    let server = TlsServer::builder()
        .client_auth(ClientAuth::Required)
        .start();
    install_crypto_provider();
    let certs = server.certs();
    let client = redis::Client::build_with_tls(
        server.url(),
        certificates(
            certs.ca_pem(),
            Some((certs.client_cert_pem(), certs.client_key_pem())),
        ),
    )
    .expect("client with certificates");
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    let mut manager = ConnectionManager::new_with_config(client, config)
        .await
        .unwrap_or_else(|e| panic!("{}\n{}", describe(&e), server.log()));
    let pong: String = redis::cmd("PING")
        .query_async(&mut manager)
        .await
        .expect("PING");
    assert_eq!(pong, "PONG");

    server.node().restart();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match redis::cmd("PING").query_async::<String>(&mut manager).await {
            Ok(pong) => {
                assert_eq!(pong, "PONG");
                break;
            }
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no reconnect over TLS: {}",
                    describe(&e)
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test]
async fn a_cluster_client_over_tls_takes_the_ca_through_certs() {
    let server = TlsServer::builder()
        .client_auth(ClientAuth::Required)
        .cluster()
        .start();
    install_crypto_provider();
    let certs = server.certs();
    let client = ClusterClientBuilder::new(vec![server.url()])
        .certs(certificates(
            certs.ca_pem(),
            Some((certs.client_cert_pem(), certs.client_key_pem())),
        ))
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .build()
        .expect("cluster client");
    let mut conn = client
        .get_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{}\n{}", describe(&e), server.log()));
    let () = redis::cmd("SET")
        .arg("{tls}:k")
        .arg("v")
        .query_async(&mut conn)
        .await
        .expect("SET through the cluster client");
    let v: String = redis::cmd("GET")
        .arg("{tls}:k")
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(v, "v");
}

/// distlock's own Cluster client over TLS: `connect_cluster` with the library's TLS options
/// (a private CA, a client certificate the node requires) takes a lock, sees it busy from a
/// second client, and releases it, on a one-node TLS cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distlock_connects_to_a_cluster_over_tls() {
    let server = TlsServer::builder()
        .client_auth(ClientAuth::Required)
        .cluster()
        .start();
    let certs = server.certs();
    let connect = || {
        distlock::Client::builder()
            .tls_root_certificate(certs.ca_pem())
            .tls_client_identity(certs.client_cert_pem(), certs.client_key_pem())
            .connect_cluster([server.url()])
    };
    let client = connect()
        .await
        .unwrap_or_else(|e| panic!("connect_cluster over TLS: {e:?}\n{}", server.log()));
    let other = connect().await.expect("a second client");
    let lease = client
        .lock("cluster-over-tls")
        .acquire()
        .await
        .expect("acquire");
    assert!(
        matches!(
            other.lock("cluster-over-tls").acquire().await,
            Err(distlock::LockError::Busy { .. })
        ),
        "the lock is held over the cluster"
    );
    lease.release().await.expect("release");
    other
        .lock("cluster-over-tls")
        .acquire()
        .await
        .expect("free again")
        .release()
        .await
        .expect("release");
}

/// The library's own TLS options against the same server: `tls_root_certificate` and
/// `tls_client_identity`; the wrong CA fails `connect` once, as `Unreachable` (redis-rs reports
/// certificate errors as I/O errors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distlock_connects_with_the_ca_and_refuses_the_wrong_one() {
    let server = TlsServer::builder()
        .client_auth(ClientAuth::Required)
        .start();
    // No `install_crypto_provider()`: the library installs one (see the test below).
    let certs = server.certs();
    let client = distlock::Client::builder()
        .tls_root_certificate(certs.ca_pem())
        .tls_client_identity(certs.client_cert_pem(), certs.client_key_pem())
        .connect(&server.url())
        .await
        .unwrap_or_else(|e| panic!("connect over TLS: {e:?}\n{}", server.log()));
    let lease = client.lock("over-tls").acquire().await.expect("acquire");
    lease.release().await.expect("release");

    let wrong = distlock::Client::builder()
        .tls_root_certificate(certs.other_ca_pem())
        .tls_client_identity(certs.client_cert_pem(), certs.client_key_pem())
        .connect(&server.url())
        .await;
    match wrong {
        Err(distlock::StoreError::Unreachable { message, .. }) => {
            eprintln!("distlock with the wrong CA: Unreachable: {message}");
            assert!(message.contains("UnknownIssuer"), "{message}");
        }
        other => panic!("connect trusting the wrong CA: {:?}", other.map(|_| ())),
    }
}

/// A process that never installs a crypto provider itself connects with distlock over TLS:
/// the library installs one. Runs in a child process, because any earlier test in this
/// process may have installed the provider already.
#[test]
fn distlock_installs_a_crypto_provider_itself() {
    let server = TlsServer::builder()
        .client_auth(ClientAuth::Required)
        .start();
    let certs = server.certs();
    let role = format!(
        "{}|{}|{}",
        certs.ca_path().display(),
        certs.client_cert_path().display(),
        certs.client_key_path().display()
    );
    let child = ChildProcess::spawn("tls::provider_child_entry", &role, &server.url());
    let line = child.expect_line("", Duration::from_secs(30));
    assert_eq!(line, "connected", "{}", server.log());
    child.wait_success(Duration::from_secs(30));
}

/// The child of [`distlock_installs_a_crypto_provider_itself`]; does nothing in a normal run.
#[tokio::test]
#[ignore = "entry point of a child process"]
async fn provider_child_entry() {
    let Some((role, url)) = child::role() else {
        return;
    };
    assert!(
        rustls::crypto::CryptoProvider::get_default().is_none(),
        "something in the child installed a provider before distlock"
    );
    let paths: Vec<&str> = role.split('|').collect();
    let read = |i: usize| std::fs::read(paths[i]).expect("certificate file");
    let result = distlock::Client::builder()
        .tls_root_certificate(read(0))
        .tls_client_identity(read(1), read(2))
        .connect(&url)
        .await;
    match result {
        Ok(client) => {
            let lease = client.lock("provider").acquire().await.expect("acquire");
            lease.release().await.expect("release");
            child::say("connected");
        }
        Err(err) => child::say(&format!("failed: {err:?}")),
    }
}

/// Behind Sentinel over TLS, with a private CA and a client certificate that every process
/// requires (`tls-auth-clients yes`): the sentinels' own connections (lookups, the
/// `+switch-master` listener) and the data connections carry them, before and after a
/// failover. A client trusting another CA, or presenting no certificate, is refused at
/// connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distlock_behind_sentinel_over_tls_follows_a_failover() {
    let setup = TlsSentinelSetup::start();
    let certs = setup.certs();
    let builder = || {
        distlock::Client::builder()
            .response_timeout(Duration::from_secs(5))
            .connect_timeout(Duration::from_secs(2))
    };

    // The sentinels check the client: another CA, or no client certificate, connects nowhere.
    let wrong_ca = builder()
        .tls_root_certificate(certs.other_ca_pem())
        .tls_client_identity(certs.client_cert_pem(), certs.client_key_pem())
        .connect_sentinel(setup.master_name(), setup.sentinel_urls())
        .await;
    match wrong_ca {
        Err(err) => eprintln!("behind Sentinel, trusting another CA: {err}"),
        Ok(_) => panic!("a client trusting another CA connected behind Sentinel"),
    }
    let no_identity = builder()
        .tls_root_certificate(certs.ca_pem())
        .connect_sentinel(setup.master_name(), setup.sentinel_urls())
        .await;
    assert!(
        no_identity.is_err(),
        "the sentinels require a client certificate"
    );
    // Private certificates need rediss:// sentinels: refused, not sent in the clear.
    let plain = builder()
        .tls_root_certificate(certs.ca_pem())
        .connect_sentinel(setup.master_name(), ["redis://127.0.0.1:1/"])
        .await;
    match plain {
        Err(distlock::StoreError::Config { message }) => {
            assert!(message.contains("rediss://"), "{message}");
        }
        other => panic!("expected Config, got {:?}", other.map(|_| ())),
    }

    let client = builder()
        .tls_root_certificate(certs.ca_pem())
        .tls_client_identity(certs.client_cert_pem(), certs.client_key_pem())
        .connect_sentinel(setup.master_name(), setup.sentinel_urls())
        .await
        .unwrap_or_else(|e| panic!("connect_sentinel over TLS: {e:?}\n{}", setup.logs()));
    let lease = client
        .lock("tls-sentinel:before")
        .acquire()
        .await
        .expect("acquire on the primary");
    let key = client
        .__inspect()
        .lock_key("tls-sentinel:before")
        .expect("a lock name");
    let on_primary = setup
        .cli(&setup.nodes()[0], &["EXISTS", &key])
        .expect("EXISTS on the primary");
    assert_eq!(on_primary.trim(), "1", "the lock is on the primary");
    lease.release().await.expect("release");
    let limiter = client
        .rate_limiter(
            distlock::ratelimit::Policy::gcra(
                "tls-sentinel",
                distlock::ratelimit::Rate::per_second(10).expect("rate"),
            )
            .expect("policy"),
        )
        .build()
        .expect("limiter");
    assert!(limiter.check("u").await.expect("check").allowed);

    let took = setup.kill_primary();
    eprintln!("TLS Sentinel: the replica was promoted and announced after {took:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let lease = loop {
        match client.lock("tls-sentinel:after").acquire().await {
            Ok(lease) => break lease,
            Err(err) => {
                assert!(
                    Instant::now() < deadline,
                    "no lock on the new primary within 30 s: {err}\n{}",
                    setup.logs()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let key = client
        .__inspect()
        .lock_key("tls-sentinel:after")
        .expect("a lock name");
    let on_new_primary = setup
        .cli(&setup.nodes()[1], &["EXISTS", &key])
        .expect("EXISTS on the new primary");
    assert_eq!(
        on_new_primary.trim(),
        "1",
        "the lock is on the promoted replica"
    );
    lease.release().await.expect("release");
    assert!(
        limiter
            .check("u")
            .await
            .expect("check after the failover")
            .allowed,
        "the limiter follows too"
    );
}
