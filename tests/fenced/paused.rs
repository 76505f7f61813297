//! TESTPLAN 48: a holder paused past its lease writes after its successor.
//!
//! The holder is a child process (this test binary run again, `child_entry`): it takes the
//! lock, reports its fence, and is SIGSTOPped by the parent before it writes. The parent waits
//! for its lease to run out, takes the lock itself (a newer fence) and writes to both
//! resources: a fenced resource on the Redis store and a row in PostgreSQL guarded by the
//! fence table. Then it SIGCONTs the child, which writes to both under its old fence, as a
//! holder that cannot know it was paused would, and reports what it was told. Both late
//! writes must be refused with the successor's fence, and the data must show only the
//! successor's writes. On a single primary and on a Cluster; the same sequence in one process
//! on the in-memory store.

use std::time::Duration;

use distlock::fenced::postgres::FenceTable;
use distlock::{Client, FencedError};
use redis::AsyncCommands as _;

use crate::pg::{self, PostgresServer};
use crate::stores::{self, Store};
use crate::support::child::{self, ChildProcess};

/// The holder's lease: short, so the test is quick; the watchdog renews it until the pause.
const TTL: Duration = Duration::from_millis(600);
/// How long the child waits after reporting its fence before it writes: the parent stops it
/// well within this, and on SIGCONT the wait has long elapsed.
const STALL_POINT: Duration = Duration::from_secs(3);
const CHILD_ENTRY: &str = "paused::child_entry";

/// Creates the two tables the holders write to.
async fn prepare_postgres(pg: &tokio_postgres::Client) -> FenceTable {
    let fences = FenceTable::new();
    fences.create_table(pg).await.expect("guard table");
    pg.batch_execute(
        "CREATE TABLE IF NOT EXISTS accounts (id text PRIMARY KEY, owner text NOT NULL, fence bigint NOT NULL)",
    )
    .await
    .expect("accounts table");
    fences
}

/// One holder's writes: the Redis resource, then the PostgreSQL row, both under `fence`.
/// Returns what each said.
async fn write_both(
    client: &Client,
    pg: &mut tokio_postgres::Client,
    name: &str,
    owner: &str,
    fence: u64,
) -> (Result<(), FencedError>, Result<(), FencedError>) {
    let on_redis = match client.fenced(name) {
        Ok(resource) => {
            resource
                .update(fence)
                .set("owner", owner)
                .set("fence", fence.to_string())
                .apply()
                .await
        }
        Err(err) => Err(err),
    };
    let stored = i64::try_from(fence).expect("fences fit in bigint");
    let on_postgres = FenceTable::new()
        .transaction(pg, name, fence, async |tx| {
            tx.execute(
                "INSERT INTO accounts (id, owner, fence) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, fence = EXCLUDED.fence",
                &[&name, &owner, &stored],
            )
            .await?;
            Ok::<_, FencedError>(())
        })
        .await;
    (on_redis, on_postgres)
}

/// How a child reports a write's outcome on one line.
fn outcome(result: &Result<(), FencedError>) -> String {
    match result {
        Ok(()) => "accepted".to_owned(),
        Err(FencedError::Stale { last, offered, .. }) => format!("stale {last} {offered}"),
        Err(other) => format!("error {other}"),
    }
}

/// The child: `holder|<redis|cluster>|<lock name>|<postgres config>`, with the Redis URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the parent tests of this module as a child process"]
async fn child_entry() {
    let Some((role, url)) = child::role() else {
        return;
    };
    let parts: Vec<&str> = role.splitn(4, '|').collect();
    let ["holder", topology, name, pg_config] = parts[..] else {
        panic!("unknown role {role:?}")
    };
    let client = match topology {
        "redis" => stores::connect(&url).await,
        "cluster" => Client::builder()
            .response_timeout(Duration::from_secs(3))
            .connect_cluster(url.split(','))
            .await
            .expect("connect to the cluster"),
        other => panic!("unknown topology {other}"),
    };
    let mut pg = pg::connect(pg_config).await.expect("connect to PostgreSQL");
    let lease = client.lock(name).ttl(TTL).acquire().await.expect("lock");
    child::say(&format!("FENCE {}", lease.fence().await.expect("fence")));
    // The parent stops this process here, past the lease's ttl.
    tokio::time::sleep(STALL_POINT).await;
    // Resumed: write as if nothing happened (a paused process cannot tell).
    let (on_redis, on_postgres) = write_both(
        &client,
        &mut pg,
        name,
        "paused",
        lease.fence().await.expect("fence"),
    )
    .await;
    child::say(&format!("REDIS {}", outcome(&on_redis)));
    child::say(&format!("POSTGRES {}", outcome(&on_postgres)));
    // By now its watchdog has found the lease gone too.
    tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("the lease reports its loss");
    child::say("LOST");
}

fn parse_outcome(line: &str, prefix: &str) -> String {
    line.strip_prefix(prefix)
        .map(str::trim)
        .unwrap_or_else(|| panic!("{line:?} does not start with {prefix:?}"))
        .to_owned()
}

