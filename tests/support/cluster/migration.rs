//! Online slot migration (`SETSLOT IMPORTING/MIGRATING`, `MIGRATE ... KEYS`, `SETSLOT NODE`):
//! [`RedisCluster::migrate_slot`], or [`RedisCluster::begin_migration`] and a
//! [`SlotMigration`] moved step by step, so that clients see `ASK` and `MOVED` meanwhile.

use std::time::{Duration, Instant};

use super::{ClusterNode, ClusterView, RedisCluster, SETTLE_TIMEOUT, SLOTS, probe};

/// Overall bound of the key-moving part of a slot migration.
const MIGRATE_DEADLINE: Duration = Duration::from_secs(60);

/// `MIGRATE`'s own I/O timeout, in milliseconds.
const MIGRATE_IO_TIMEOUT_MS: u64 = 5000;

/// Keys per `CLUSTER GETKEYSINSLOT` / `MIGRATE ... KEYS` round.
const MIGRATE_BATCH: usize = 100;

impl RedisCluster {
    // -- slot migration ------------------------------------------------------

    /// Moves `slot` (and its keys) from its current master to master `to`
    /// with the online resharding protocol, and waits until the cluster has
    /// settled with `to` owning it. Clients may keep using the slot meanwhile
    /// (they get `ASK`, then `MOVED`). Returns how many keys were handed to
    /// `MIGRATE`.
    ///
    /// # Panics
    ///
    /// If `to` is not a live master, already owns the slot, or a step fails
    /// or times out.
    pub async fn migrate_slot(&self, slot: u16, to: &ClusterNode) -> usize {
        self.begin_migration(slot, to).await.finish().await
    }

    /// First half of [`migrate_slot`](Self::migrate_slot): `CLUSTER SETSLOT
    /// <slot> IMPORTING <source>` on `to`, then `MIGRATING <to>` on the
    /// source. No key has moved yet; move some with
    /// [`SlotMigration::move_keys`], and always end with
    /// [`SlotMigration::finish`].
    ///
    /// # Panics
    ///
    /// As [`migrate_slot`](Self::migrate_slot).
    pub async fn begin_migration(&self, slot: u16, to: &ClusterNode) -> SlotMigration<'_> {
        self.assert_not_shared("migrate_slot");
        assert!(slot < SLOTS, "slot {slot} out of range");
        let source = self.master_of_slot(slot).await;
        assert!(
            source.id != to.id,
            "slot {slot} already belongs to {} ({})",
            to.addr(),
            to.id
        );
        assert!(
            self.masters().await.iter().any(|m| m.id == to.id),
            "migration target {} is not a live master",
            to.addr()
        );
        // Target first: if the source said ASK before the target imports,
        // the target would answer MOVED back to the source.
        setslot(to, slot, "IMPORTING", &source.id)
            .await
            .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} IMPORTING on {}: {e}", to.addr()));
        setslot(source, slot, "MIGRATING", &to.id)
            .await
            .unwrap_or_else(|e| {
                panic!("CLUSTER SETSLOT {slot} MIGRATING on {}: {e}", source.addr())
            });
        SlotMigration {
            cluster: self,
            slot,
            source,
            target: self.node(&to.id),
            moved: 0,
        }
    }
}

/// A slot migration in progress; see [`RedisCluster::begin_migration`].
/// Always [`finish`](Self::finish) it: dropping it leaves the slot open.
#[derive(Debug)]
#[must_use = "a slot migration must be finished"]
pub struct SlotMigration<'a> {
    cluster: &'a RedisCluster,
    slot: u16,
    source: &'a ClusterNode,
    target: &'a ClusterNode,
    moved: usize,
}

