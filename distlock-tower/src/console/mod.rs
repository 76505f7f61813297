//! An operator's console: who holds which lock, since when, for how much longer and whether
//! anyone waits; a subject's rate-limit state; the circuit breakers and the store's health.
//! An axum router with a small JSON API and one HTML page that uses it, to mount where your
//! operators can reach it.
//!
//! ```no_run
//! use axum::Router;
//! use distlock_tower::console::{Console, bearer_token};
//!
//! fn app(client: distlock::Client, logins: distlock::ratelimit::RateLimiter) -> Router {
//!     // The operators' token, from your secret store (here an environment variable).
//!     let token = std::env::var("CONSOLE_TOKEN").expect("CONSOLE_TOKEN is set");
//!     let console = Console::new(client)
//!         .rate_limiter("login", logins)
//!         .expect("a unique name")
//!         // Who may do what: without a hook the console answers 403 to everything. This
//!         // one lets in every request that carries the token, for reads and changes alike,
//!         // comparing in constant time.
//!         .authorize(bearer_token(token));
//!     Router::new().nest("/admin/console", console.router())
//! }
//! ```
//!
//! Open `/admin/console` in a browser: the page lists the held locks (refreshed every 2 s),
//! with a button to force one free, and looks up a subject of each limiter, with a button to
//! reset it. The page's token box sends `Authorization: Bearer <token>` with each request;
//! cookies go along too (the page's requests are same-origin), so a hook can check either.
//!
//! | request (under the mount point) | answer |
//! |---|---|
//! | `GET /` | the page (`text/html`; the script and style sheet are `console.js`, `console.css`) |
//! | `GET /api/overview` | `{"identity","prefix","mutations","health":{"ready","store","nodes":[..]},"limiters":[{"name","policies","shadow","breaker"}]}` |
//! | `GET /api/locks?limit=N` | `{"complete","locks":[{"name","state","remaining_ttl_ms","waiters","holder","since_ms"}]}` (N ≤ 1,000, default 200) |
//! | `GET /api/locks/{name}` | one lock, `"state":"free"` if nobody holds it, and `"fair_queue"`: how many wait for it as a [fair lock](distlock::LockBuilder::fair) (`null` on a Redlock quorum) |
//! | `GET /api/hierarchy/{path}` | `{"path","holders":[{"mode","remaining_ttl_ms","holder","since_ms"}]}`: a hierarchical lock level's holders, mode `IS`, `IX`, `S` or `X` ([`Client::hierarchy_lock_state`]) |
//! | `POST /api/locks/{name}/force-unlock` | `{"forced":true}` if a lease held it ([`Client::force_unlock`]) |
//! | `GET /api/rate-limits/{limiter}/{subject}` | what a request would get now, consuming nothing |
//! | `POST /api/rate-limits/{limiter}/{subject}/reset` | the subject's state after a reset |
//!
//! Names in a path are percent-encoded (`encodeURIComponent`). Times are milliseconds; `since_ms`
//! is Unix time by the holder's clock.
//!
//! **Access: closed unless its owner says otherwise.** Every request, the page and its
//! script included ([`Action::Page`]), asks the [`authorize`](Console::authorize) hook with
//! the [`Action`] it would take; a refusal is `403`. **Without a hook, every route answers `403`**: what the
//! console shows (lock names, holders' hosts and pids, the store's addresses, limiter
//! thresholds, any subject's lockout state) is for operators only.
//! [`public_reads`](Console::public_reads) opens the reads to anyone who reaches the mount
//! (for a console behind your own authentication layer, or on an internal port); the two
//! `POST`s still need a hook: **no hook, no mutations.** [`bearer_token`] makes a hook that
//! checks a shared token in constant time.
//!
//! A `POST` must also come from the console's own page: it carries the header
//! `X-Distlock-Console: 1` (a plain HTML form of another site cannot send it), and a browser's
//! `Sec-Fetch-Site` must be `same-origin` and its `Origin`, when there is one, must name the
//! `Host` the request was sent to; otherwise `403`, whatever the hook says. So a browser that
//! holds an operator's cookie cannot be made to force a lock from another site, even behind a
//! permissive CORS layer. Forcing a lock tells its holder at once (see
//! [`Client::force_unlock`] for what that does and does not guarantee). Every mutation is
//! logged at `INFO`.
//!
//! **What a listing costs.** `GET /api/locks` walks the keyspace with `SCAN` within a key
//! budget ([`scan_budget`](Console::scan_budget), 100,000 keys per server by default: 200
//! calls of 500); one walk at a time per console, whose answer is shared by the requests that
//! come while it runs and kept for [`listing_cache`](Console::listing_cache) (2 s). So fifty
//! operators' tabs cost the store one walk every 2 s, and the page polls only while it is
//! visible. Idempotency claims are never listed: their names carry callers' keys.
//!
//! **The page** is plain HTML, CSS and JavaScript from this crate, served with a
//! `Content-Security-Policy` that allows only its own script, style sheet and requests; lock
//! names, identities and subjects are inserted as text, never as markup.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{OriginalUri, Path, State};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use distlock::ratelimit::{Decision, RateLimiter};
use distlock::{Client, HierarchyHolder, LockListing, LockState, MAX_LISTED_LOCKS};
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode, header};