async fn paused_holder_is_refused(store: Store, topology: &str, url: String, name: &str) {
    let postgres = PostgresServer::start();
    let mut pg = postgres.connect().await;
    let fences = prepare_postgres(&pg).await;

    let role = format!("holder|{topology}|{name}|{}", postgres.config());
    let holder = ChildProcess::spawn(CHILD_ENTRY, &role, &url);
    let line = holder.expect_line("FENCE ", Duration::from_secs(60));
    holder.signal(libc::SIGSTOP);
    let stale_fence: u64 = parse_outcome(&line, "FENCE ").parse().expect("fence");

    // The successor gets the lock once the stopped holder's lease has run out...
    let successor = store
        .client
        .lock(name)
        .ttl(Duration::from_secs(10))
        .wait(TTL * 10)
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("the successor gets the lock: {e}\n{}", store.log()));
    assert!(successor.fence().await.expect("fence") > stale_fence);
    // ...and writes to both resources.
    let (on_redis, on_postgres) = write_both(
        &store.client,
        &mut pg,
        name,
        "successor",
        successor.fence().await.expect("fence"),
    )
    .await;
    on_redis.unwrap_or_else(|e| panic!("the successor's Redis write: {e}\n{}", store.log()));
    on_postgres
        .unwrap_or_else(|e| panic!("the successor's PostgreSQL write: {e}\n{}", postgres.log()));

    // The paused holder resumes and writes under its old fence: refused on both.
    holder.signal(libc::SIGCONT);
    let expected = format!(
        "stale {} {stale_fence}",
        successor.fence().await.expect("fence")
    );
    let on_redis = parse_outcome(
        &holder.expect_line("REDIS ", Duration::from_secs(30)),
        "REDIS ",
    );
    assert_eq!(on_redis, expected, "the late Redis write\n{}", store.log());
    let on_postgres = parse_outcome(
        &holder.expect_line("POSTGRES ", Duration::from_secs(30)),
        "POSTGRES ",
    );
    assert_eq!(
        on_postgres,
        expected,
        "the late PostgreSQL write\n{}",
        postgres.log()
    );
    holder.expect_line("LOST", Duration::from_secs(30));
    holder.wait_success(Duration::from_secs(30));

    // The data shows only the successor's writes: through the library...
    let snapshot = store
        .client
        .fenced(name)
        .expect("fenced")
        .read()
        .await
        .expect("read");
    assert_eq!(
        snapshot.fence,
        Some(successor.fence().await.expect("fence"))
    );
    assert_eq!(snapshot.text("owner"), Some("successor"));
    assert_eq!(
        snapshot.text("fence"),
        Some(successor.fence().await.expect("fence").to_string().as_str())
    );
    // ...in Redis itself...
    let values_key = format!("distlock:fenced:{{{name}}}");
    if let Some(mut raw) = store.raw(&values_key).await {
        let owner: Option<String> = raw.hget(&values_key, "owner").await.expect("HGET");
        assert_eq!(owner.as_deref(), Some("successor"));
    }
    // ...and in PostgreSQL.
    let rows = pg
        .query("SELECT owner, fence FROM accounts WHERE id = $1", &[&name])
        .await
        .expect("select");
    assert_eq!(rows.len(), 1);
    let (owner, fence): (String, i64) = (rows[0].get(0), rows[0].get(1));
    assert_eq!(owner, "successor");
    assert_eq!(
        u64::try_from(fence).ok(),
        Some(successor.fence().await.expect("fence"))
    );
    assert_eq!(
        fences.last_fence(&pg, name).await.expect("read"),
        Some(successor.fence().await.expect("fence"))
    );
    successor.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_refused_on_a_single_primary() {
    let store = Store::redis().await;
    let url = match &store.backing {
        stores::Backing::Redis(server) => server.url(),
        _ => unreachable!(),
    };
    paused_holder_is_refused(store, "redis", url, "paused:account:r").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_refused_on_a_cluster() {
    let store = Store::cluster().await;
    let url = match &store.backing {
        stores::Backing::Cluster(cluster) => cluster.seed_urls().join(","),
        _ => unreachable!(),
    };
    paused_holder_is_refused(store, "cluster", url, "paused:account:c").await;
}

/// In memory the store is one process's, so the pause is a task that stalls past its lease
/// (its watchdog off, as a frozen process's would be): the same refusals, from the in-memory
/// store and from PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holder_is_refused_in_memory() {
    let postgres = PostgresServer::start();
    let mut pg = postgres.connect().await;
    prepare_postgres(&pg).await;
    let client = Client::in_memory();
    let name = "paused:account:m";
    let stalled = client
        .lock(name)
        .ttl(Duration::from_millis(100))
        .watchdog(false)
        .acquire()
        .await
        .expect("lock");
    // Minted while it held the lock, before it stalled (a lease that stalls first gets no
    // fence at all once its lock has gone).
    let stalled_fence = stalled.fence().await.expect("fence");
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        matches!(
            stalled.fence().await,
            Ok(fence) if fence == stalled_fence
        ),
        "a minted fence is kept"
    );
    let successor = client.lock(name).acquire().await.expect("the expired lock");
    let successor_fence = successor.fence().await.expect("fence");
    let (on_redis, on_postgres) =
        write_both(&client, &mut pg, name, "successor", successor_fence).await;
    on_redis.expect("successor, memory");
    on_postgres.expect("successor, PostgreSQL");
    let (on_memory, on_postgres) =
        write_both(&client, &mut pg, name, "paused", stalled_fence).await;
    let expected = format!("stale {successor_fence} {stalled_fence}");
    assert_eq!(outcome(&on_memory), expected);
    assert_eq!(outcome(&on_postgres), expected);
    let doc = client.fenced(name).expect("fenced");
    assert_eq!(
        doc.read().await.expect("read").text("owner"),
        Some("successor")
    );
    let owner: String = pg
        .query_one("SELECT owner FROM accounts WHERE id = $1", &[&name])
        .await
        .expect("select")
        .get(0);
    assert_eq!(owner, "successor");
    drop(stalled);
}
