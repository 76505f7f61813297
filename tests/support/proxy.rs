//! An in-test TCP proxy for injecting connection faults between a client and a
//! [`RedisServer`](super::server::RedisServer).
//!
//! Put it between the code under test and the server (`Proxy::start(server.addr())`,
//! then connect to [`Proxy::url`]) and switch its [`ProxyMode`] at runtime.
//! Mode changes take effect on existing connections (for the next chunk read)
//! as well as new ones.
//!
//! Resource use is bounded: one fixed 16 KiB buffer per direction per
//! connection, and a connection never reads more until the previous chunk has
//! been written (or discarded), so back-pressure is left to the kernel.
//!
//! The proxy's tasks live on the tokio runtime that called [`Proxy::start`];
//! use it from that runtime only. `Delay` uses `tokio::time`, so it is subject
//! to a paused test clock.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// Size of the forwarding buffer of each direction of each connection.
const BUF_SIZE: usize = 16 * 1024;

/// Upper bound on connecting to the target.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What the proxy does with traffic; see [`Proxy::set_mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward everything unchanged, both directions.
    Pass,
    /// Hold each chunk read (either direction) for the given duration before
    /// writing it. A round trip is therefore delayed about twice.
    Delay(Duration),
    /// Accept and keep connections open, read and discard everything in both
    /// directions: the client sees a silent, half-open peer. A close by the
    /// target is not passed on while blackholed.
    Blackhole,
    /// Close each NEW connection immediately with an RST (after the kernel
    /// accepted it, so clients fail on first I/O or at the handshake).
    /// Existing connections keep forwarding as in `Pass`.
    Refuse,
}

/// State shared by the [`Proxy`] handle and its accept task.
struct Shared {
    target: SocketAddr,
    mode: watch::Sender<ProxyMode>,
    /// Bumped by [`Proxy::reset_all`]; each connection resets on change.
    reset: watch::Sender<u64>,
    /// Connections accepted and forwarded (not counting refused ones).
    accepted: AtomicUsize,
    /// Connections closed at once because the mode was `Refuse`.
    refused: AtomicUsize,
    /// Connections currently open.
    active: Arc<AtomicUsize>,
    /// One task per connection; aborted on drop.
    conns: Mutex<JoinSet<()>>,
}

