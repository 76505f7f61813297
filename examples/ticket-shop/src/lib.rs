//! A small ticket shop that runs as several replicas behind a load balancer, built to show
//! distlock in a setting you would recognise:
//!
//! * per-client rate limits on the API ([`limits`]), with the `RateLimit` fields on every
//!   response and a stricter, all-or-nothing set of policies on checkout;
//! * a checkout guarded by `#[distributed_lock]` on the seat, writing under the lock's fencing
//!   token to a fenced resource that refuses older fences, so a seat is never sold twice
//!   ([`checkout`], [`store`]);
//! * a `LockLayer` on an admin route that must run one at a time ([`admin`]);
//! * checkout behind an `IdempotencyLayer`: a retried `POST` with the same `Idempotency-Key`
//!   is answered from the first one's stored response, even from another replica;
//! * a periodic job kept by an elected leader, each run under a job lock with a minimum hold
//!   ([`job`]);
//! * `GET /health`, which says which store is in use.
//!
//! [`app`] builds the router; `main` serves it and the tests drive it.

pub mod admin;
pub mod api;
pub mod checkout;
pub mod config;
pub mod error;
pub mod job;
pub mod limits;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::Request;
use axum::routing::{get, post};
use distlock::RateLimitError;
use distlock_tower::MissingKey;
use distlock_tower::client_ip::{Cidr, ClientIp};
use distlock_tower::console::{Console, bearer_token};
use distlock_tower::health::readiness;
use distlock_tower::idempotency::IdempotencyLayer;
use distlock_tower::lock::LockLayer;
use distlock_tower::rate_limit::RateLimitLayer;
use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::limits::{CHECKOUT_ROUTE, Limits};
use crate::store::Store;

/// What the handlers share. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState {
    /// Locks and rate limits: one Redis, a Redis Cluster or memory, the same as
    /// [`store`](Self::store).
    pub locks: distlock::Client,
    /// The shop's records.
    pub store: Store,
    pub limits: Limits,
    pub settings: Arc<Settings>,
}

/// The shop's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Seats `1..=seats` are for sale.
    pub seats: u32,
    /// This replica's name.
    pub replica: String,
    /// The load balancers whose `X-Forwarded-For` is believed; empty: the peer is the client.
    pub trusted_proxies: Vec<Cidr>,
    /// How long charging a card takes (simulated).
    pub payment_time: Duration,
    /// How long `POST /admin/reindex` works (simulated).
    pub reindex_time: Duration,
    /// How long a run of the periodic job works (simulated).
    pub job_work_time: Duration,
    /// The bearer token the operator console wants before a force-unlock or a reset; `None`:
    /// the console only reads.
    pub console_token: Option<String>,
}

impl Settings {
    /// `seats` seats, sold by `replica`, with the default timings.
    pub fn new(seats: u32, replica: impl Into<String>) -> Self {
        Self {
            seats,
            replica: replica.into(),
            trusted_proxies: Vec::new(),
            payment_time: Duration::from_millis(20),
            reindex_time: Duration::from_secs(1),
            job_work_time: Duration::from_millis(200),
            console_token: None,
        }
    }
}

impl AppState {
    /// The state over `locks` (for locks and rate limits) and `store` (for the records).
    pub fn new(
        locks: distlock::Client,
        store: Store,
        settings: Settings,
    ) -> Result<Self, RateLimitError> {
        Ok(Self {
            limits: Limits::new(&locks)?,
            locks,
            store,
            settings: Arc::new(settings),
        })
    }

    /// Everything in this process's memory: no setup, one replica.
    pub fn in_memory(settings: Settings) -> Result<Self, RateLimitError> {
        Self::new(distlock::Client::in_memory(), Store::in_memory(), settings)
    }
}

