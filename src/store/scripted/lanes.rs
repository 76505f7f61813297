//! Connections of their own for writes that wait for replicas.
//!
//! `WAIT n timeout` blocks the connection it runs on until `n` replicas acknowledged that
//! connection's last write, or the timeout passed: on the client's one multiplexed connection,
//! every command queued behind it (rate-limit checks, renewals, releases of other leases)
//! would wait too, up to the timeout when a replica is frozen. And `WAIT` counts the offset
//! of the *connection's own* last write, so a script and its `WAIT` must go on one connection,
//! with nothing of anyone else's in between.
//!
//! So such writes go on lanes: a few spare connections to the same primary (connected when
//! first used), each taken by one script-and-`WAIT` pipeline at a time. A write that waits for
//! replicas then stalls only the writes that wait with it (on a busy lane), never the others.

use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisFuture, Value};
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::store::connect::{PrimaryConn, req_packed_commands};

/// How many lanes a primary gets: replica-acknowledged writes in flight at once (each lane
/// carries batches of many).
pub(crate) const LANES: usize = 4;

/// The lanes of one primary, used as one connection: every command (a pipeline of a script
/// and its `WAIT`) takes a lane to itself while it is on the wire.
#[derive(Clone)]
pub(crate) struct Lanes {
    inner: Arc<LaneSet>,
}

struct LaneSet {
    has_lanes: bool,
    idle: Mutex<Vec<PrimaryConn>>,
    /// One permit per idle lane.
    free: Semaphore,
    /// Where commands go when there are no lanes (a client made on an application's own
    /// connection manager, which carries no address to open another connection to).
    shared: PrimaryConn,
}

impl Lanes {
    /// Lanes over `lanes`; with none, every command goes on `shared` (and waits there behind
    /// whatever else is on it).
    pub(crate) fn new(lanes: Vec<PrimaryConn>, shared: PrimaryConn) -> Self {
        Self {
            inner: Arc::new(LaneSet {
                has_lanes: !lanes.is_empty(),
                free: Semaphore::new(lanes.len()),
                idle: Mutex::new(lanes),
                shared,
            }),
        }
    }

    /// A lane to use alone, waiting for one to be free; the shared connection if there are
    /// no lanes.
    async fn take(&self) -> Lane<'_> {
        let set = &*self.inner;
        if !set.has_lanes {
            return Lane {
                set,
                conn: set.shared.clone(),
                idle: false,
                _permit: None,
            };
        }
        // The semaphore is never closed; a permit means an idle lane is in the list.
        let permit = set.free.acquire().await.ok();
        let idle = set
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(conn) => Lane {
                set,
                conn,
                idle: true,
                _permit: permit,
            },
            None => Lane {
                set,
                conn: set.shared.clone(),
                idle: false,
                _permit: permit,
            },
        }
    }
}

/// A lane in use; given back when dropped, even if its command was cancelled.
struct Lane<'a> {
    set: &'a LaneSet,
    conn: PrimaryConn,
    /// Whether `conn` came from the idle list (and goes back there).
    idle: bool,
    _permit: Option<SemaphorePermit<'a>>,
}

impl Drop for Lane<'_> {
    /// The lane goes back to the idle list before its permit is released (the fields drop
    /// after this), so a permit always finds a lane.
    fn drop(&mut self) {
        if self.idle {
            self.set
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(self.conn.clone());
        }
    }
}

impl ConnectionLike for Lanes {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut lane = self.take().await;
            lane.conn.req_packed_command(cmd).await
        })
    }

    req_packed_commands!(self, pipeline, offset, count => {
        Box::pin(async move {
            let mut lane = self.take().await;
            lane.conn.req_packed_commands(pipeline, offset, count).await
        })
    });

    fn get_db(&self) -> i64 {
        self.inner.shared.get_db()
    }
}
