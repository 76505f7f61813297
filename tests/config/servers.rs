//! Configurations run against real servers: each store connects as configured, the locks
//! take the `[lock]` options, the limiters count, and `examples/distlock.toml` works.

use distlock::config::{Config, ConfigError, ConnectError};
use distlock::{LockError, RateLimitError};

use crate::EXAMPLE;
use crate::support::RedisServer;
use crate::support::cluster::RedisCluster;
use crate::support::sentinel::SentinelSetup;

/// A lock and a limiter of `config` work on the client it connects to; returns the client.
async fn lock_and_limit(config: &Config, kind: &str) -> distlock::Client {
    let client = config.connect().await.expect("connect as configured");
    assert_eq!(client.store_kind(), kind);
    let lease = config
        .lock(&client, format!("config:{kind}:lock"))
        .acquire()
        .await
        .expect("acquire");
    // The `[lock]` options: no wait, so a second acquire is refused at once.
    let busy = config
        .lock(&client, format!("config:{kind}:lock"))
        .acquire()
        .await;
    assert!(
        matches!(
            busy,
            Err(LockError::Busy { .. } | LockError::Timeout { .. })
        ),
        "{busy:?}"
    );
    lease.release().await.expect("release");
    client
}

fn config(client: &str) -> Config {
    Config::from_toml_str(&format!(
        "[client]\n{client}\nresponse_timeout = \"3s\"\n\n[lock]\nttl = \"5s\"\nwait = \"0s\"\n\n\
         [limiters.api]\npolicies = \"2/min\"\n"
    ))
    .expect("configuration")
}

#[tokio::test]
async fn a_single_primary_from_its_url() {
    let server = RedisServer::start();
    let config = config(&format!(
        "url = {:?}\nprefix = \"cfg-single\"",
        server.url()
    ));
    let client = lock_and_limit(&config, "redis").await;
    assert_eq!(client.prefix(), "cfg-single");
    let api = config.limiter(&client, "api").expect("limiter");
    assert!(api.check("u").await.expect("check").allowed);
    assert!(api.check("u").await.expect("check").allowed);
    let third = api.check("u").await.expect("check");
    assert!(!third.allowed, "2/min: the third is denied");
    assert_eq!(&*third.policy, "api");
    // Every limiter at once, and one the configuration does not have.
    assert_eq!(config.limiters(&client).expect("all").len(), 1);
    let err = config.limiter(&client, "nope").unwrap_err();
    assert!(
        matches!(&err, ConfigError::NoLimiter { known, .. } if known == &["api"]),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "no limiter `nope` in the configuration (it has `api`)"
    );
}

#[tokio::test]
async fn max_attempts_from_the_file_ends_a_forever_wait() {
    let server = RedisServer::start();
    let config = Config::from_toml_str(&format!(
        "[client]\nurl = {:?}\n[lock]\nwait = \"forever\"\nmax_attempts = 2\n\
         retry_backoff = {{ first = \"1ms\", largest = \"2ms\" }}",
        server.url()
    ))
    .expect("configuration");
    let client = config.connect().await.expect("connect");
    let held = client
        .lock("config:attempts")
        .acquire()
        .await
        .expect("free");
    // Without `max_attempts` this would wait for ever; with it, two tries and a timeout.
    let err = config
        .lock(&client, "config:attempts")
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    held.release().await.expect("release");
}

#[tokio::test]
async fn a_url_nobody_answers_is_a_connect_error() {
    let server = RedisServer::start();
    let url = server.url();
    drop(server);
    let config = Config::from_toml_str(&format!(
        "[client]\nurl = {url:?}\nconnect_timeout = \"200ms\"\nresponse_timeout = \"200ms\"\nreconnect_retries = 0"
    ))
    .expect("configuration");
    let err = config.connect().await.unwrap_err();
    assert!(matches!(err, ConnectError::Store(_)), "{err:?}");
    // Which server it was: the address, not only the connection layer's words.
    let addr = url.trim_start_matches("redis://").trim_end_matches('/');
    assert!(err.to_string().contains(addr), "{err}");
}

#[tokio::test]
async fn a_redlock_quorum_locks_and_refuses_to_count() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let config = config(&format!(
        "quorum = {{ nodes = {urls:?}, node_timeout = \"500ms\" }}"
    ));
    let client = lock_and_limit(&config, "quorum").await;
    // A quorum cannot count: the limiter is refused when it is built, with its name.
    let err = config.limiter(&client, "api").unwrap_err();
    assert!(
        matches!(&err, ConfigError::Limiter { name, source: RateLimitError::UnsupportedStore { .. } } if name == "api"),
        "{err:?}"
    );
    assert!(config.limiters(&client).is_err());
}