/// The shop's routes. Serve it with `into_make_service_with_connect_info::<SocketAddr>()`:
/// the rate limits key on the client's address.
///
/// | route | what |
/// |---|---|
/// | `GET /health` | store, replica, seats sold; not rate limited |
/// | `GET /ready` | `200` when Redis answers, `503` otherwise (`distlock_tower::health::readiness`) |
/// | `GET /api/seats` | seats for sale |
/// | `GET /api/seats/{seat}` | one seat, with its sale |
/// | `POST /api/seats/{seat}/checkout` | buys a seat: `{"buyer": "ada"}`; with an `Idempotency-Key` header, a retry gets the first answer |
/// | `POST /admin/reindex` | rebuilds the sales report; one at a time across replicas |
/// | `GET /admin/jobs` | runs of the periodic job |
/// | `GET /admin/leader` | the replica that leads the periodic job, and its term |
/// | `GET /admin/console` | the operator console: held locks, rate-limit subjects, store health |
pub fn app(state: AppState) -> Router {
    // Behind a load balancer, the client is the right-most address in X-Forwarded-For that
    // is not one of our proxies; without trusted proxies, the connection's peer.
    let client_ip = ClientIp::trusting(state.settings.trusted_proxies.iter().copied());

    // A buyer whose connection dropped retries with the same key and gets the first
    // attempt's answer (`Idempotent-Replayed: true`) instead of a second charge: once the
    // checkout has begun it runs to its end and its answer is stored, even if the buyer is
    // gone. A request without a key is served as before.
    //
    // This shop has no accounts, so a key is shared by every caller (said by name). A shop
    // with accounts scopes keys by the account its authentication layer found:
    // `.scope(|request: &Request<()>| request.extensions().get::<Account>().map(...))`.
    let idempotent_checkout = IdempotencyLayer::builder(state.locks.clone(), "checkout")
        .scope_global()
        .on_missing_key(MissingKey::Allow)
        .wait(Duration::from_secs(5))
        .build()
        // Constant, valid settings.
        .expect("valid idempotency settings");
    let api = Router::new()
        .route("/api/seats", get(api::list_seats))
        .route("/api/seats/{seat}", get(api::seat))
        .route(
            CHECKOUT_ROUTE,
            post(api::checkout).route_layer(idempotent_checkout),
        )
        .route_layer(
            RateLimitLayer::builder(state.limits.api.clone(), client_ip)
                .route(CHECKOUT_ROUTE, state.limits.checkout.clone())
                .build()
                // The only check is that the cost (1, the default) fits every policy: it does.
                .expect("a cost of 1 fits every policy"),
        );

    // One reindex at a time across every replica; the lock is keyed by a constant, in the
    // layer's own name space: `admin/reindex`.
    let reindex_key = |_: &Request<Body>| Some("reindex".to_owned());
    let admin = Router::new()
        .route(
            "/admin/reindex",
            post(admin::reindex).route_layer(
                LockLayer::builder(state.locks.clone(), reindex_key)
                    .namespace("admin")
                    .ttl(Duration::from_secs(10))
                    .build()
                    // A constant ttl between distlock::MIN_TTL and MAX_TTL.
                    .expect("10 s is a valid lock ttl"),
            ),
        )
        .route("/admin/jobs", get(admin::job_runs))
        .route("/admin/leader", get(admin::leader));

    Router::new()
        .route("/health", get(health))
        .route("/ready", readiness(state.locks.clone()))
        .merge(api)
        .merge(admin)
        .nest("/admin/console", console(&state))
        .with_state(state)
}

/// The operator console: who holds which lock, the `api` and `checkout` limits of a client
/// address. Every request to it, reads included, wants `Authorization: Bearer
/// <CONSOLE_TOKEN>` (the page has a box for it; compared in constant time); without a token
/// set, the console answers `403` to everyone. Like the other admin routes, a real shop would
/// also put it behind its own authentication.
fn console(state: &AppState) -> Router<AppState> {
    let mut console = Console::new(state.locks.clone())
        .rate_limiter("api", state.limits.api.clone())
        .and_then(|c| c.rate_limiter("checkout", state.limits.checkout.clone()))
        // Two constant, distinct names.
        .expect("valid limiter names");
    if let Some(token) = state.settings.console_token.clone() {
        console = console.authorize(bearer_token(token));
    }
    console.router()
}

/// The body of `GET /health`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Health {
    pub status: String,
    /// `"redis"`, `"redis-cluster"` or `"memory"`.
    pub store: String,
    pub replica: String,
    pub seats: u32,
    pub seats_sold: u64,
}

async fn health(State(state): State<AppState>) -> Result<Json<Health>, AppError> {
    Ok(Json(Health {
        status: "ok".to_owned(),
        store: state.store.kind().to_owned(),
        replica: state.settings.replica.clone(),
        seats: state.settings.seats,
        seats_sold: state.store.sold_count().await?,
    }))
}
