//! The README's "Where it runs" table, held against the code: each row's primitives are
//! built on each kind of store (a single primary, the same behind Sentinel, a Redis Cluster,
//! a Redlock quorum, memory), and what is refused where it is built must be what the table
//! says. The capability table in `Capability`'s documentation is checked the same way against
//! `Client::supports`. A capability (`Capability::ALL`) that neither table covers fails too.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use distlock::ratelimit::{Policy, Rate};
use distlock::{Capability, Client, LockError, distributed_lock};
use distlock_tower::ConfigError;
use distlock_tower::concurrency::ConcurrencyLimitLayer;
use distlock_tower::extract::Constant;
use distlock_tower::lock::LockLayer;

use crate::support::RedisServer;
use crate::support::fixture::{connect, shared_cluster_client};
use crate::support::sentinel::SentinelSetup;

/// The README's columns, in order.
const COLUMNS: [&str; 4] = [
    "single primary",
    "Redis Cluster",
    "Redlock quorum",
    "in memory",
];

/// What a cell says about a row's primitives on a kind of store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    /// `yes...`: they are built and run.
    Runs,
    /// `refused...`: building one is refused with a typed error.
    Refused,
}

/// What building a row's primitives found, with what refused them.
#[derive(Debug)]
struct Found {
    cell: Cell,
    why: String,
}

impl Found {
    fn runs() -> Self {
        Self {
            cell: Cell::Runs,
            why: String::new(),
        }
    }

    fn refused(why: impl std::fmt::Display) -> Self {
        Self {
            cell: Cell::Refused,
            why: why.to_string(),
        }
    }
}

fn readme() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The rows of the table under `## Where it runs`: (first column, one cell per store).
fn readme_table() -> Vec<(String, [Cell; 4])> {
    let text = readme();
    let start = text
        .find("## Where it runs")
        .expect("the README has a \"Where it runs\" section");
    let mut lines = text[start..].lines().skip_while(|l| !l.starts_with('|'));
    let header = lines.next().expect("the table's header");
    let heads: Vec<&str> = header.split('|').map(str::trim).collect();
    for (i, column) in COLUMNS.iter().enumerate() {
        assert!(
            heads.get(i + 2).is_some_and(|h| h.starts_with(column)),
            "column {} of the README's table is {:?}, not {column:?}",
            i + 2,
            heads.get(i + 2)
        );
    }
    let mut rows = Vec::new();
    for line in lines.skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 7, "a row of five cells: {line}");
        let label = cells[1].to_owned();
        if label == "server" {
            continue; // versions, not primitives: the version check and docs/version-results.tsv
        }
        let parse = |cell: &str| {
            if cell.starts_with("yes") {
                Cell::Runs
            } else if cell.starts_with("refused") {
                Cell::Refused
            } else {
                panic!("row {label:?}: a cell says neither yes nor refused: {cell:?}")
            }
        };
        rows.push((
            label.clone(),
            [
                parse(cells[2]),
                parse(cells[3]),
                parse(cells[4]),
                parse(cells[5]),
            ],
        ));
    }
    assert!(rows.len() >= 8, "the table was not found whole: {rows:?}");
    rows
}

/// The README row that covers `capability`, or why none does. A capability this test does
/// not know fails it: add a row to the README and its probe below.
fn readme_row(capability: Capability) -> Option<&'static str> {
    match capability {
        Capability::HolderSets | Capability::FairQueues => Some(SEMAPHORES),
        Capability::RateLimits => Some(RATE_LIMITS),
        Capability::BloomFilters => Some(BLOOM),
        Capability::ReplicaAcknowledgement => Some(REPLICAS),
        Capability::FencedWrites => Some(FENCED),
        Capability::IdempotencyRecords => Some(IDEMPOTENCY),
        // Not a refusal: without it a released lock wakes its waiter, one round trip more.
        Capability::HandOff => None,
        other => panic!(
            "{other:?} ({other}) is a capability the README's \"Where it runs\" table does not \
             cover: add its row there, and its probe to tests/docs/where_it_runs.rs"
        ),
    }
}