use crate::refusal::push_json_string;

/// How many locks `GET /api/locks` lists without a `limit`.
pub const DEFAULT_LISTED_LOCKS: usize = 200;

/// The header every `POST` must carry, with the value `1`.
pub const MUTATION_HEADER: &str = "x-distlock-console";

/// How many keys a listing looks at on each server unless [`Console::scan_budget`] says
/// otherwise: 100,000.
pub const DEFAULT_SCAN_BUDGET: u64 = 100_000;

/// How long a listing is served to later requests unless [`Console::listing_cache`] says
/// otherwise: 2 s (the page's polling period).
pub const DEFAULT_LISTING_CACHE: Duration = Duration::from_secs(2);

/// A hook for [`Console::authorize`] that lets in every request carrying `Authorization:
/// Bearer <token>` with this token, for every [`Action`], and nothing else but the page's
/// static files ([`Action::Page`], which hold no data: the page asks for the token and sends
/// it with its API calls). It compares in constant time, so the time of a refusal tells
/// nothing about how much of a guess was right. An empty token lets nobody in.
pub fn bearer_token(
    token: impl Into<String>,
) -> impl Fn(&Parts, Action) -> bool + Send + Sync + 'static {
    let token = token.into().into_bytes();
    move |request: &Parts, action: Action| {
        if action == Action::Page {
            return true;
        }
        let Some(sent) = request
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        else {
            return false;
        };
        !token.is_empty() && bool::from(subtle::ConstantTimeEq::ct_eq(sent, token.as_slice()))
    }
}

/// What a request to the console would do, as the [`authorize`](Console::authorize) hook is
/// asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// The page, its script or its style sheet: static files that hold nothing of the
    /// store. A hook can let everyone have them (as [`bearer_token`] does), so that a
    /// browser opens the page and sends the operator's token with its API calls.
    Page,
    /// A `GET` of the API.
    Read,
    /// `POST .../force-unlock`.
    ForceUnlock,
    /// `POST .../reset` of a rate-limit subject.
    ResetRateLimit,
}

impl Action {
    /// Whether the action changes anything.
    #[must_use]
    pub fn is_mutation(self) -> bool {
        !matches!(self, Self::Page | Self::Read)
    }
}

/// Why [`Console::rate_limiter`] refused a limiter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("console rate limiter name {name:?}: {reason}")]
#[non_exhaustive]
pub struct InvalidLimiterName {
    /// The name given.
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

type Hook = dyn Fn(&Parts, Action) -> bool + Send + Sync;

/// The last listing, and when it was made; one walk at a time fills it.
type ListingCache = tokio::sync::Mutex<Option<(Instant, Arc<LockListing>)>>;

/// The console's settings; [`router`](Self::router) makes the axum router.
#[derive(Clone)]
#[must_use = "a Console does nothing until its router() is mounted"]
pub struct Console {
    client: Client,
    limiters: Vec<(String, RateLimiter)>,
    authorize: Option<Arc<Hook>>,
    public_reads: bool,
    scan_budget: u64,
    listing_cache: Duration,
    listing: Arc<ListingCache>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("store", &self.client.store_kind())
            .field(
                "limiters",
                &self.limiters.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("authorize", &self.authorize.is_some())
            .field("public_reads", &self.public_reads)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// A console over `client`'s locks (those of its prefix), closed to everyone (`403`)
    /// until [`authorize`](Self::authorize) (or [`public_reads`](Self::public_reads)) says
    /// who may come in.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            limiters: Vec::new(),
            authorize: None,
            public_reads: false,
            scan_budget: DEFAULT_SCAN_BUDGET,
            listing_cache: DEFAULT_LISTING_CACHE,
            listing: Arc::default(),
        }
    }

