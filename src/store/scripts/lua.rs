//! Script calls built straight into one `EVALSHA` command.
//!
//! `redis::ScriptInvocation` buffers every key and argument in a `Vec` of its own and copies
//! them all into the command when it is sent; on the hot path (one acquire, one release) that
//! is most of the client's work besides the round trip. Here the caller writes the keys and
//! arguments into the command directly, and a `NOSCRIPT` reply (the script cache was flushed,
//! or the server restarted) loads the script and sends the command once more, as redis-rs does.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind};

/// A connection scripts can be sent on: a single primary's `ConnectionManager`, or a cluster
/// connection (which routes an `EVALSHA` by its first key).
pub(crate) trait Conn: ConnectionLike + Clone + Send + Sync + 'static {}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Conn for C {}

pub(crate) struct Lua {
    script: Script,
}

impl Lua {
    pub(crate) fn new(code: &str) -> Self {
        Self {
            script: Script::new(code),
        }
    }

    /// `EVALSHA <sha> <keys>`, to which the caller appends `keys` keys, then the arguments.
    /// `args` and `bytes` size the command's buffers (estimates; it grows if they are short).
    pub(crate) fn call(&self, keys: usize, args: usize, bytes: usize) -> Cmd {
        let mut cmd = Cmd::with_capacity(3 + keys + args, 64 + bytes);
        cmd.arg("EVALSHA").arg(self.script.get_hash()).arg(keys);
        cmd
    }

    /// Sends `cmd` and, right behind it on the same connection, `WAIT count timeout`; answers
    /// the script's reply and how many replicas acknowledged. On `NOSCRIPT`, loads the script
    /// and sends both once more.
    pub(crate) async fn invoke_then_wait<T: FromRedisValue, C: Conn>(
        &self,
        cmd: &Cmd,
        replicas: super::Replicas,
        conn: &C,
    ) -> RedisResult<(T, u32)> {
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone());
        pipe.cmd("WAIT")
            .arg(replicas.count)
            .arg(super::millis(replicas.timeout));
        let mut conn = conn.clone();
        match pipe.query_async::<(T, u32)>(&mut conn).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(&mut conn).await?;
                pipe.query_async(&mut conn).await
            }
            reply => reply,
        }
    }

    /// Loads the script into the server behind `conn` (after a `NOSCRIPT` on a pipeline).
    pub(crate) async fn load<C: Conn>(&self, conn: &C) -> RedisResult<()> {
        let mut conn = conn.clone();
        self.script.load_async(&mut conn).await.map(drop)
    }

    /// Sends `cmd` (from [`call`](Self::call)); on `NOSCRIPT`, loads the script and sends it
    /// once more.
    pub(crate) async fn invoke<T: FromRedisValue, C: Conn>(
        &self,
        cmd: &Cmd,
        conn: &C,
    ) -> RedisResult<T> {
        let mut conn = conn.clone();
        match cmd.query_async(&mut conn).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(&mut conn).await?;
                cmd.query_async(&mut conn).await
            }
            reply => reply,
        }
    }
}
