//! Script calls built straight into one `EVALSHA` command.
//!
//! `redis::ScriptInvocation` buffers every key and argument in a `Vec` of its own and copies
//! them all into the command when it is sent; on the hot path (one acquire, one release) that
//! is most of the client's work besides the round trip. Here the caller writes the keys and
//! arguments into the command directly, and a `NOSCRIPT` reply (the script cache was flushed,
//! or the server restarted) loads the script and sends the command once more, as redis-rs does.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, Value};

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

/// Commands to send in one pipelined write, each a plain command or a script call (from
/// [`Lua::call`]) that the caller loads and sends again when the server answers `NOSCRIPT`.
/// Each command is answered on its own: a server error is that command's answer.
#[derive(Default)]
pub(crate) struct Pipe {
    pipe: redis::Pipeline,
    scripts: Vec<Option<&'static Lua>>,
}

impl Pipe {
    pub(crate) fn with_capacity(commands: usize) -> Self {
        Self {
            pipe: redis::Pipeline::with_capacity(commands),
            scripts: Vec::with_capacity(commands),
        }
    }

    /// Appends a plain command.
    pub(crate) fn plain(&mut self, cmd: Cmd) {
        self.pipe.add_command(cmd);
        self.scripts.push(None);
    }

    /// Appends a script call.
    pub(crate) fn script(&mut self, script: &'static Lua, cmd: Cmd) {
        self.pipe.add_command(cmd);
        self.scripts.push(Some(script));
    }

    pub(crate) fn len(&self) -> usize {
        self.scripts.len()
    }

    /// The script of command `i`, if it is a script call.
    pub(crate) fn script_of(&self, i: usize) -> Option<&'static Lua> {
        self.scripts.get(i).copied().flatten()
    }

    /// The commands, in order.
    pub(crate) fn commands(&self) -> impl Iterator<Item = &Cmd> {
        self.pipe.cmd_iter()
    }

    /// Sends every command in one write on `conn`: one answer per command, in order. Fails as
    /// a whole only if the write or its reading failed.
    pub(crate) async fn send<C: Conn>(&self, conn: &C) -> RedisResult<Vec<Value>> {
        // One command (an uncontended acquire, the common case): sent as itself, without
        // packing a pipeline around it. A server error is its answer here too.
        if let (1, Some(cmd)) = (self.len(), self.pipe.cmd_iter().next()) {
            return Ok(vec![conn.clone().req_packed_command(cmd).await?]);
        }
        let count = self.len();
        let values = conn
            .clone()
            .req_packed_commands(&self.pipe, 0, count)
            .await?;
        if values.len() != count {
            return Err(redis::RedisError::from((
                ErrorKind::Client,
                "a pipeline got another number of replies than it sent commands",
            )));
        }
        Ok(values)
    }

    /// Whether `value`, the answer to command `i`, says its script was not in the server's
    /// cache (nothing of it ran).
    pub(crate) fn no_script(&self, i: usize, value: &Value) -> bool {
        self.script_of(i).is_some()
            && matches!(value, Value::ServerError(err) if err.kind() == Some(ServerErrorKind::NoScript))
    }

    /// Sends every command in one write on `conn`, and the script calls the server answered
    /// `NOSCRIPT` (nothing of them ran) once more, after loading their scripts: one answer per
    /// command, in order. For a connection that needs nothing sent with a retry (a primary).
    pub(crate) async fn send_loading<C: Conn>(&self, conn: &C) -> RedisResult<Vec<Value>> {
        let mut values = self.send(conn).await?;
        let missing: Vec<usize> = (0..self.len())
            .filter(|&i| self.no_script(i, &values[i]))
            .collect();
        if missing.is_empty() {
            return Ok(values);
        }
        self.load(conn, &missing).await?;
        for (&i, value) in missing.iter().zip(self.only(&missing).send(conn).await?) {
            values[i] = value;
        }
        Ok(values)
    }

    /// A pipe of the commands `indices` only, in that order.
    pub(crate) fn only(&self, indices: &[usize]) -> Self {
        let cmds: Vec<&Cmd> = self.commands().collect();
        let mut pipe = Self::with_capacity(indices.len());
        for &i in indices {
            if let Some(cmd) = cmds.get(i) {
                match self.script_of(i) {
                    Some(script) => pipe.script(script, (*cmd).clone()),
                    None => pipe.plain((*cmd).clone()),
                }
            }
        }
        pipe
    }

    /// Loads the scripts of the commands `indices` (each script once) into the server behind
    /// `conn`.
    pub(crate) async fn load<C: Conn>(&self, conn: &C, indices: &[usize]) -> RedisResult<()> {
        let mut loaded: Vec<&'static Lua> = Vec::new();
        for &i in indices {
            if let Some(script) = self.script_of(i)
                && !loaded.iter().any(|l| std::ptr::eq(*l, script))
            {
                script.load(conn).await?;
                loaded.push(script);
            }
        }
        Ok(())
    }
}