    /// Opens the reads (the page and every `GET`) to anyone who reaches the mount point, when
    /// no [`authorize`](Self::authorize) hook decides. For a console mounted behind your own
    /// authentication, or on a port only operators reach: it shows lock names, holders'
    /// hosts, the store's addresses and any subject's rate-limit state. Changes still need a
    /// hook.
    pub fn public_reads(mut self) -> Self {
        self.public_reads = true;
        self
    }

    /// How many keys one listing may look at on each server (default
    /// [`DEFAULT_SCAN_BUDGET`]; rounded up to whole `SCAN` calls of 500 keys). A keyspace
    /// larger than that is listed in part, and the answer says so (`"complete":false`).
    pub fn scan_budget(mut self, keys: u64) -> Self {
        self.scan_budget = keys;
        self
    }

    /// How long a listing is served again to later requests before a new walk (default
    /// [`DEFAULT_LISTING_CACHE`]). Zero: every request after the walk in flight walks again
    /// (still one at a time).
    pub fn listing_cache(mut self, keep: Duration) -> Self {
        self.listing_cache = keep;
        self
    }

    /// Shows `limiter` under `name`: the page and `GET /api/rate-limits/{name}/{subject}`
    /// look its subjects up, `POST .../reset` resets one.
    ///
    /// # Errors
    /// A `name` that is empty, longer than 64 bytes, not made of ASCII letters, digits, `-`,
    /// `_` and `.`, or already given.
    pub fn rate_limiter(
        mut self,
        name: impl Into<String>,
        limiter: RateLimiter,
    ) -> Result<Self, InvalidLimiterName> {
        let name = name.into();
        let reason = if name.is_empty() || name.len() > 64 {
            Some("it must be 1 to 64 bytes long")
        } else if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            Some("it may hold only ASCII letters, digits, '-', '_' and '.'")
        } else if self.limiters.iter().any(|(n, _)| *n == name) {
            Some("another limiter has that name")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(InvalidLimiterName { name, reason });
        }
        self.limiters.push((name, limiter));
        Ok(self)
    }

    /// Who may do what: `hook` sees each request's head (headers, URI, extensions such as
    /// your authentication layer's) and the [`Action`] it would take, and answers whether it
    /// may. It is asked for every request, reads included. Without it, every request is
    /// refused (reads too, unless [`public_reads`](Self::public_reads)). [`bearer_token`]
    /// makes one; compare secrets of your own in constant time too (`subtle`'s `ct_eq`).
    pub fn authorize<F>(mut self, hook: F) -> Self
    where
        F: Fn(&Parts, Action) -> bool + Send + Sync + 'static,
    {
        self.authorize = Some(Arc::new(hook));
        self
    }

    /// The router, to [`nest`](Router::nest) where operators reach it (or to serve alone).
    pub fn router<S>(self) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        Router::<Shared>::new()
            .route("/", get(page))
            .route("/console.js", get(script))
            .route("/console.css", get(style))
            .route("/api/overview", get(overview))
            .route("/api/locks", get(locks))
            .route("/api/locks/{name}", get(lock))
            .route("/api/hierarchy/{path}", get(hierarchy))
            .route("/api/locks/{name}/force-unlock", post(force_unlock))
            .route("/api/rate-limits/{limiter}/{subject}", get(peek))
            .route("/api/rate-limits/{limiter}/{subject}/reset", post(reset))
            .with_state(Arc::new(self))
    }

    /// Whether `action` may go ahead for this request: the hook's word (without a hook,
    /// nothing, or reads when they are public), and for a mutation a hook at all, the
    /// console's header and a request from the console's own origin.
    fn guard(&self, parts: &Parts, action: Action) -> Result<(), Refused> {
        if action.is_mutation() {
            if self.authorize.is_none() {
                return Err(Refused(
                    StatusCode::FORBIDDEN,
                    "this console changes nothing: its owner set no authorize hook",
                ));
            }
            if parts.headers.get(MUTATION_HEADER).is_none_or(|v| v != "1") {
                return Err(Refused(
                    StatusCode::FORBIDDEN,
                    "a console POST must carry the header X-Distlock-Console: 1",
                ));
            }
            if !same_origin(parts) {
                return Err(Refused(
                    StatusCode::FORBIDDEN,
                    "a console POST must come from the console's own page (same origin)",
                ));
            }
        }
        match &self.authorize {
            Some(hook) if hook(parts, action) => Ok(()),
            Some(_) => Err(Refused(
                StatusCode::FORBIDDEN,
                "not allowed by the console's authorize hook",
            )),
            None if self.public_reads && !action.is_mutation() => Ok(()),
            None => Err(Refused(
                StatusCode::FORBIDDEN,
                "this console is closed: its owner set no authorize hook",
            )),
        }
    }

    /// The held locks, from the cache while it is fresh, else from one walk of the keyspace
    /// (a request that comes while a walk runs waits for it and takes its answer).
    async fn listing(&self) -> Result<Arc<LockListing>, distlock::LockError> {
        let mut cached = self.listing.lock().await;
        if let Some((at, listing)) = cached.as_ref()
            && at.elapsed() <= self.listing_cache
        {
            return Ok(Arc::clone(listing));
        }
        let listing = Arc::new(
            self.client
                .held_locks_within(MAX_LISTED_LOCKS, self.scan_budget)
                .await?,
        );
        *cached = Some((Instant::now(), Arc::clone(&listing)));
        Ok(listing)
    }

    fn limiter(&self, name: &str) -> Result<&RateLimiter, Refused> {
        self.limiters
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, limiter)| limiter)
            .ok_or(Refused(
                StatusCode::NOT_FOUND,
                "the console shows no limiter of that name",
            ))
    }

    async fn overview(&self) -> String {
        let health = self.client.ping().await;
        let health_doc = crate::health::document(&health);
        let mut body = String::with_capacity(256 + health_doc.len());
        body.push_str("{\"identity\":");
        push_json_string(&mut body, self.client.identity());
        body.push_str(",\"prefix\":");
        push_json_string(&mut body, self.client.prefix());
        let _ = write!(body, ",\"mutations\":{}", self.authorize.is_some());
        body.push_str(",\"health\":");
        body.push_str(&health_doc);
        body.push_str(",\"limiters\":[");
        for (i, (name, limiter)) in self.limiters.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            body.push_str("{\"name\":");
            push_json_string(&mut body, name);
            body.push_str(",\"policies\":[");
            for (j, policy) in limiter.policies().iter().enumerate() {
                if j > 0 {
                    body.push(',');
                }
                push_json_string(&mut body, &policy.to_string());
            }
            let breaker = match limiter.breaker() {
                None => "none",
                Some(b) if b.is_open() => "open",
                Some(_) => "closed",
            };
            let _ = write!(
                body,
                "],\"shadow\":{},\"breaker\":\"{breaker}\"}}",
                limiter.is_shadow()
            );
        }
        body.push_str("]}");
        body
    }
}