/// `counting_on` in the file: locks on the quorum, the limiter on a single primary, both
/// under the quorum's prefix (the counting client's was left out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_counting_on_a_primary_from_the_file() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let counts = RedisServer::start();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let config = config(&format!(
        "quorum = {{ nodes = {urls:?}, node_timeout = \"500ms\" }}\nprefix = \"cfg-q\"\n\
         counting_on = {{ url = {:?} }}",
        counts.url()
    ));
    let client = lock_and_limit(&config, "quorum").await;
    let api = config
        .limiter(&client, "api")
        .expect("counted on the primary");
    assert!(api.check("u").await.expect("check").allowed);
    // The limiter's key is on the counting primary, under the quorum's prefix.
    let mut conn = counts.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("cfg-q:*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert!(!keys.is_empty(), "nothing counted on the primary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_names_the_primary() {
    let setup = SentinelSetup::start();
    let config = config(&format!(
        "sentinel = {{ master = {:?}, nodes = {:?} }}",
        setup.master_name(),
        setup.sentinel_urls()
    ));
    let client = lock_and_limit(&config, "redis").await;
    let api = config.limiter(&client, "api").expect("limiter");
    assert!(api.check("u").await.expect("check").allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_from_its_nodes() {
    let cluster = RedisCluster::shared();
    let config = config(&format!(
        "cluster = {:?}\nprefix = \"cfg-cluster\"",
        cluster.seed_urls()
    ));
    let client = lock_and_limit(&config, "cluster").await;
    let api = config.limiter(&client, "api").expect("limiter");
    let subject = format!("u-{}", std::process::id());
    assert!(api.check(&subject).await.expect("check").allowed);
    assert!(api.check(&subject).await.expect("check").allowed);
    assert!(!api.check(&subject).await.expect("check").allowed);
}

#[tokio::test]
async fn replica_acknowledgement_on_a_url() {
    let primary = RedisServer::start();
    let replica = RedisServer::builder().replica_of(primary.addr()).start();
    primary.wait_connected_replicas(1).await;
    let config = config(&format!(
        "url = {:?}\nreplicas = {{ count = 1, timeout = \"1s\" }}",
        primary.url()
    ));
    lock_and_limit(&config, "redis").await;
    drop(replica);
}

/// Values at the edge of what parsing takes (a wait of a hundred million days, an endless
/// store patience) run without a panic or an overflow.
#[tokio::test]
async fn extreme_values_that_parse_also_run() {
    let server = RedisServer::start();
    let config = Config::from_toml_str(&format!(
        "[client]\nurl = {:?}\nreconnect_retries = 18446744073709551615\n\
         [lock]\nttl = \"7d\"\nwait = \"100000000d\"\nstore_patience = \"100000000d\"\n\
         max_hold = \"100000000d\"\nmin_hold = \"0s\"\n\
         [limiters.api]\npolicies = \"1/366d\"\nmax_wait = \"forever\"\n\
         deadline = \"100000000d\"\ndeny_cache = 18446744073709551615\n\
         max_in_flight = 18446744073709551615\n",
        server.url()
    ))
    .expect("extreme but valid");
    let client = config.connect().await.expect("connect");
    let lease = config
        .lock(&client, "config:extreme")
        .acquire()
        .await
        .expect("acquire");
    lease.release().await.expect("release");
    let api = config.limiter(&client, "api").expect("limiter");
    assert!(api.check("u").await.expect("check").allowed);
    assert!(!api.check("u").await.expect("check").allowed);
}

/// `examples/distlock.toml`, pointed at a test server by the environment as a deployment
/// would: it connects, locks and limits as its comments say.
#[tokio::test]
async fn the_example_file_runs() {
    let server = RedisServer::start();
    let config = Config::loader()
        .file(EXAMPLE)
        .env_vars("DISTLOCK", [("DISTLOCK__CLIENT__URL", server.url())])
        .load()
        .expect("examples/distlock.toml with the test server's url");
    let client = config.connect().await.expect("connect");
    assert_eq!(client.prefix(), "shop");
    let lease = config
        .lock(&client, "order:42")
        .acquire()
        .await
        .expect("acquire");
    lease.release().await.expect("release");
    let limiters = config.limiters(&client).expect("every limiter");
    let login = &limiters["login"];
    for attempt in 0..5 {
        assert!(
            login.check("alice").await.expect("check").allowed,
            "attempt {attempt}"
        );
    }
    let sixth = login.check("alice").await.expect("check");
    assert!(!sixth.allowed);
    assert_eq!(&*sixth.policy, "login");
    let api = &limiters["api"];
    assert!(api.check("alice").await.expect("check").allowed);
}

/// `rediss://` with the TLS files named in the configuration: a private CA and a client
/// certificate the server requires; a file that is not there is named by its field.
#[cfg(feature = "tls")]
#[tokio::test]
async fn tls_files_are_read_when_connecting() {
    use crate::support::tls::{ClientAuth, TlsServer};

    let server = TlsServer::builder()
        .client_auth(ClientAuth::Required)
        .start();
    let certs = server.certs();
    let text = format!(
        "[client]\nurl = {:?}\nresponse_timeout = \"3s\"\n\
         tls = {{ ca_file = {:?}, cert_file = {:?}, key_file = {:?} }}\n\
         [limiters.api]\npolicies = \"1/min\"\n",
        server.url(),
        certs.ca_path(),
        certs.client_cert_path(),
        certs.client_key_path(),
    );
    let config = Config::from_toml_str(&text).expect("configuration");
    let client = config.connect().await.expect("connect over TLS");
    let api = config.limiter(&client, "api").expect("limiter");
    assert!(api.check("u").await.expect("check").allowed);
    assert!(!api.check("u").await.expect("check").allowed);

    let missing = text.replace(
        &format!("{:?}", certs.client_key_path()),
        "\"/nonexistent/client.key\"",
    );
    let err = Config::from_toml_str(&missing)
        .expect("configuration")
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ConnectError::ReadFile {
                field: "tls.key_file",
                ..
            }
        ),
        "{err:?}"
    );
}
