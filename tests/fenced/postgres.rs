//! The guard table (`distlock::fenced::postgres::FenceTable`) on a real PostgreSQL server:
//! the check in the caller's transaction, rollback, and transactions on one resource at once.

use std::time::Duration;

use distlock::FencedError;
use distlock::fenced::postgres::{DEFAULT_TABLE, FenceTable};

use crate::pg::PostgresServer;

async fn setup(server: &PostgresServer) -> (tokio_postgres::Client, FenceTable) {
    let pg = server.connect().await;
    let fences = FenceTable::new();
    fences
        .create_table(&pg)
        .await
        .expect("create the guard table");
    // Twice is fine (IF NOT EXISTS).
    fences.create_table(&pg).await.expect("create again");
    pg.batch_execute(
        "CREATE TABLE docs (id text PRIMARY KEY, owner text NOT NULL, fence bigint NOT NULL)",
    )
    .await
    .expect("create docs");
    (pg, fences)
}

/// Writes `owner` into doc `id` under `fence`, in one fenced transaction.
async fn write(
    fences: &FenceTable,
    pg: &mut tokio_postgres::Client,
    id: &str,
    owner: &str,
    fence: u64,
) -> Result<(), FencedError> {
    // The doc's own copy of the fence (the check refuses a fence above i64::MAX first).
    let stored = i64::try_from(fence).unwrap_or(i64::MAX);
    fences
        .transaction(pg, id, fence, async |tx| {
            tx.execute(
                "INSERT INTO docs (id, owner, fence) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, fence = EXCLUDED.fence",
                &[&id, &owner, &stored],
            )
            .await?;
            Ok::<_, FencedError>(())
        })
        .await
}