const LOCKS: &str = "locks, multi-locks, jobs, the macro, `LockLayer`";
const SEMAPHORES: &str =
    "semaphores, read-write, hierarchical and fair locks, `ConcurrencyLimitLayer`, adaptive limits";
const RATE_LIMITS: &str = "rate limits, `RateLimitLayer`, `#[rate_limit]`, `distlock-rls`";
const BLOOM: &str = "Bloom filters";
const FENCED: &str = "fenced writes";
const ELECTION: &str = "leader election";
const IDEMPOTENCY: &str = "idempotency records, `IdempotencyLayer`";
const REPLICAS: &str = "replica acknowledgement";
const ADMIN: &str = "`lock_state`, `force_unlock`";

#[distributed_lock(key = "docs:macro", client = client)]
async fn locked(client: &Client) -> Result<u64, LockError> {
    match distlock::current_lease() {
        Some(lease) => lease.fence().await,
        None => Ok(0),
    }
}

#[distlock::rate_limit(policy = "docs-macro: 100/s", key = "docs", client = client)]
async fn limited(client: &Client) -> Result<(), distlock::RateLimitError> {
    Ok(())
}

/// Builds (and uses once) each primitive of `row` on `client`: whether they run, or what
/// refused them. Primitives of one row must agree.
async fn probe(row: &str, client: &Client) -> Found {
    let mut found = Vec::new();
    match row {
        LOCKS => {
            let lease = client.lock("docs:lock").acquire().await;
            found.push(outcome(lease.map(drop)));
            let multi = client.multi_lock(["docs:m1", "docs:m2"]).acquire().await;
            found.push(outcome(multi.map(drop)));
            let job = client
                .job("docs:job")
                .at_most(Duration::from_secs(5))
                .run(|_lease| async {})
                .await;
            found.push(outcome(job.map(drop)));
            found.push(outcome(locked(client).await.map(drop)));
            let layer =
                LockLayer::builder(client.clone(), Constant::from_static("docs:layer")).build();
            found.push(layer_outcome(layer.map(drop)));
        }
        SEMAPHORES => {
            let permit = client.semaphore("docs:sem", 2).acquire().await;
            found.push(outcome(permit.map(drop)));
            let read = client.rw_lock("docs:rw").read().await;
            found.push(outcome(read.map(drop)));
            let fair = client.lock("docs:fair").fair().acquire().await;
            found.push(outcome(fair.map(drop)));
            let path = client.hierarchy_lock("docs/hier/1").exclusive().await;
            found.push(outcome(path.map(drop)));
            let layer =
                ConcurrencyLimitLayer::new(client.clone(), Constant::from_static("docs:cl"), 2);
            found.push(layer_outcome(layer.map(drop)));
            found.push(match client.adaptive_limit("docs:adaptive").build() {
                Ok(limit) => {
                    limit.refresh().await.expect("read a limit that was built");
                    Found::runs()
                }
                Err(err @ distlock::adaptive::AdaptiveError::UnsupportedStore { .. }) => {
                    Found::refused(err)
                }
                Err(err) => panic!("{row}: {err}"),
            });
        }
        RATE_LIMITS => {
            let policy =
                Policy::gcra("docs", Rate::per_second(100).expect("rate")).expect("policy");
            match client.rate_limiter(policy).build() {
                Ok(limiter) => {
                    let decision = limiter.check("docs").await;
                    found.push(
                        decision
                            .map(|_| Found::runs())
                            .unwrap_or_else(|e| panic!("{row}: a built limiter failed: {e}")),
                    );
                }
                Err(err @ distlock::RateLimitError::UnsupportedStore { .. }) => {
                    found.push(Found::refused(err));
                }
                Err(err) => panic!("{row}: {err}"),
            }
            // The rate-limit service builds a limiter per configured limit when it starts.
            let config = distlock_tower::rls::RlsConfig::from_texts([(
                "docs.yaml",
                "domain: docs\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 5 }\n",
            )])
            .expect("a valid configuration");
            found.push(
                match distlock_tower::rls::RateLimitServer::new(
                    client.clone(),
                    config,
                    distlock_tower::rls::Settings::default(),
                ) {
                    Ok(_) => Found::runs(),
                    Err(
                        err @ distlock_tower::rls::RlsError::Limiter {
                            error: distlock::RateLimitError::UnsupportedStore { .. },
                            ..
                        },
                    ) => Found::refused(err),
                    Err(err) => panic!("{row}: distlock-rls: {err}"),
                },
            );
            // The macro builds its limiter at its first call, where the same refusal comes.
            match limited(client).await {
                Ok(()) => found.push(Found::runs()),
                Err(err @ distlock::RateLimitError::UnsupportedStore { .. }) => {
                    found.push(Found::refused(err));
                }
                Err(err) => panic!("{row}: #[rate_limit]: {err}"),
            }
        }
        BLOOM => {
            let filter = client
                .bloom_filter("docs:bloom")
                .expected_items(100)
                .open()
                .await;
            found.push(match filter {
                Ok(filter) => {
                    filter.add("x").await.expect("add to a filter that opened");
                    Found::runs()
                }
                Err(err @ distlock::BloomError::UnsupportedStore { .. }) => Found::refused(err),
                Err(err) => panic!("{row}: {err}"),
            });
        }
        FENCED => found.push(match client.fenced("docs:fenced") {
            Ok(resource) => {
                resource
                    .advance(1)
                    .await
                    .expect("advance a resource that was made");
                Found::runs()
            }
            Err(err @ distlock::FencedError::UnsupportedStore { .. }) => Found::refused(err),
            Err(err) => panic!("{row}: {err}"),
        }),
        ELECTION => {
            let election = client
                .election("docs:election")
                .build()
                .expect("an election");
            let leadership = election.campaign("docs").await;
            found.push(outcome(leadership.map(drop)));
        }
        IDEMPOTENCY => found.push(match client.idempotency("docs") {
            Ok(_) => Found::runs(),
            Err(err @ distlock::IdempotencyError::UnsupportedStore { .. }) => Found::refused(err),
            Err(err) => panic!("{row}: {err}"),
        }),
        REPLICAS => {
            let acked = client
                .lock("docs:acked")
                .replicas(1, Duration::from_millis(200))
                .acquire()
                .await;
            found.push(match acked {
                // Refused as a configuration the store cannot serve...
                Err(err @ LockError::InvalidConfig { .. }) => Found::refused(err),
                // ...while a primary without a replica to acknowledge runs it and says so.
                Ok(_) | Err(LockError::Store(distlock::StoreError::NotReplicated { .. })) => {
                    Found::runs()
                }
                Err(err) => panic!("{row}: {err}"),
            });
        }
        ADMIN => {
            let lease = client.lock("docs:admin").acquire().await.expect("acquire");
            let state = client.lock_state("docs:admin").await;
            found.push(outcome(state.map(drop)));
            let forced = client.force_unlock("docs:admin").await;
            found.push(outcome(forced.map(drop)));
            drop(lease);
        }
        other => panic!(
            "the README's table has a row this test does not know: {other:?}; teach \
             tests/docs/where_it_runs.rs to build its primitives"
        ),
    }
    let first = found.remove(0);
    for other in &found {
        assert_eq!(
            other.cell,
            first.cell,
            "{row}: its primitives disagree on {}: {first:?} and {other:?}",
            client.store_kind()
        );
    }
    first
}

