//! Fenced writes to PostgreSQL (feature `postgres`): the same check as
//! [`FencedResource`](super::FencedResource)'s, inside the caller's own transaction, over the
//! caller's [`tokio-postgres`](tokio_postgres) connection.
//!
//! A [`FenceTable`] (by default `distlock_fences(resource text primary key, fence bigint)`)
//! holds the highest fence each resource has accepted. [`FenceTable::check`] raises it in
//! your transaction, before your statements, and fails with [`FencedError::Stale`] when the
//! resource has accepted a higher fence: roll back (drop the transaction). Otherwise the
//! resource's row stays locked until your transaction ends, so your statements and the new
//! fence commit together, and an older holder that comes later (or was waiting on the row)
//! finds the higher fence and is refused.
//!
//! ```no_run
//! # async fn demo(pg: &mut tokio_postgres::Client, client: &distlock::Client) -> Result<(), distlock::FencedError> {
//! use distlock::fenced::postgres::FenceTable;
//!
//! let fences = FenceTable::new();
//! fences.create_table(&*pg).await?; // once, or run `fences.create_table_sql()` in a migration
//!
//! let lease = client.lock("account:9").acquire().await.expect("lock");
//! let fence = lease.fence().await.expect("minted while the lock is held");
//! let tx = pg.transaction().await?;
//! fences.check(&tx, "account:9", fence).await?; // Err(Stale { .. }): the lease expired
//! tx.execute("UPDATE accounts SET balance = balance - 10 WHERE id = 9", &[]).await?;
//! tx.commit().await?;
//!
//! // The same, as one call that begins, checks and commits:
//! fences
//!     .transaction(pg, "account:9", fence, async |tx| {
//!         tx.execute("UPDATE accounts SET balance = balance + 10 WHERE id = 9", &[]).await?;
//!         Ok::<_, distlock::FencedError>(())
//!     })
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Keep fenced transactions short: the resource's row is locked from the check to the commit,
//! so a holder that stalls inside its transaction holds up the next one until it resumes or
//! its connection is closed (`idle_in_transaction_session_timeout`, `lock_timeout` bound
//! that). Under `REPEATABLE READ` or `SERIALIZABLE`, a concurrent holder's commit makes the
//! check fail with a serialization error ([`FencedError::Postgres`]) instead of `Stale`.
//!
//! **Without a guard table**, a row that carries its own fence column can be fenced with SQL
//! alone: `UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2`, where
//! 0 rows updated means stale (or no such row). The guard table does the same for any set of
//! statements, tables and rows, and says which fence won.
//!
//! Fences are stored as `bigint`: a fence above `i64::MAX` is refused
//! ([`FencedError::InvalidInput`]). distlock's fences are microseconds of the store's clock
//! (about 2^51 today), far below that.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, GenericClient, Transaction};

use super::FencedError;
use crate::keys::check_name;

/// The table a [`FenceTable`] uses unless told otherwise.
pub const DEFAULT_TABLE: &str = "distlock_fences";

/// The longest identifier PostgreSQL keeps (`NAMEDATALEN - 1`).
const MAX_IDENTIFIER: usize = 63;

/// A guard table in PostgreSQL: one row per resource, holding the highest fence it accepted.
/// See the [module](self) documentation.
#[derive(Clone, Debug)]
pub struct FenceTable {
    name: String,
    create: String,
    raise: String,
    select: String,
}

impl Default for FenceTable {
    fn default() -> Self {
        Self::with_quoted(DEFAULT_TABLE, &format!("\"{DEFAULT_TABLE}\""))
    }
}

