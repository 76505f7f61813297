//! Procedural macros for `distlock`. Use them through `distlock::distributed_lock` and
//! `distlock::rate_limit`.
//!
//! The crate is split the way the macros work: `args` parses the attributes' arguments,
//! `template` the `key` template, `policy` the rate-limit policies' text, `item` the annotated
//! function, and `expand` writes the new body; `errors` collects what they find wrong. This
//! file only hands the tokens over.

mod args;
mod errors;
mod expand;
mod item;
mod policy;
mod template;

use proc_macro::TokenStream;

/// Runs an `async fn` under a distributed lock: the body runs only while this process holds a
/// lease on the lock named by `key`, and is dropped if the lease is lost.
///
/// ```
/// use distlock::{LockError, distributed_lock};
///
/// #[derive(Debug)]
/// enum AppError {
///     Lock(LockError),
///     OutOfStock,
/// }
///
/// impl From<LockError> for AppError {
///     fn from(err: LockError) -> Self {
///         AppError::Lock(err)
///     }
/// }
///
/// /// Sells one seat of `show`; two replicas never sell the same seat.
/// #[distributed_lock(key = "seat:{show}:{seat}", ttl = "10s", wait = "2s")]
/// async fn sell(show: &str, seat: u32) -> Result<u64, AppError> {
///     // The lease's fencing token: strictly increasing per lock name. Pass it to the
///     // store you write to so that it can refuse a holder that was paused past its ttl.
///     // Minted here, on first use, while the lock is held (`fenced = true` mints it with
///     // the grant).
///     let fence = distlock::current_lease()
///         .expect("the body runs under the lease")
///         .fence()
///         .await?;
///     if seat > 100 {
///         return Err(AppError::OutOfStock);
///     }
///     Ok(fence)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// distlock::set_default_client(distlock::Client::in_memory());
/// let first = sell("hamlet", 7).await.unwrap();
/// let second = sell("hamlet", 7).await.unwrap();
/// assert!(second > first);
/// assert!(matches!(sell("hamlet", 101).await, Err(AppError::OutOfStock)));
/// # }
/// ```
///
/// # What the function must look like
///
/// * It is an `async fn` with a body: a free function, a method taking `self`, `&self` or
///   `&mut self`, a generic function, or an axum-style handler whose parameters are patterns
///   (`Path(id): Path<u64>`, `State(app): State<App>`). Its signature, attributes,
///   visibility, docs and generics are kept as written.
/// * It returns a `Result`: the return type is written as a path whose last segment is
///   `Result` or ends in `Result` — `Result<T, E>`, `std::result::Result<T, E>`, or an alias
///   such as `io::Result<T>`, `anyhow::Result<T>` or `AppResult<T>`. Its error type must
///   implement `From<distlock::LockError>`, because taking the lock can fail (`LockError`
///   itself, `anyhow::Error` and `Box<dyn Error + Send + Sync>` do); the type checker says so
///   at the return type if it does not.
/// * `return` and `?` in the body work as before: the body becomes an `async move` block with
///   the function's return type.
/// * The returned future is `Send` whenever the original function's would be (handlers for
///   axum and futures passed to `tokio::spawn` need that).
///
/// # Arguments
///
/// | argument | default | meaning |
/// |---|---|---|
/// | `key = "..."` | required | the lock's name, a template (below) |
/// | `ttl = "30s"` | `"30s"` | the lease's time to live, a duration (`"500ms"`, `"1m 30s"`), 10ms to 7 days |
/// | `wait = "5s"` | `"0s"` | how long to wait for a held lock; `"0s"` tries once, `"forever"` waits as long as it takes |
/// | `store_patience = "10s"` | `"30s"` | how long a waiting call retries transient store errors (a failover) within its wait |
/// | `client = <expr>` | the default client | an expression of type `&distlock::Client` |
/// | `watchdog = bool` | `true` | renew the lease every ttl/3 while the body runs |
/// | `on_busy = wait \| error \| skip` | `wait` | `error`: fail at once with `LockError::Busy`; `skip`: return at once without running (below) |
/// | `reentrant = bool` | `true` | a nested locked call on the same key in the same task joins the held lease |
/// | `min_hold = "800ms"` | none | keep the lock at least this long after it was granted, even once the function returned (its key's expiry is set to what remains), like ShedLock's `lockAtLeastFor`; up to 7 days, not above `max_hold` |
/// | `max_hold = "10m"` | none | stop renewing after this long: a function still running then loses the lock and is dropped; above zero |
/// | `max_attempts = 3` | unbounded | at most this many tries within the wait; at least 1 (checked when the lock is taken) |
/// | `fenced = bool` | `false` | mint the lease's fence with the grant (an eager lease), for a body that always writes under it; otherwise `fence()` mints it on first use (below) |
/// | `fair = bool` | `false` | grant the lock in its waiters' order of arrival, across processes (a fair lock); every acquirer of the key must ask for it |
/// | `crate = "path"` | `"::distlock"` | the path of the `distlock` crate, if it is renamed |
///
/// Every argument but `key`, `client`, `on_busy` and `crate` is a lock option read from the
/// table the configuration file also reads (`distlock_grammar::LOCK_OPTIONS`) and set through
/// `LockOptions`' setter of the same name, so a lock option added to the runtime is an
/// argument here without code of its own. Durations are checked when the function is compiled: `ttl = "30x"` or `ttl = "1ms"` is a
/// compile error, as are unknown and repeated arguments, and `wait` together with
/// `on_busy = error` or `on_busy = skip`. `on_busy` also takes its value as a string
/// (`on_busy = "skip"`).
///
/// ## The key
///
/// Each `{name}` in `key` is replaced by the value of the parameter binding `name`, and
/// `{name.field}` (fields may nest, tuple indices such as `{pair.0}` work) by one of its
/// fields; `{self.id}` reads a field of the receiver. Every placeholder must name a parameter,
/// which is checked at compile time. Values are rendered with `Display`, and `:` and `%` in them
/// are escaped, so `key = "{a}:{b}"` gives different keys for `("x:y", "z")` and
/// `("x", "y:z")`. Write `{{` and `}}` for literal braces. The rendered key is the lock's name
/// (any UTF-8 text up to `distlock::MAX_NAME_LEN` bytes); the client adds its prefix.
///
/// ## The client
///
/// Without `client = ...`, the process-wide client installed at start-up with
/// `distlock::set_default_client` is used; if none is installed, the call fails with
/// `LockError::NoDefaultClient`. With `client = <expr>`, the expression is evaluated when the
/// function is called, before the body runs, and must have type `&distlock::Client` (or one
/// that derefs to it, such as `&Arc<Client>`; pass `&client`, not `client`). It may
/// use the parameters, and is cloned at once (a client is a cheap handle), so it can borrow
/// from `&mut self` or from an extractor that the body then uses:
///
/// ```
/// use distlock::{Client, LockError, distributed_lock};
///
/// struct Inventory {
///     locks: Client,
///     stock: u32,
/// }
///
/// impl Inventory {
///     #[distributed_lock(key = "stock:{sku}", client = &self.locks)]
///     async fn take(&mut self, sku: &str) -> Result<u32, LockError> {
///         self.stock -= 1;
///         Ok(self.stock)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let mut inventory = Inventory { locks: Client::in_memory(), stock: 3 };
/// assert_eq!(inventory.take("apple").await?, 2);
/// # Ok(())
/// # }
/// ```
///
/// # While the body runs
///
/// The lock is taken before the body starts (waiting up to `wait`) and released after it
/// ends, also when it returns an error. The watchdog renews the lease in the background. If
/// the lease is lost — the key expired or was taken over, or Redis stayed unreachable until the
/// lease's safety deadline — the body is dropped at its next `.await` and the call returns
/// `Err(LockError::LeaseLost { .. }.into())`. Work the body did so far must then be treated as
/// unprotected; the fencing token is the way to make a store reject it.
///
/// Inside the body, `distlock::current_lease()` returns the held lease (a `LeaseHandle`):
/// its `fence()`, `is_lost()`, `ensure_held()` and `lost()` signal. `fence().await` mints the
/// fence the first time it is asked for (one round trip, only while the lock is held; the
/// uncontended acquire then costs the store what a raw `SET NX PX` does) and answers at once
/// after that; with `fenced = true` the grant mints it (a script on the server, about four
/// times the `SET`'s cost) and `fence()` never goes to the store.
///
/// Errors of the lock itself reach the caller converted into the function's error type:
/// `Busy` (held: at once when `wait` is zero or `on_busy = error`, or still held after
/// `wait`; either way with the holder's remaining ttl, so that with distlock's `axum` feature
/// the error answers `423` with `Retry-After`, as the lock layer does), `LeaseLost`, `Store`
/// (Redis failed), `InvalidName` (the rendered key is too long) and `NoDefaultClient`. After
/// the wait, one more try without waiting reads that ttl (and takes the lock if it has just
/// come free), as `LockLayer` does.
///
/// ## Skipping scheduled work
///
/// With `on_busy = skip`, a call that finds the lock held by another owner returns at once
/// without running the function, as ShedLock's `@SchedulerLock` does: every replica runs the
/// job on its own timer, one runs it, the others skip. A skipped call returns `Ok(())` when
/// the function returns `Result<(), E>`, and `Ok(None)` when it returns
/// `Result<Option<T>, E>` (so a caller that needs to can tell a skipped call from a run). Any
/// other `Ok` type is a compile error at the return type: a skipped call would have no value
/// of it to return (use `on_busy = error` to get `Err(LockError::Busy)` instead). Errors other
/// than a busy lock (the store failed, the lease was lost) are still errors. With `min_hold`
/// (ShedLock's `lockAtLeastFor`) a run that finishes early keeps the other replicas skipping
/// for the rest of the period, and `max_hold` (`lockAtMostFor`) bounds a stuck run.
/// `client.job(name)` is the same without the macro.
///
/// ```
/// use distlock::{LockError, distributed_lock};
///
/// /// Runs on one replica per minute, however many call it.
/// #[distributed_lock(key = "nightly-report", on_busy = skip, min_hold = "1m", max_hold = "10m")]
/// async fn nightly_report() -> Result<Option<usize>, LockError> {
///     let rows = 42; // build and send the report
///     Ok(Some(rows))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// distlock::set_default_client(distlock::Client::in_memory());
/// assert_eq!(nightly_report().await?, Some(42)); // ran here
/// assert_eq!(nightly_report().await?, None); // within the minute: skipped
/// # Ok(())
/// # }
/// ```
///
/// ## Reentrancy
///
/// With `reentrant = true` (the default), a locked function that calls another locked
/// function with the same key (on the same client) in the same tokio task joins the lease it
/// already holds instead of waiting for itself. The scope is the task, not the thread: a task
/// spawned from the body does not inherit the lease. With `reentrant = false` the nested call
/// waits like any other caller, which fails with `Busy`.
///
/// ```
/// use distlock::{LockError, distributed_lock};
///
/// #[distributed_lock(key = "account:{id}")]
/// async fn transfer(id: u64, amount: i64) -> Result<i64, LockError> {
///     // Same key, same task: joins the lease instead of deadlocking.
///     audit(id).await?;
///     Ok(amount)
/// }
///
/// #[distributed_lock(key = "account:{id}")]
/// async fn audit(id: u64) -> Result<(), LockError> {
///     Ok(())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// distlock::set_default_client(distlock::Client::in_memory());
/// assert_eq!(transfer(7, 100).await?, 100);
/// # Ok(())
/// # }
/// ```
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::lock::distributed_lock(args.into(), item.into()).into()
}