/// The console, as each route's handler gets it.
type Shared = Arc<Console>;

/// A route's answer: its response, or the response of a refusal or an error.
type Answer = Result<Response<Body>, Response<Body>>;

/// The response to a store's error.
fn failed(err: impl IntoResponse) -> Response<Body> {
    err.into_response()
}

async fn page(State(console): State<Shared>, parts: Parts) -> Answer {
    console.guard(&parts, Action::Page)?;
    Ok(page_html(&parts))
}

async fn script(State(console): State<Shared>, parts: Parts) -> Answer {
    console.guard(&parts, Action::Page)?;
    Ok(asset(SCRIPT, "text/javascript"))
}

async fn style(State(console): State<Shared>, parts: Parts) -> Answer {
    console.guard(&parts, Action::Page)?;
    Ok(asset(STYLE, "text/css"))
}

async fn overview(State(console): State<Shared>, parts: Parts) -> Answer {
    console.guard(&parts, Action::Read)?;
    Ok(json(StatusCode::OK, console.overview().await))
}

async fn locks(State(console): State<Shared>, parts: Parts) -> Answer {
    console.guard(&parts, Action::Read)?;
    let limit = limit_of(&parts).map_err(|why| problem(StatusCode::BAD_REQUEST, &why))?;
    let listing = console.listing().await.map_err(failed)?;
    let shown = &listing.locks[..listing.locks.len().min(limit)];
    let complete = listing.complete && shown.len() == listing.locks.len();
    let mut body = String::with_capacity(64 + 160 * shown.len());
    let _ = write!(body, "{{\"complete\":{complete},\"locks\":[");
    for (i, lock) in shown.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        push_lock(&mut body, &lock.name, &lock.state);
    }
    body.push_str("]}");
    Ok(json(StatusCode::OK, body))
}