/// A lock-side result: refused when the store cannot serve it, else it must have run.
fn outcome(result: Result<(), LockError>) -> Found {
    match result {
        Ok(()) => Found::runs(),
        Err(err @ LockError::UnsupportedStore { .. }) => Found::refused(err),
        Err(err) => panic!("an error other than a refusal: {err:?}"),
    }
}

/// A layer's build: refused when the store cannot serve it.
fn layer_outcome(result: Result<(), ConfigError>) -> Found {
    match result {
        Ok(()) => Found::runs(),
        Err(err @ ConfigError::UnsupportedStore(_)) => Found::refused(err),
        Err(err) => panic!("a layer refused for another reason: {err:?}"),
    }
}

/// The capability table in `Capability`'s documentation (src/store/capability.rs): for each
/// capability, "yes" or "no" per column, in `COLUMNS`' order.
fn capability_table() -> Vec<(String, [bool; 4])> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/store/capability.rs");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut rows = Vec::new();
    for line in text.lines() {
        let line = line.trim_start().trim_start_matches("///").trim();
        let Some(rest) = line.strip_prefix("| [`") else {
            continue;
        };
        let Some((name, rest)) = rest.split_once('`') else {
            continue;
        };
        let cells: Vec<&str> = rest.split('|').skip(1).map(str::trim).collect();
        let yes = |i: usize| match cells.get(i) {
            Some(&"yes") => true,
            Some(&"no") => false,
            other => panic!("capability {name}: cell {i} is {other:?}, not yes or no"),
        };
        rows.push((name.to_owned(), [yes(0), yes(1), yes(2), yes(3)]));
    }
    rows
}