impl Shared {
    fn conns(&self) -> MutexGuard<'_, JoinSet<()>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A TCP proxy on a free 127.0.0.1 port forwarding to a target address.
///
/// Dropping it aborts the accept loop and every connection task (their
/// sockets are closed).
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept_task: JoinHandle<()>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("target", &self.shared.target)
            .field("mode", &self.mode())
            .field("connections", &self.connections())
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Binds a free port on 127.0.0.1 and starts forwarding to `target` in
    /// [`ProxyMode::Pass`]. The listener is ready when this returns. The
    /// target does not need to be up: a connection whose target cannot be
    /// reached is reset.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound, or outside a tokio runtime.
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind proxy listener on 127.0.0.1");
        let addr = listener.local_addr().expect("proxy listener address");
        let shared = Arc::new(Shared {
            target,
            mode: watch::channel(ProxyMode::Pass).0,
            reset: watch::channel(0).0,
            accepted: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            active: Arc::new(AtomicUsize::new(0)),
            conns: Mutex::new(JoinSet::new()),
        });
        let accept_task = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        Proxy {
            addr,
            shared,
            accept_task,
        }
    }

    /// The proxy's listening address (127.0.0.1, fixed for its lifetime).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:PORT/` for the proxy (no credentials; for a
    /// password-protected server use `server.url_via(proxy.addr())`).
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// The address traffic is forwarded to.
    pub fn target(&self) -> SocketAddr {
        self.shared.target
    }

    /// The current mode.
    pub fn mode(&self) -> ProxyMode {
        *self.shared.mode.borrow()
    }

    /// Switches the mode. Takes effect for every chunk read from now on, on
    /// existing and new connections, and for every connection accepted from
    /// now on.
    pub fn set_mode(&self, mode: ProxyMode) {
        self.shared.mode.send_replace(mode);
    }

    /// [`ProxyMode::Pass`]: forward normally.
    pub fn pass(&self) {
        self.set_mode(ProxyMode::Pass);
    }

    /// [`ProxyMode::Delay`]: hold every chunk for `delay` before writing it.
    pub fn delay(&self, delay: Duration) {
        self.set_mode(ProxyMode::Delay(delay));
    }

    /// [`ProxyMode::Blackhole`]: keep connections open but forward nothing.
    /// Bytes discarded meanwhile are lost for good (a later `pass()` does not
    /// replay them), so an existing connection's protocol stream may be out of
    /// sync afterwards; new connections work normally after `pass()`.
    pub fn blackhole(&self) {
        self.set_mode(ProxyMode::Blackhole);
    }

    /// [`ProxyMode::Refuse`]: close new connections immediately (RST).
    pub fn refuse(&self) {
        self.set_mode(ProxyMode::Refuse);
    }

    /// Closes every currently open connection with an RST on both sides
    /// (`SO_LINGER` 0, then close), and returns once they are all closed.
    /// The mode is unchanged: the proxy keeps accepting new connections as
    /// before (so in `Pass`, a reconnect works at once). A connection being
    /// accepted concurrently with this call may or may not be reset.
    pub async fn reset_all(&self) {
        // Take the set first, then signal: every connection in `old`
        // subscribed to `reset` before this bump, so each one sees it.
        let mut old = std::mem::take(&mut *self.shared.conns());
        self.shared.reset.send_modify(|generation| *generation += 1);
        while old.join_next().await.is_some() {}
    }

    /// Number of connections accepted and forwarded since start (refused
    /// ones excluded). Grows by one per client (re)connect.
    pub fn connections(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Number of connections closed at once because of [`ProxyMode::Refuse`].
    pub fn refused(&self) -> usize {
        self.shared.refused.load(Ordering::SeqCst)
    }

    /// Number of proxied connections currently open.
    pub fn active(&self) -> usize {
        self.shared.active.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    /// Stops accepting and aborts every connection task.
    fn drop(&mut self) {
        self.accept_task.abort();
        self.shared.conns().abort_all();
    }
}

/// Accepts connections forever, refusing or spawning a forwarder for each.
async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _peer)) = listener.accept().await else {
            // E.g. EMFILE: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if *shared.mode.borrow() == ProxyMode::Refuse {
            shared.refused.fetch_add(1, Ordering::SeqCst);
            close_with_rst(&client);
            drop(client);
            continue;
        }
        let _ = client.set_nodelay(true);
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        shared.active.fetch_add(1, Ordering::SeqCst);
        let active = ActiveGuard(Arc::clone(&shared.active));
        let conn = serve(
            client,
            shared.target,
            shared.mode.subscribe(),
            shared.reset.subscribe(),
            active,
        );
        let mut conns = shared.conns();
        while conns.try_join_next().is_some() {}
        conns.spawn(conn);
    }
}