async fn lock(State(console): State<Shared>, Path(name): Path<String>, parts: Parts) -> Answer {
    console.guard(&parts, Action::Read)?;
    let state = console.client.lock_state(&name).await.map_err(failed)?;
    let mut body = String::new();
    push_lock(&mut body, &name, &state);
    // How many wait for it fairly (null where the store keeps no fair queues, a Redlock
    // quorum).
    let queued = console.client.fair_queue_len(&name).await;
    body.pop();
    match queued {
        Ok(queued) => {
            let _ = write!(body, ",\"fair_queue\":{queued}}}");
        }
        Err(_) => body.push_str(",\"fair_queue\":null}"),
    }
    Ok(json(StatusCode::OK, body))
}

async fn hierarchy(
    State(console): State<Shared>,
    Path(path): Path<String>,
    parts: Parts,
) -> Answer {
    console.guard(&parts, Action::Read)?;
    let holders = console
        .client
        .hierarchy_lock_state(&path)
        .await
        .map_err(failed)?;
    Ok(json(StatusCode::OK, level_json(&path, &holders)))
}

async fn force_unlock(
    State(console): State<Shared>,
    Path(name): Path<String>,
    parts: Parts,
) -> Answer {
    console.guard(&parts, Action::ForceUnlock)?;
    let forced = console.client.force_unlock(&name).await.map_err(failed)?;
    tracing::info!(lock = %name, forced, "console: force-unlock");
    Ok(json(StatusCode::OK, format!("{{\"forced\":{forced}}}")))
}

async fn peek(
    State(console): State<Shared>,
    Path((limiter, subject)): Path<(String, String)>,
    parts: Parts,
) -> Answer {
    console.guard(&parts, Action::Read)?;
    let limiter = console.limiter(&limiter)?;
    let decision = limiter.peek(&subject).await.map_err(failed)?;
    Ok(json(StatusCode::OK, decision_json(&subject, &decision)))
}

async fn reset(
    State(console): State<Shared>,
    Path((name, subject)): Path<(String, String)>,
    parts: Parts,
) -> Answer {
    console.guard(&parts, Action::ResetRateLimit)?;
    let limiter = console.limiter(&name)?;
    let decision = limiter.reset(&subject).await.map_err(failed)?;
    tracing::info!(
        limiter = %name,
        subject = %distlock::logging::redacted(&subject),
        "console: rate-limit reset"
    );
    Ok(json(StatusCode::OK, decision_json(&subject, &decision)))
}

/// Whether a request comes from the console's own page, as far as a browser says: its
/// `Sec-Fetch-Site` is `same-origin` if it sends one; else its `Origin`, if it sends one,
/// names the host the request was sent to. A request with neither is no browser's (a script
/// of an operator's, `curl`), which no other site can make.
fn same_origin(parts: &Parts) -> bool {
    if let Some(site) = parts.headers.get("sec-fetch-site") {
        return site == "same-origin";
    }
    let Some(origin) = parts.headers.get(header::ORIGIN) else {
        return true;
    };
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| parts.uri.authority().map(http::uri::Authority::as_str));
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, rest)| rest);
    matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
}

/// A request the console turns down itself: its status and why.
#[derive(Debug)]
struct Refused(StatusCode, &'static str);

impl From<Refused> for Response<Body> {
    fn from(Refused(status, detail): Refused) -> Self {
        problem(status, detail)
    }
}

/// `?limit=N`: at most [`MAX_LISTED_LOCKS`], [`DEFAULT_LISTED_LOCKS`] without it.
fn limit_of(parts: &Parts) -> Result<usize, String> {
    let Some(query) = parts.uri.query() else {
        return Ok(DEFAULT_LISTED_LOCKS);
    };
    let mut limit = DEFAULT_LISTED_LOCKS;
    for pair in query.split('&') {
        if let Some(value) = pair.strip_prefix("limit=") {
            limit = match value.parse::<usize>() {
                Ok(n) if (1..=MAX_LISTED_LOCKS).contains(&n) => n,
                _ => {
                    return Err(format!(
                        "limit must be a whole number from 1 to {MAX_LISTED_LOCKS}"
                    ));
                }
            };
        }
    }
    Ok(limit)
}

fn millis(d: Duration) -> u128 {
    d.as_millis()
}

/// One lock as JSON.
fn push_lock(body: &mut String, name: &str, state: &LockState) {
    body.push_str("{\"name\":");
    push_json_string(body, name);
    match state {
        LockState::Held {
            remaining_ttl,
            waiters,
            holder,
            ..
        } => {
            let _ = write!(
                body,
                ",\"state\":\"held\",\"remaining_ttl_ms\":{},\"waiters\":{waiters},\"holder\":",
                millis(*remaining_ttl)
            );
            match holder {
                Some(holder) => {
                    push_json_string(body, &holder.identity);
                    let since = holder
                        .since
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis());
                    let _ = write!(body, ",\"since_ms\":{since}}}");
                }
                None => body.push_str("null,\"since_ms\":null}"),
            }
        }
        LockState::Reserved { remaining_ttl, .. } => {
            let _ = write!(
                body,
                ",\"state\":\"reserved\",\"remaining_ttl_ms\":{},\"waiters\":true,\"holder\":null,\"since_ms\":null}}",
                millis(*remaining_ttl)
            );
        }
        _ => body.push_str(
            ",\"state\":\"free\",\"remaining_ttl_ms\":null,\"waiters\":false,\"holder\":null,\"since_ms\":null}",
        ),
    }
}