async fn owner(pg: &tokio_postgres::Client, id: &str) -> Option<String> {
    pg.query_opt("SELECT owner FROM docs WHERE id = $1", &[&id])
        .await
        .expect("select")
        .map(|row| row.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lower_fences_are_refused_and_roll_the_statements_back() {
    let server = PostgresServer::start();
    let (mut pg, fences) = setup(&server).await;
    assert_eq!(fences.name(), DEFAULT_TABLE);
    assert_eq!(fences.last_fence(&pg, "doc:1").await.expect("read"), None);

    write(&fences, &mut pg, "doc:1", "a", 10)
        .await
        .expect("first");
    write(&fences, &mut pg, "doc:1", "a2", 10)
        .await
        .expect("equal fence");
    let err = write(&fences, &mut pg, "doc:1", "old", 9)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FencedError::Stale { resource, last: 10, offered: 9 } if resource == "doc:1"),
        "{err:?}\n{}",
        server.log()
    );
    assert_eq!(owner(&pg, "doc:1").await.as_deref(), Some("a2"));
    write(&fences, &mut pg, "doc:1", "b", 11)
        .await
        .expect("higher");
    assert_eq!(owner(&pg, "doc:1").await.as_deref(), Some("b"));
    assert_eq!(
        fences.last_fence(&pg, "doc:1").await.expect("read"),
        Some(11)
    );

    // By hand: a refused check, then the transaction is dropped: nothing of it stays.
    let tx = pg.transaction().await.expect("begin");
    tx.execute("UPDATE docs SET owner = 'sneaky' WHERE id = 'doc:1'", &[])
        .await
        .expect("update");
    let err = fences.check(&tx, "doc:1", 5).await.unwrap_err();
    assert!(err.is_stale(), "{err:?}");
    drop(tx);
    assert_eq!(owner(&pg, "doc:1").await.as_deref(), Some("b"));

    // A body that fails rolls the raised fence back too: the next writer is not refused
    // for a fence that never committed.
    let err = fences
        .transaction(&mut pg, "doc:1", 50, async |tx| {
            tx.execute("UPDATE docs SET owner = 'half' WHERE id = 'doc:1'", &[])
                .await?;
            Err::<(), _>(FencedError::InvalidInput {
                reason: "the body gave up".to_owned(),
            })
        })
        .await
        .unwrap_err();
    assert!(matches!(err, FencedError::InvalidInput { .. }));
    assert_eq!(
        fences.last_fence(&pg, "doc:1").await.expect("read"),
        Some(11)
    );
    assert_eq!(owner(&pg, "doc:1").await.as_deref(), Some("b"));
    write(&fences, &mut pg, "doc:1", "c", 12)
        .await
        .expect("after a rollback");

    // Resources are independent, and any text names one.
    write(&fences, &mut pg, "doc:{2}'; --", "x", 1)
        .await
        .expect("another resource");
    assert_eq!(owner(&pg, "doc:{2}'; --").await.as_deref(), Some("x"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_input_and_table_names() {
    let server = PostgresServer::start();
    let (mut pg, fences) = setup(&server).await;
    let big = u64::try_from(i64::MAX).expect("positive") + 1;
    let err = write(&fences, &mut pg, "doc", "x", big).await.unwrap_err();
    assert!(matches!(err, FencedError::InvalidInput { .. }), "{err:?}");
    let tx = pg.transaction().await.expect("begin");
    let err = fences.check(&tx, "", 1).await.unwrap_err();
    assert!(matches!(err, FencedError::InvalidName(_)), "{err:?}");
    drop(tx);
    let max = u64::try_from(i64::MAX).expect("positive");
    write(&fences, &mut pg, "doc", "max", max)
        .await
        .expect("i64::MAX fits");
    assert_eq!(
        fences.last_fence(&pg, "doc").await.expect("read"),
        Some(max)
    );

    for bad in [
        "",
        "a b",
        "x;DROP TABLE docs",
        "1abc",
        "a.b.c",
        "\"q\"",
        &"n".repeat(64),
    ] {
        assert!(
            matches!(
                FenceTable::named(bad),
                Err(FencedError::InvalidInput { .. })
            ),
            "{bad:?}"
        );
    }
    pg.batch_execute("CREATE SCHEMA app").await.expect("schema");
    let custom = FenceTable::named("app.Guards_2").expect("schema.table");
    assert_eq!(custom.name(), "app.Guards_2");
    assert!(custom.create_table_sql().contains("\"app\".\"Guards_2\""));
    custom.create_table(&pg).await.expect("create");
    let tx = pg.transaction().await.expect("begin");
    custom.check(&tx, "doc", 3).await.expect("check");
    tx.commit().await.expect("commit");
    assert_eq!(custom.last_fence(&pg, "doc").await.expect("read"), Some(3));
    // The default table is untouched by it.
    assert_eq!(
        fences.last_fence(&pg, "doc").await.expect("read"),
        Some(max)
    );
}

/// Transactions on one resource at once: the one that checked first holds the resource's
/// row until it ends; a lower fence waiting behind it is refused once it commits, a higher
/// one goes through after it. So the statements of a refused writer never land, whatever the
/// timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_on_one_resource_are_ordered_by_their_fences() {
    let server = PostgresServer::start();
    let (mut pg, fences) = setup(&server).await;
    write(&fences, &mut pg, "doc", "start", 1)
        .await
        .expect("seed");

    // Holder 11 checks and keeps its transaction open.
    let holder = pg.transaction().await.expect("begin");
    fences.check(&holder, "doc", 11).await.expect("check 11");
    holder
        .execute(
            "UPDATE docs SET owner = 'eleven', fence = 11 WHERE id = 'doc'",
            &[],
        )
        .await
        .expect("update");

    // Meanwhile an older holder (10) and a newer one (12) try.
    let older = {
        let server_config = server.config();
        let fences = fences.clone();
        tokio::spawn(async move {
            let mut pg = crate::pg::connect(&server_config).await.expect("connect");
            write(&fences, &mut pg, "doc", "ten", 10).await
        })
    };
    let newer = {
        let server_config = server.config();
        let fences = fences.clone();
        tokio::spawn(async move {
            let mut pg = crate::pg::connect(&server_config).await.expect("connect");
            write(&fences, &mut pg, "doc", "twelve", 12).await
        })
    };
    // Both wait on the row lock (neither can finish while 11 holds it).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!older.is_finished() && !newer.is_finished());
    holder.commit().await.expect("commit 11");

    let older = older.await.expect("task");
    assert!(
        matches!(older, Err(FencedError::Stale { offered: 10, last, .. }) if last >= 11),
        "{older:?}"
    );
    newer
        .await
        .expect("task")
        .expect("12 goes through after 11");
    assert_eq!(owner(&pg, "doc").await.as_deref(), Some("twelve"));
    assert_eq!(fences.last_fence(&pg, "doc").await.expect("read"), Some(12));
}