impl<'a> SlotMigration<'a> {
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The master the slot is leaving.
    pub fn source(&self) -> &'a ClusterNode {
        self.source
    }

    /// The master the slot is moving to.
    pub fn target(&self) -> &'a ClusterNode {
        self.target
    }

    /// Keys handed to `MIGRATE` so far.
    pub fn moved(&self) -> usize {
        self.moved
    }

    /// Moves up to `max` keys of the slot from the source to the target
    /// (`CLUSTER GETKEYSINSLOT` + `MIGRATE 127.0.0.1 port "" 0 5000 REPLACE
    /// KEYS ...`, in batches of 100, retrying I/O errors for up to 60 s).
    /// Returns how many keys were moved (0: none left).
    ///
    /// # Panics
    ///
    /// If `MIGRATE` keeps failing.
    pub async fn move_keys(&mut self, max: usize) -> usize {
        let mut conn = self.source.conn().await;
        let deadline = Instant::now() + MIGRATE_DEADLINE;
        let mut moved = 0;
        while moved < max {
            let batch = (max - moved).min(MIGRATE_BATCH);
            let keys: Vec<Vec<u8>> = match redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(self.slot)
                .arg(batch)
                .query_async(&mut conn)
                .await
            {
                Ok(keys) => keys,
                Err(e) => panic!(
                    "CLUSTER GETKEYSINSLOT {} on {}: {e}",
                    self.slot,
                    self.source.addr()
                ),
            };
            if keys.is_empty() {
                break;
            }
            let result: redis::RedisResult<redis::Value> = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.target.port)
                .arg("")
                .arg(0)
                .arg(MIGRATE_IO_TIMEOUT_MS)
                .arg("REPLACE")
                .arg("KEYS")
                .arg(&keys)
                .query_async(&mut conn)
                .await;
            match result {
                // `OK`, or `NOKEY` if they all expired meanwhile.
                Ok(_) => moved += keys.len(),
                Err(e) if Instant::now() < deadline => {
                    eprintln!(
                        "cluster harness: MIGRATE of slot {} from {} to {} failed, retrying: {e}",
                        self.slot,
                        self.source.addr(),
                        self.target.addr()
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!(
                    "MIGRATE of slot {} from {} to {} kept failing for {MIGRATE_DEADLINE:?}: {e}\n{}",
                    self.slot,
                    self.source.addr(),
                    self.target.addr(),
                    self.cluster.describe().await
                ),
            }
        }
        self.moved += moved;
        moved
    }

    /// Moves the remaining keys, assigns the slot to the target (`CLUSTER
    /// SETSLOT <slot> NODE <target>` on the target, then the source, then the
    /// other masters) and waits until the cluster has settled with every live
    /// node agreeing. Returns the number of keys moved in total.
    ///
    /// # Panics
    ///
    /// If a step fails or the cluster does not settle in time.
    pub async fn finish(mut self) -> usize {
        let cluster = self.cluster;
        let (slot, source, target) = (self.slot, self.source, self.target);
        let deadline = Instant::now() + MIGRATE_DEADLINE;
        self.move_keys(usize::MAX).await;
        if let Err(e) = setslot(target, slot, "NODE", &target.id).await {
            panic!(
                "CLUSTER SETSLOT {slot} NODE on target {}: {e}",
                target.addr()
            );
        }
        // The source refuses while it still holds keys of the slot (none can
        // appear while it is MIGRATING, but be safe).
        loop {
            match setslot(source, slot, "NODE", &target.id).await {
                Ok(()) => break,
                Err(e) if e.contains("still hold keys") && Instant::now() < deadline => {
                    self.move_keys(usize::MAX).await;
                }
                Err(e) => panic!(
                    "CLUSTER SETSLOT {slot} NODE on source {}: {e}",
                    source.addr()
                ),
            }
        }
        for master in cluster.masters().await {
            if master.id != source.id
                && master.id != target.id
                && let Err(e) = setslot(master, slot, "NODE", &target.id).await
            {
                panic!("CLUSTER SETSLOT {slot} NODE on {}: {e}", master.addr());
            }
        }
        let owned_by_target = |view: &ClusterView| match view.owner_of(slot) {
            Some(owner) if owner.id == target.id => Ok(()),
            other => Err(format!(
                "slot {slot} still owned by {:?}",
                other.map(|o| o.port)
            )),
        };
        if let Err(reason) = cluster
            .try_wait_settled(SETTLE_TIMEOUT, owned_by_target)
            .await
        {
            panic!(
                "the cluster did not settle after moving slot {slot} to {}: {reason}\n{}",
                target.addr(),
                cluster.describe().await
            );
        }
        self.moved
    }
}

/// `CLUSTER SETSLOT <slot> <subcommand> <node id>` on `node`.
async fn setslot(node: &ClusterNode, slot: u16, subcommand: &str, id: &str) -> Result<(), String> {
    probe::<String>(
        node.addr(),
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(subcommand)
            .arg(id),
    )
    .await
    .map(drop)
}