/// One client per kind of store, with the README column it belongs to.
struct Stores {
    clients: Vec<(usize, &'static str, Client)>,
    _servers: Vec<RedisServer>,
    _sentinel: SentinelSetup,
}

async fn stores() -> Stores {
    let single = RedisServer::start();
    let quorum_nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = quorum_nodes.iter().map(RedisServer::url).collect();
    let quorum = Client::builder()
        .response_timeout(Duration::from_secs(5))
        .quorum_node_timeout(Duration::from_secs(1))
        .connect_quorum(&urls)
        .await
        .expect("connect_quorum");
    let sentinel = SentinelSetup::start();
    let behind_sentinel = Client::builder()
        .response_timeout(Duration::from_secs(5))
        .connect_sentinel(sentinel.master_name(), sentinel.sentinel_urls())
        .await
        .unwrap_or_else(|e| panic!("connect_sentinel: {e}\n{}", sentinel.logs()));
    let mut servers = quorum_nodes;
    let clients = vec![
        (0, "single primary", connect(&single.url()).await),
        (0, "behind Sentinel", behind_sentinel),
        (
            1,
            "Redis Cluster",
            shared_cluster_client("docs-table").await,
        ),
        (2, "Redlock quorum", quorum),
        (3, "in memory", Client::in_memory()),
    ];
    servers.push(single);
    Stores {
        clients,
        _servers: servers,
        _sentinel: sentinel,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_table_is_what_each_store_refuses() {
    let table = readme_table();
    let stores = stores().await;
    let mut wrong = Vec::new();

    // Every capability is covered, and its row is in the README.
    for &capability in Capability::ALL {
        if let Some(row) = readme_row(capability) {
            assert!(
                table.iter().any(|(label, _)| label == row),
                "{capability:?} belongs to the README row {row:?}, which is not in the table"
            );
        }
    }

    for (label, cells) in &table {
        for (column, name, client) in &stores.clients {
            let found = probe(label, client).await;
            if found.cell != cells[*column] {
                wrong.push(format!(
                    "{label:?} on {name}: the README says {:?}, the code {:?} {}",
                    cells[*column], found.cell, found.why
                ));
            }
        }
    }

    // The capability table in the API docs, against `supports`.
    let capabilities = capability_table();
    for &capability in Capability::ALL {
        let name = format!("{capability:?}");
        let Some((_, cells)) = capabilities.iter().find(|(n, _)| *n == name) else {
            wrong.push(format!(
                "{name} has no row in Capability's documentation table"
            ));
            continue;
        };
        for (column, store, client) in &stores.clients {
            let supported = client.supports(capability).is_ok();
            if supported != cells[*column] {
                wrong.push(format!(
                    "Capability's table says {name} on {store} is {}, supports() says {}",
                    cells[*column], supported
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
