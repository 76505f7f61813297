//! `distlock-rls`: Envoy's rate-limit service on distlock, in one command.
//!
//! ```text
//! distlock-rls --config-dir ./ratelimit --redis redis://127.0.0.1:6379/
//! ```
//!
//! Serves `envoy.service.ratelimit.v3.RateLimitService` and `grpc.health.v1.Health` over gRPC
//! (`--grpc`, default `0.0.0.0:8081`, as envoyproxy/ratelimit), and over HTTP (`--http`,
//! default `0.0.0.0:8080`) `/healthcheck` (`200 OK` while the store answers), `/rlconfig`
//! (the configuration in use) and `/metrics` (Prometheus). Reloads the configuration when its
//! files change, keeping the one in use when the new one is wrong; stops gracefully on
//! `SIGTERM` or `Ctrl-C`. `--help` lists every option.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use distlock::Client;
use distlock_tower::rls::{OutageAnswer, RateLimitServer, RlsConfig, Settings, watch};
use http::StatusCode;

const HELP: &str = "distlock-rls: Envoy's rate-limit service on distlock's limiters

USAGE: distlock-rls [OPTIONS]

OPTIONS (each also read from the environment variable in brackets):
  --config-dir DIR     the YAML files, one domain each, as envoyproxy/ratelimit reads them
                       [RLS_CONFIG_DIR; else RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config]
  --redis URL          a Redis primary (redis:// or rediss://)             [REDIS_URL]
  --cluster URLS       a Redis Cluster, seed URLs separated by commas      [REDIS_CLUSTER_URLS]
  --memory             in memory: one process only (tests, a trial)
  --prefix PREFIX      the prefix of every key (default distlock)          [RLS_PREFIX]
  --grpc ADDR          where to serve gRPC (default 0.0.0.0:8081)          [RLS_GRPC_ADDR]
  --http ADDR          where to serve /healthcheck, /rlconfig and /metrics (default
                       0.0.0.0:8080; `off` for none)                        [RLS_HTTP_ADDR]
  --reload DURATION    how often to look at the files for changes (default 5s)
  --outage ANSWER      while the store is down: unavailable (default; Envoy's
                       failure_mode_deny decides), over-limit, ok, local-fallback
  --deny-cache N       each limit's local deny cache, in keys (default 0: none)
  --no-headers         no x-ratelimit-* headers in the answers
  --check              read the configuration, print it, and exit (0 when it holds)
  --help               this text
";

/// The command line, with the environment's values where the line says nothing.
#[derive(Debug)]
struct Options {
    config_dir: Option<PathBuf>,
    store: Store,
    prefix: Option<String>,
    grpc: SocketAddr,
    http: Option<SocketAddr>,
    reload: Duration,
    settings: Settings,
    check: bool,
}

#[derive(Debug)]
enum Store {
    Redis(String),
    Cluster(Vec<String>),
    Memory,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let mut config_dir = env("RLS_CONFIG_DIR").map(PathBuf::from).or_else(|| {
        let root = env("RUNTIME_ROOT")?;
        let sub = env("RUNTIME_SUBDIRECTORY").unwrap_or_default();
        Some(PathBuf::from(root).join(sub).join("config"))
    });
    let mut redis = env("REDIS_URL");
    let mut cluster = env("REDIS_CLUSTER_URLS");
    let mut memory = false;
    let mut prefix = env("RLS_PREFIX");
    let mut grpc = env("RLS_GRPC_ADDR").unwrap_or_else(|| "0.0.0.0:8081".to_owned());
    let mut http = env("RLS_HTTP_ADDR").unwrap_or_else(|| "0.0.0.0:8080".to_owned());
    let mut reload = "5s".to_owned();
    let mut settings = Settings::default();
    let mut check = false;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| format!("{name} needs a value (see --help)"))
        };
        match arg.as_str() {
            "--help" | "-h" => return Ok(None),
            "--config-dir" => config_dir = Some(PathBuf::from(value("--config-dir")?)),
            "--redis" => redis = Some(value("--redis")?),
            "--cluster" => cluster = Some(value("--cluster")?),
            "--memory" => memory = true,
            "--prefix" => prefix = Some(value("--prefix")?),
            "--grpc" => grpc = value("--grpc")?,
            "--http" => http = value("--http")?,
            "--reload" => reload = value("--reload")?,
            "--outage" => {
                settings.outage = match value("--outage")?.as_str() {
                    "unavailable" => OutageAnswer::Unavailable,
                    "over-limit" => OutageAnswer::OverLimit,
                    "ok" => OutageAnswer::Ok,
                    "local-fallback" => OutageAnswer::LocalFallback,
                    other => {
                        return Err(format!(
                            "--outage {other:?}: unavailable, over-limit, ok or local-fallback"
                        ));
                    }
                };
            }
            "--deny-cache" => {
                let n = value("--deny-cache")?;
                settings.deny_cache = n
                    .parse()
                    .map_err(|_| format!("--deny-cache {n:?}: a whole number"))?;
            }
            "--no-headers" => settings.response_headers = false,
            "--check" => check = true,
            other => return Err(format!("unknown option {other:?} (see --help)")),
        }
    }
    let store = match (memory, redis, cluster) {
        (true, None, None) => Store::Memory,
        (false, Some(url), None) => Store::Redis(url),
        (false, None, Some(urls)) => Store::Cluster(
            urls.split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect(),
        ),
        (false, None, None) if check => Store::Memory,
        (false, None, None) => {
            return Err("no store: give --redis URL, --cluster URLS or --memory".to_owned());
        }
        _ => return Err("give one store: --redis, --cluster or --memory".to_owned()),
    };
    let address = |name: &str, text: &str| {
        text.parse::<SocketAddr>()
            .map_err(|e| format!("{name} {text:?}: {e} (an address like 0.0.0.0:8081)"))
    };
    Ok(Some(Options {
        config_dir,
        store,
        prefix,
        grpc: address("--grpc", &grpc)?,
        http: if http == "off" {
            None
        } else {
            Some(address("--http", &http)?)
        },
        reload: distlock_grammar::parse_duration(&reload)
            .map_err(|e| format!("--reload {reload:?}: {e}"))?,
        settings,
        check,
    }))
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_init();
    let options = match parse(std::env::args().skip(1)) {
        Ok(Some(options)) => options,
        Ok(None) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            eprintln!("distlock-rls: {why}");
            return ExitCode::from(2);
        }
    };
    match run(options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("distlock-rls: {why}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, at `info` unless `RUST_LOG` names another level (`debug`, `warn`...).
fn tracing_init() {
    let level = std::env::var("RUST_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::INFO);
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

async fn run(options: Options) -> Result<(), String> {
    let Some(dir) = options.config_dir.clone() else {
        return Err(
            "no configuration: give --config-dir DIR (or RLS_CONFIG_DIR, or RUNTIME_ROOT)"
                .to_owned(),
        );
    };
    let config = RlsConfig::from_dir(&dir).map_err(|e| e.to_string())?;
    if options.check {
        let client = Client::in_memory();
        let server =
            RateLimitServer::new(client, config, options.settings).map_err(|e| e.to_string())?;
        print!("{}", server.dump());
        return Ok(());
    }
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    let mut builder = Client::builder();
    if let Some(prefix) = &options.prefix {
        builder = builder.prefix(prefix.clone());
    }
    let client = match &options.store {
        Store::Memory => builder.try_in_memory().map_err(|e| e.to_string())?,
        Store::Redis(url) => builder
            .connect(url)
            .await
            .map_err(|e| format!("cannot connect to Redis: {e}"))?,
        Store::Cluster(urls) => builder
            .connect_cluster(urls.iter().map(String::as_str))
            .await
            .map_err(|e| format!("cannot connect to the Redis Cluster: {e}"))?,
    };
    let server = RateLimitServer::new(client.clone(), config, options.settings)
        .map_err(|e| e.to_string())?;
    let reloading = watch(server.clone(), dir.clone(), options.reload);
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer<RateLimitServer>>()
        .await;

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let grpc = tokio::net::TcpListener::bind(options.grpc)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", options.grpc))?;
    tracing::info!(
        grpc = %grpc.local_addr().map_err(|e| e.to_string())?,
        domains = ?server.domains(),
        config = %dir.display(),
        "distlock-rls serving"
    );
    {
        let server = server.clone();
        let mut stopped = stopped.clone();
        tasks.spawn(async move {
            tonic::transport::Server::builder()
                .add_service(health)
                .add_service(server.into_service())
                .serve_with_incoming_shutdown(tokio_stream_from(grpc), async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await
                .map_err(|e| format!("gRPC server: {e}"))
        });
    }
    if let Some(http) = options.http {
        let listener = tokio::net::TcpListener::bind(http)
            .await
            .map_err(|e| format!("cannot listen on {http}: {e}"))?;
        let app = Router::new()
            .route(
                "/healthcheck",
                get({
                    let client = client.clone();
                    move || {
                        let client = client.clone();
                        async move {
                            if client.ping().await.ready {
                                (StatusCode::OK, "OK")
                            } else {
                                (StatusCode::SERVICE_UNAVAILABLE, "store unavailable")
                            }
                        }
                    }
                }),
            )
            .route(
                "/rlconfig",
                get({
                    let server = server.clone();
                    move || {
                        let server = server.clone();
                        async move { server.dump() }
                    }
                }),
            )
            .route(
                "/metrics",
                get(move || {
                    let metrics = metrics.clone();
                    async move { metrics.render() }
                }),
            );
        let mut stopped = stopped.clone();
        tasks.spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await
                .map_err(|e| format!("HTTP server: {e}"))
        });
    }
    let signalled = shutdown_signal();
    tokio::select! {
        () = signalled => tracing::info!("stopping: finishing the requests in flight"),
        Some(ended) = tasks.join_next() => {
            reloading.abort();
            return ended.map_err(|e| e.to_string()).and_then(|r| r);
        }
    }
    health_reporter
        .set_not_serving::<envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer<RateLimitServer>>()
        .await;
    let _ = stop.send(true);
    reloading.abort();
    while let Some(ended) = tasks.join_next().await {
        ended.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// Accepted connections of `listener`, for tonic's server.
fn tokio_stream_from(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// `SIGTERM` or `Ctrl-C`.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
