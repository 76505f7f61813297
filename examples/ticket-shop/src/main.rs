//! `ticket-shop`: serves [`app`] on `PORT` (default 3000), with the periodic job beside it.
//!
//! ```text
//! cargo run -p distlock-example-ticket-shop                       # in memory
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run -p distlock-example-ticket-shop
//! REDIS_CLUSTER_URLS=redis://127.0.0.1:7001/,redis://127.0.0.1:7002/ \
//!     cargo run -p distlock-example-ticket-shop                   # on a Redis Cluster
//! ```

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;

use distlock_example_ticket_shop::config::{Backend, Config, USAGE};
use distlock_example_ticket_shop::job::{self, Schedule};
use distlock_example_ticket_shop::store::Store;
use distlock_example_ticket_shop::{AppState, Settings, app};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    if std::env::args().skip(1).any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(err) => {
            eprintln!("ticket-shop: {err}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    match serve(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    // One Redis (or one cluster) for both: the lock client keeps its own connections, the
    // shop's records (fenced resources under their own prefix) get theirs.
    let (locks, store) = match &config.backend {
        Backend::Redis(url) => (
            // Lock holders are named by this replica's name (the console shows it).
            distlock::Client::builder()
                .identity(config.replica.clone())
                .lazy(config.lazy_start)
                .connect(url)
                .await?,
            if config.lazy_start {
                Store::connect_lazy(url).await?
            } else {
                Store::connect(url).await?
            },
        ),
        Backend::Cluster(urls) => (
            distlock::Client::builder()
                .identity(config.replica.clone())
                .connect_cluster(urls)
                .await?,
            Store::connect_cluster(urls).await?,
        ),
        Backend::Memory => (
            distlock::Client::builder()
                .identity(config.replica.clone())
                .in_memory(),
            Store::in_memory(),
        ),
    };

    // Kept for the drain at the end: the app's state owns the other handle.
    let client = locks.clone();
    let mut settings = Settings::new(config.seats, config.replica.clone());
    settings.trusted_proxies = config.trusted_proxies.clone();
    settings.console_token = config.console_token.clone();
    let state = AppState::new(locks, store, settings)?;

    let job = tokio::spawn(job::run_forever(
        state.clone(),
        Schedule::every(config.job_period),
    ));

    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    tracing::info!(
        store = state.store.kind(),
        replica = %config.replica,
        seats = config.seats,
        trusted_proxies = ?config.trusted_proxies,
        "listening on http://{addr}"
    );
    if config.backend == Backend::Memory {
        tracing::info!(
            "in-memory store: set REDIS_URL (or REDIS_CLUSTER_URLS) to share seats, locks and \
             limits between replicas"
        );
    }
    let served = axum::serve(
        listener,
        app(state).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown({
        let client = client.clone();
        async move {
            shutdown_signal().await;
            tracing::info!("shutting down: finishing the requests in flight");
            // From here no new lease: a request that still comes in on an open connection
            // is answered 503 with Retry-After by the layers, for another replica to take;
            // those in flight finish under the leases they hold.
            client.close();
        }
    })
    .await;
    drain(&client).await;
    job.abort();
    served?;
    tracing::info!("stopped");
    Ok(())
}

/// How long the drain may take to give the replica's leases back; what it could not give
/// back by then expires with its ttl. Well inside the 30 s a container gets between SIGTERM
/// and SIGKILL by default (Docker, Kubernetes).
const DRAIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Gives back every lease the replica still holds (the job's leadership, a run of the job),
/// so that another replica takes over at once instead of after their ttl; logs what it did.
async fn drain(client: &distlock::Client) {
    let report = client.shutdown(DRAIN_DEADLINE).await;
    for lease in &report.released {
        tracing::info!(name = %lease.name, kind = %lease.kind, fence = lease.fence, "released on shutdown");
    }
    for failed in &report.not_released {
        tracing::warn!(name = %failed.lease.name, kind = %failed.lease.kind, error = %failed.error, "not released on shutdown; it expires with its ttl");
    }
    tracing::info!(
        released = report.released.len(),
        not_released = report.not_released.len(),
        took_ms = report.took.as_millis(),
        "drained"
    );
}

/// Ctrl-C, or SIGTERM (what `docker stop` and Kubernetes send).
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