/// Decrements the active-connection count when a connection task ends.
struct ActiveGuard(Arc<AtomicUsize>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How a connection ended.
enum Outcome {
    /// Both directions reached EOF: close normally.
    Closed,
    /// An I/O error, unreachable target, or reset requested: close with RST.
    Reset,
}

/// Runs one proxied connection until it ends or a reset is requested.
async fn serve(
    mut client: TcpStream,
    target: SocketAddr,
    mode: watch::Receiver<ProxyMode>,
    mut reset: watch::Receiver<u64>,
    _active: ActiveGuard,
) {
    let mut upstream = None;
    let outcome = tokio::select! {
        biased;
        // An error means the proxy is gone: close too.
        _ = reset.changed() => Outcome::Reset,
        outcome = forward(&mut client, &mut upstream, target, mode) => outcome,
    };
    if let Outcome::Reset = outcome {
        close_with_rst(&client);
        if let Some(upstream) = &upstream {
            close_with_rst(upstream);
        }
    }
}

/// Connects to `target` (storing the stream in `upstream` so the caller can
/// reset it) and pumps both directions until both reach EOF or one fails.
async fn forward(
    client: &mut TcpStream,
    upstream: &mut Option<TcpStream>,
    target: SocketAddr,
    mut mode: watch::Receiver<ProxyMode>,
) -> Outcome {
    let connected =
        tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(target)).await;
    let Ok(Ok(stream)) = connected else {
        // A half-open peer does not reveal that the target is down.
        let (mut reader, _writer) = client.split();
        drain_while_blackholed(&mut reader, &mut mode).await;
        return Outcome::Reset;
    };
    let _ = stream.set_nodelay(true);
    let stream = upstream.insert(stream);
    let (mut client_read, mut client_write) = client.split();
    let (mut upstream_read, mut upstream_write) = stream.split();
    let to_server = pump(
        &mut client_read,
        &mut upstream_write,
        mode.clone(),
        Direction::ToServer,
    );
    let to_client = pump(
        &mut upstream_read,
        &mut client_write,
        mode,
        Direction::ToClient,
    );
    match tokio::try_join!(to_server, to_client) {
        Ok(_) => Outcome::Closed,
        Err(_) => Outcome::Reset,
    }
}

/// Which way a [`pump`] forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToClient,
}

/// Copies `reader` to `writer` one chunk at a time, applying the mode current
/// when each chunk was read. On EOF, half-closes `writer` (except that a
/// server-side close is held back while blackholed).
async fn pump<R, W>(
    reader: &mut R,
    writer: &mut W,
    mut mode: watch::Receiver<ProxyMode>,
    direction: Direction,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0_u8; BUF_SIZE];
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            if direction == Direction::ToClient {
                wait_while_blackholed(&mut mode).await;
            }
            writer.shutdown().await?;
            return Ok(());
        }
        let current = *mode.borrow_and_update();
        let forward = match current {
            ProxyMode::Pass | ProxyMode::Refuse => true,
            ProxyMode::Blackhole => false,
            ProxyMode::Delay(delay) => {
                tokio::time::sleep(delay).await;
                *mode.borrow_and_update() != ProxyMode::Blackhole
            }
        };
        if forward {
            writer.write_all(&buf[..n]).await?;
        }
    }
}

/// Returns once the mode is not `Blackhole` (or the proxy is gone).
async fn wait_while_blackholed(mode: &mut watch::Receiver<ProxyMode>) {
    while *mode.borrow_and_update() == ProxyMode::Blackhole {
        if mode.changed().await.is_err() {
            return;
        }
    }
}

/// While blackholed, reads and discards from `reader`; returns once the mode
/// changes, or the reader hits EOF/error.
async fn drain_while_blackholed<R>(reader: &mut R, mode: &mut watch::Receiver<ProxyMode>)
where
    R: AsyncRead + Unpin,
{
    let mut buf = vec![0_u8; BUF_SIZE];
    while *mode.borrow_and_update() == ProxyMode::Blackhole {
        tokio::select! {
            changed = mode.changed() => if changed.is_err() { return },
            read = reader.read(&mut buf) => if !matches!(read, Ok(n) if n > 0) { return },
        }
    }
}

/// Makes the next close of `stream` send an RST instead of a FIN.
fn close_with_rst(stream: &TcpStream) {
    // `set_linger` is deprecated in newer tokio (in favour of
    // `set_zero_linger`, absent from older ones); with a zero timeout it
    // never blocks on close, which is what the deprecation is about.
    #[allow(deprecated)]
    let _ = stream.set_linger(Some(Duration::ZERO));
}