/// A hierarchical lock level's holders as JSON.
fn level_json(path: &str, holders: &[HierarchyHolder]) -> String {
    let mut body = String::with_capacity(64 + 128 * holders.len());
    body.push_str("{\"path\":");
    push_json_string(&mut body, path);
    body.push_str(",\"holders\":[");
    for (i, h) in holders.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        let _ = write!(
            body,
            "{{\"mode\":\"{}\",\"remaining_ttl_ms\":{},\"holder\":",
            h.mode,
            millis(h.state.remaining_ttl)
        );
        match &h.state.holder {
            Some(holder) => {
                push_json_string(&mut body, &holder.identity);
                let since = holder
                    .since
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis());
                let _ = write!(body, ",\"since_ms\":{since}}}");
            }
            None => body.push_str("null,\"since_ms\":null}"),
        }
    }
    body.push_str("]}");
    body
}

/// A rate-limit decision as JSON.
fn decision_json(subject: &str, d: &Decision) -> String {
    let mut body = String::with_capacity(256);
    body.push_str("{\"subject\":");
    push_json_string(&mut body, subject);
    let _ = write!(
        body,
        ",\"allowed\":{},\"limit\":{},\"remaining\":{},\"retry_after_ms\":{},\"reset_after_ms\":{},\"locked_out\":{},\"policies\":[",
        d.allowed,
        d.limit,
        d.remaining,
        millis(d.retry_after),
        millis(d.reset_after),
        d.locked_out
    );
    for (i, p) in d.policies.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str("{\"policy\":");
        push_json_string(&mut body, &p.policy);
        let _ = write!(
            body,
            ",\"allowed\":{},\"limit\":{},\"remaining\":{},\"retry_after_ms\":{},\"reset_after_ms\":{},\"locked_out\":{}}}",
            p.allowed,
            p.limit,
            p.remaining,
            millis(p.retry_after),
            millis(p.reset_after),
            p.locked_out
        );
    }
    body.push_str("]}");
    body
}

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("console.js");
const STYLE: &str = include_str!("console.css");

/// Only the page's own script, style sheet and requests.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
    img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page, pointing at its script and style sheet under the path it was asked for (a
/// router nested at `/admin/console` answers `/admin/console`, without a slash, so relative
/// URLs would miss).
fn page_html(parts: &Parts) -> Response<Body> {
    let path = parts
        .extensions
        .get::<OriginalUri>()
        .map_or_else(|| parts.uri.path(), |original| original.0.path());
    let base = path.trim_end_matches('/');
    let mut escaped = String::with_capacity(base.len());
    for c in base.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '"' => escaped.push_str("&quot;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    let mut response = asset_owned(
        PAGE.replace("{{BASE}}", &escaped),
        "text/html; charset=utf-8",
    );
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    response
}

fn asset(body: &'static str, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    set_common(&mut response, content_type);
    response
}

fn asset_owned(body: String, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    set_common(&mut response, content_type);
    response
}

fn set_common(response: &mut Response<Body>, content_type: &'static str) {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

fn json(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    set_common(&mut response, "application/json");
    response
}

/// An `application/problem+json` refusal (RFC 9457).
fn problem(status: StatusCode, detail: &str) -> Response<Body> {
    let mut body = String::with_capacity(64 + detail.len());
    let _ = write!(body, "{{\"status\":{},\"title\":", status.as_u16());
    push_json_string(&mut body, status.canonical_reason().unwrap_or("refused"));
    body.push_str(",\"detail\":");
    push_json_string(&mut body, detail);
    body.push('}');
    let mut response = json(status, body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}