/// Rate-limits an `async fn` across every process that shares the store: a call runs only if
/// the policy lets it through, and otherwise fails at once (or waits for its turn) without
/// running the body.
///
/// ```
/// use std::time::Duration;
/// use distlock::{RateLimitError, rate_limit};
///
/// #[derive(Debug)]
/// enum AppError {
///     Limited(RateLimitError),
/// }
///
/// impl From<RateLimitError> for AppError {
///     fn from(err: RateLimitError) -> Self {
///         AppError::Limited(err)
///     }
/// }
///
/// /// At most 3 password resets per user per hour, across every replica.
/// #[rate_limit(policy = "password-reset: fixed-window 3/h", key = "user:{user_id}")]
/// async fn send_reset_email(user_id: u64) -> Result<(), AppError> {
///     Ok(()) // send the email
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// distlock::set_default_client(distlock::Client::in_memory());
/// for _ in 0..3 {
///     send_reset_email(7).await.unwrap();
/// }
/// match send_reset_email(7).await {
///     Err(AppError::Limited(RateLimitError::Limited { policy, retry_after })) => {
///         assert_eq!(policy, "password-reset");
///         assert!(retry_after <= Duration::from_secs(3600));
///     }
///     other => panic!("expected Limited, got {other:?}"),
/// }
/// send_reset_email(8).await.unwrap(); // another user, another budget
/// # }
/// ```
///
/// # What the function must look like
///
/// As for [`#[distributed_lock]`](macro@distributed_lock): an `async fn` with a body (free
/// function, method, generic function, axum-style handler) returning a `Result` whose error
/// type implements `From<distlock::RateLimitError>` (`RateLimitError` itself, `anyhow::Error`
/// and `Box<dyn Error + Send + Sync>` do). Its signature, attributes and docs are kept;
/// `return` and `?` in the body work as before, and the returned future is `Send` whenever
/// the original's would be.
///
/// # Arguments
///
/// | argument | default | meaning |
/// |---|---|---|
/// | `policy = "..."` | required | the limit, as one line of text (below), or `["...", "..."]` for several at once |
/// | `key = "..."` | the policy's name | the subject the budget is counted for, a template as `#[distributed_lock]`'s key |
/// | `cost = <expr>` | `1` | units a call consumes: a literal, or an expression of an unsigned integer type |
/// | `on_limit = error \| wait` | `error` | `error`: a limited call fails at once; `wait`: it waits for its turn |
/// | `max_wait = "5s"` | none | with `on_limit = wait` (and required by it): the longest a call waits, up to 366 days |
/// | `lockout = ["1min", "1h"]` | none | every policy blocks a key that breaches it for the first block, escalating through the next ones on repeated breaches (1 to 8, each longer; `distlock::ratelimit::Lockout`); a blocked call fails with `Limited`, `retry_after` the block's end |
/// | `lockout_memory = "24h"` | a day | with `lockout`: how long breaches are remembered for the escalation |
/// | `client = <expr>` | the default client | an expression of type `&distlock::Client` |
/// | `crate = "path"` | `"::distlock"` | the path of the `distlock` crate, if it is renamed |
///
/// ```
/// # use distlock::{RateLimitError, rate_limit};
/// // Five attempts an hour per user; a sixth blocks the user for 15 minutes, a breach
/// // after that for an hour, then a day.
/// #[rate_limit(policy = "logins: 5/h", key = "user:{user}", lockout = ["15min", "1h", "1d"])]
/// async fn try_password(user: &str, password: &str) -> Result<bool, RateLimitError> {
///     Ok(password == "hunter2")
/// }
/// ```
///
/// Everything that can be checked when the function is compiled is: a policy that does not
/// parse or cannot work (`"api: 0/s"`, a burst on a fixed window), two policies with one name,
/// a literal cost of 0 or above a policy's limit, a placeholder that names no parameter,
/// `on_limit = wait` without `max_wait` (or `max_wait` without it), a lockout's blocks out
/// of range or not increasing, and unknown or repeated arguments. `on_limit` also takes its value as a string (`on_limit = "wait"`).
///
/// ## The policy
///
/// `policy` is written exactly as a [`Policy`](../distlock/ratelimit/struct.Policy.html)
/// parses from configuration: a name, a colon, an optional algorithm (GCRA by default) and a
/// rate, such as `"api: 100/s burst 20"`, `"uploads: sliding-log 10 per 5min"` or
/// `"daily: fixed-window 1000/d"`. A line copied from a configuration file means the same
/// here. Several policies, `policy = ["per-second: 10/s", "per-day: fixed-window 1000/d"]`,
/// are checked all or nothing in one round trip: a call runs only if every one allows it.
///
/// The policy's name is part of its keys: two functions with a policy of the same name (and
/// the same subject) share one budget, which is how several functions that call one partner
/// API stay under its single limit. Give different limits different names.
///
/// ## The key and the cost
///
/// `key` renders the subject from the parameters, as `#[distributed_lock]` renders a lock
/// name (`{name}`, `{name.field}`, `{self.field}`, `{{` / `}}`; `:` and `%` in values are
/// escaped). Without `key`, every call counts against one budget, whose subject is the first
/// policy's name: right for a worker or an outbound client with one quota.
///
/// `cost` is evaluated when the function is called, before the body runs, and may use the
/// parameters: `cost = batch.len()`. Any unsigned integer type works; a value above
/// `u32::MAX` counts as `u32::MAX`. A call whose cost is above a policy's limit can never pass
/// and fails with `RateLimitError::CostTooLarge`; a cost of 0 runs without a check.
///
/// ## When the limit is reached
///
/// With `on_limit = error` (the default) a denied call returns at once with
/// `Err(RateLimitError::Limited { policy, retry_after }.into())`: `retry_after` says how long
/// until the same call would pass. `distlock::http` maps it to `429 Too Many Requests` with
/// `Retry-After`, and with the `axum` feature `RateLimitError` answers that way itself.
///
/// With `on_limit = wait` a call waits for its turn, up to `max_wait`, and then runs: the
/// leaky bucket as a queue, for workers that must keep to a partner's rate. With GCRA and
/// token-bucket policies a call reserves its turn in one round trip, so callers in every
/// process are served in the order they called, and a call dropped while it waits gives its
/// turn back. A call whose turn would come later than `max_wait` fails at once with
/// `Limited`, without waiting.
///
/// ```
/// use distlock::{RateLimitError, rate_limit};
///
/// /// The partner takes 20 calls a second from all our workers together.
/// #[rate_limit(policy = "partner: 20/s burst 1", on_limit = wait, max_wait = "10s")]
/// async fn call_partner(request: u32) -> Result<u32, RateLimitError> {
///     Ok(request * 2)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), RateLimitError> {
/// distlock::set_default_client(distlock::Client::in_memory());
/// let started = tokio::time::Instant::now();
/// for request in 0..3 {
///     assert_eq!(call_partner(request).await?, request * 2);
/// }
/// // One call every 50 ms: the third ran 100 ms after the first.
/// assert!(started.elapsed() >= std::time::Duration::from_millis(100));
/// # Ok(())
/// # }
/// ```
///
/// ## The client and the limiter
///
/// Without `client = ...`, the client installed with `distlock::set_default_client` is used;
/// if there is none, the call fails with `RateLimitError::NoDefaultClient`. `client = <expr>`
/// is evaluated when the function is called, as for `#[distributed_lock]`.
///
/// Each annotated function builds its limiter once per client it is called with and keeps it
/// (up to 8 clients; a client nobody else holds any more is let go), so the limiter's local
/// deny cache, circuit breaker and cap on checks in flight serve all its calls. The limiter
/// has the runtime's defaults: it fails closed when the store cannot answer (the call fails
/// with `RateLimitError::Store`, or `CircuitOpen` once the store has failed repeatedly; both
/// map to `503`), and a check's deadline is the client's response timeout.
///
/// Errors of the limiter reach the caller converted into the function's error type:
/// `Limited`, `Store`, `Overloaded`, `CircuitOpen`, `InvalidSubject` (the rendered key is
/// empty or too long), `CostTooLarge`, `UnsupportedStore` (a Redlock quorum cannot rate
/// limit) and `NoDefaultClient`.
///
/// ## With `#[distributed_lock]`
///
/// Both attributes can be put on one function. The one written *lower* is applied last and
/// so runs first: with `#[distributed_lock(...)]` above `#[rate_limit(...)]`, a call is
/// checked against the limit before it waits for the lock, and a limited call never takes
/// the lock. The function's error type then needs both conversions.
#[proc_macro_attribute]
pub fn rate_limit(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::limit::rate_limit(args.into(), item.into()).into()
}
