//! A lazy start ([`ClientBuilder::lazy`](crate::ClientBuilder::lazy)): the client is made
//! without the server, and a task checks the server once it answers.
//!
//! An eager `connect` contacts the server first ([`probe`]) so that a wrong URL, password or
//! server fails there, once. A lazy one cannot, so the same checks run in the background:
//! the task retries the probe (backing off up to [`RETRY_MOST`]) until the server answers,
//! then checks it as `connect` would and ends. Until then commands go to the connection
//! manager, which connects on first use and fails them while the server is down (so a rate
//! limiter's outage policy applies, and the readiness probe says the store is unreachable).
//! A server the checks refuse (credentials, cluster mode, a sentinel's address, an old
//! version) is refused for good: every later command, and the readiness probe, fails with
//! that error, which is also logged once at ERROR.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, ErrorKind, RedisError, RedisFuture, Value};

use super::{RedisSettings, check_cluster_mode, probe};
use crate::error::StoreError;

/// The first wait between two probes of a server that does not answer.
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two probes.
const RETRY_MOST: Duration = Duration::from_secs(2);

/// The connection of a lazily started single primary: a connection manager that connects on
/// first use, and what the background check found.
#[derive(Clone)]
pub(crate) struct LazyConn {
    manager: ConnectionManager,
    /// Set, once, when the checks refuse the server.
    refusal: Arc<OnceLock<StoreError>>,
}

impl LazyConn {
    /// Makes the connection without contacting the server, and starts the background check
    /// (which ends once the server has answered, or once the connection is dropped).
    pub(crate) fn start(
        client: redis::Client,
        settings: &RedisSettings,
    ) -> Result<Self, StoreError> {
        let manager =
            ConnectionManager::new_lazy_with_config(client.clone(), settings.manager_config())?;
        let refusal = Arc::new(OnceLock::new());
        tokio::spawn(check_when_reachable(
            client,
            settings.clone(),
            Arc::downgrade(&refusal),
        ));
        Ok(Self { manager, refusal })
    }

    /// The checks' refusal, as the error a command fails with (it converts back to the same
    /// kind of [`StoreError`]: `Auth` or `Config`).
    fn refused(&self) -> Option<RedisError> {
        self.refusal.get().map(|refusal| {
            let kind = match refusal {
                StoreError::Auth { .. } => ErrorKind::AuthenticationFailed,
                _ => ErrorKind::InvalidClientConfig,
            };
            RedisError::from((kind, "server refused at lazy start", refusal.to_string()))
        })
    }
}

impl ConnectionLike for LazyConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self.refused() {
            Some(err) => Box::pin(async move { Err(err) }),
            None => self.manager.req_packed_command(cmd),
        }
    }

    req_packed_commands!(self, pipeline, offset, count => {
        match self.refused() {
            Some(err) => Box::pin(async move { Err(err) }),
            None => self.manager.req_packed_commands(pipeline, offset, count),
        }
    });

    fn get_db(&self) -> i64 {
        self.manager.get_db()
    }
}

/// Whether a probe's error is the server's or the configuration's answer (retrying cannot
/// change it), not a server that is down or slow.
fn is_final(err: &StoreError) -> bool {
    matches!(
        err,
        StoreError::Auth { .. }
            | StoreError::Config { .. }
            | StoreError::Evicting { .. }
            | StoreError::Unsupported { .. }
    )
}

/// Probes the server until it answers, then checks it as an eager `connect` would; records a
/// refusal. Says once at WARN that the server is not reachable yet, and at INFO when it is.
async fn check_when_reachable(
    client: redis::Client,
    settings: RedisSettings,
    refusal: Weak<OnceLock<StoreError>>,
) {
    let mut wait = RETRY_FIRST;
    let mut said = false;
    loop {
        if refusal.strong_count() == 0 {
            return; // The client is gone.
        }
        let checked = match probe(client.clone(), &settings).await {
            Ok(mut conn) => check_cluster_mode(&mut conn, false).await,
            Err(err) => Err(err),
        };
        match checked {
            Ok(()) => {
                tracing::info!("lazy start: the store answers and is checked");
                return;
            }
            Err(err) if is_final(&err) => {
                tracing::error!(
                    error = %err,
                    "lazy start: the store answered and was refused; every operation fails \
                     with this error until the client is made again"
                );
                if let Some(refusal) = refusal.upgrade() {
                    let _ = refusal.set(err);
                }
                return;
            }
            Err(err) => {
                if said {
                    tracing::debug!(error = %err, "lazy start: the store does not answer yet");
                } else {
                    said = true;
                    tracing::warn!(
                        error = %err,
                        "lazy start: the store does not answer yet; retrying in the background"
                    );
                }
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RETRY_MOST);
    }
}