impl FenceTable {
    /// The table [`DEFAULT_TABLE`] (`distlock_fences`), in the connection's search path.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Another table: `name` or `schema.name`, each part a letter or `_` followed by letters,
    /// digits and `_`, at most 63 bytes.
    ///
    /// # Errors
    /// [`FencedError::InvalidInput`] for any other name.
    pub fn named(name: &str) -> Result<Self, FencedError> {
        let parts: Vec<&str> = name.split('.').collect();
        let valid = |part: &&str| {
            let mut chars = part.chars();
            part.len() <= MAX_IDENTIFIER
                && chars
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if parts.len() > 2 || !parts.iter().all(valid) {
            return Err(FencedError::InvalidInput {
                reason: format!(
                    "table name {name:?}: use `name` or `schema.name`, each part a letter or \
                     `_` followed by letters, digits and `_`, at most {MAX_IDENTIFIER} bytes"
                ),
            });
        }
        let quoted: Vec<String> = parts.iter().map(|p| format!("\"{p}\"")).collect();
        Ok(Self::with_quoted(name, &quoted.join(".")))
    }

    fn with_quoted(name: &str, table: &str) -> Self {
        Self {
            name: name.to_owned(),
            create: format!(
                "CREATE TABLE IF NOT EXISTS {table} (resource text PRIMARY KEY, fence bigint NOT NULL)"
            ),
            raise: format!(
                "INSERT INTO {table} AS guard (resource, fence) VALUES ($1, $2) \
                 ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence \
                 WHERE guard.fence <= EXCLUDED.fence RETURNING guard.fence"
            ),
            select: format!("SELECT fence FROM {table} WHERE resource = $1"),
        }
    }

    /// The table's name, as given.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The statement that creates the table if it does not exist, for a migration tool.
    #[must_use]
    pub fn create_table_sql(&self) -> &str {
        &self.create
    }

    /// Creates the table if it does not exist.
    ///
    /// # Errors
    /// [`FencedError::Postgres`].
    pub async fn create_table(&self, client: &impl GenericClient) -> Result<(), FencedError> {
        client.batch_execute(&self.create).await?;
        Ok(())
    }

    /// Raises `resource`'s fence to `fence` in `transaction`, or refuses: run it before the
    /// transaction's statements, and commit them only if it succeeded. An equal fence is
    /// accepted (one holder, several transactions). The resource's row stays locked until
    /// the transaction ends.
    ///
    /// # Errors
    /// [`FencedError::Stale`] when the resource has accepted a higher fence (roll back: drop
    /// the transaction); [`FencedError::InvalidName`] for an empty or over-long resource;
    /// [`FencedError::InvalidInput`] for a fence above `i64::MAX`;
    /// [`FencedError::Postgres`].
    pub async fn check(
        &self,
        transaction: &Transaction<'_>,
        resource: &str,
        fence: u64,
    ) -> Result<(), FencedError> {
        check_name(resource)?;
        let offered = i64::try_from(fence).map_err(|_| FencedError::InvalidInput {
            reason: format!("fence {fence} does not fit PostgreSQL's bigint"),
        })?;
        let params: [(&(dyn ToSql + Sync), Type); 2] =
            [(&resource, Type::TEXT), (&offered, Type::INT8)];
        if transaction
            .query_typed_opt(&self.raise, &params)
            .await?
            .is_some()
        {
            return Ok(());
        }
        // Refused: the row holds a higher fence, and is locked by this transaction now, so a
        // new statement reads the value that won.
        let last = self.read(transaction, resource).await?.ok_or_else(|| {
            FencedError::Store(crate::error::StoreError::Protocol {
                message: format!(
                    "{}: the fence of `{resource}` was refused but its row is missing",
                    self.name
                ),
            })
        })?;
        Err(FencedError::Stale {
            resource: resource.to_owned(),
            last,
            offered: fence,
        })
    }

    /// The highest fence `resource` has accepted (`None`: never checked).
    ///
    /// # Errors
    /// [`FencedError::InvalidName`]; [`FencedError::Postgres`].
    pub async fn last_fence(
        &self,
        client: &impl GenericClient,
        resource: &str,
    ) -> Result<Option<u64>, FencedError> {
        check_name(resource)?;
        self.read(client, resource).await
    }

    async fn read(
        &self,
        client: &impl GenericClient,
        resource: &str,
    ) -> Result<Option<u64>, FencedError> {
        let row = client
            .query_typed_opt(&self.select, &[(&resource, Type::TEXT)])
            .await?;
        row.map(|row| {
            let fence: i64 = row.try_get(0)?;
            // Only `check` writes the table, with fences from a u64; a negative one was written
            // by someone else and is below every fence.
            Ok(u64::try_from(fence).unwrap_or(0))
        })
        .transpose()
    }

    /// Begins a transaction on `client`, [`check`](Self::check)s `resource` under `fence`,
    /// runs `body` in it and commits if `body` succeeded. A stale fence or an error of `body`
    /// rolls everything back.
    ///
    /// # Errors
    /// Whatever `body` returns; [`FencedError::Stale`] and the other errors of `check`, and
    /// [`FencedError::Postgres`] from the begin or the commit, converted to `E`.
    pub async fn transaction<T, E, F>(
        &self,
        client: &mut Client,
        resource: &str,
        fence: u64,
        body: F,
    ) -> Result<T, E>
    where
        F: AsyncFnOnce(&Transaction<'_>) -> Result<T, E>,
        E: From<FencedError>,
    {
        let transaction = client
            .transaction()
            .await
            .map_err(|e| E::from(FencedError::from(e)))?;
        self.check(&transaction, resource, fence).await?;
        let value = body(&transaction).await?;
        transaction
            .commit()
            .await
            .map_err(|e| E::from(FencedError::from(e)))?;
        Ok(value)
    }
}
