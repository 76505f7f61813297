//! The single-target route: one primary (fixed, or followed through Sentinel). Every item of a
//! batch goes in one pipelined write on the primary's multiplexed connection, whatever its
//! slot: one script call for the batch, or (acquires) a plain `SET NX PX` per uncontended item
//! and one script call for the others (see `AcquireRounds`).
//! Writes that wait for replicas go on lanes of their own (`lanes.rs`), batched apart from the
//! others, one batcher per requirement, so a write never waits for a `WAIT` it did not ask for.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::Value;

use super::lanes::Lanes;
use crate::error::StoreError;
use crate::store::batch::{Batch, Batcher, batcher};
use crate::store::connect::PrimaryConn;
use crate::store::ratelimit::RateReply;
use crate::store::ratelimit::script::{RateItem, Rates};
use crate::store::scripts::acquire::{AcquireItem, AcquireReply, Acquires, AcquiresOnConn};
use crate::store::scripts::mint::{MintItem, MintReply, Mints};
use crate::store::scripts::release::{self, ReleaseItem, Releases};
use crate::store::scripts::renew::{self, RenewItem};
use crate::store::scripts::{Calls, OnConn, Ownership, Publish, Replicas};

pub(crate) struct Single {
    conn: PrimaryConn,
    acquires: Batcher<AcquiresOnConn<PrimaryConn>>,
    releases: Batcher<OnConn<Releases, PrimaryConn>>,
    mints: Batcher<OnConn<Mints, PrimaryConn>>,
    rates: Batcher<OnConn<Rates, PrimaryConn>>,
    lanes: Lanes,
    /// Acquires that wait for replicas, one batcher per requirement (usually one).
    acked: Mutex<Vec<(Replicas, Batcher<AckedAcquires>)>>,
    timeout: Duration,
}

impl Single {
    /// Over `conn`, with `lanes` (spare connections to the same primary) for writes that wait
    /// for replicas; none: they share `conn`.
    pub(crate) fn new(conn: PrimaryConn, lanes: Vec<PrimaryConn>, timeout: Duration) -> Self {
        Self {
            acquires: batcher(
                AcquiresOnConn {
                    conn: conn.clone(),
                    publish: Publish::Plain,
                },
                timeout,
            ),
            mints: OnConn::plain(Mints, conn.clone(), timeout),
            releases: OnConn::plain(
                Releases {
                    publish: Publish::Plain,
                },
                conn.clone(),
                timeout,
            ),
            rates: OnConn::plain(Rates, conn.clone(), timeout),
            lanes: Lanes::new(lanes, conn.clone()),
            acked: Mutex::new(Vec::new()),
            conn,
            timeout,
        }
    }

    pub(crate) fn conn(&self) -> &PrimaryConn {
        &self.conn
    }

    pub(crate) async fn acquire(&self, item: AcquireItem) -> Result<AcquireReply, StoreError> {
        match item.replicas {
            None => self.acquires.run(item).await?,
            Some(replicas) => self.acked(replicas).run(item).await,
        }
    }

    pub(crate) async fn mint(&self, item: MintItem) -> Result<MintReply, StoreError> {
        self.mints.run(item).await
    }

    pub(crate) async fn release(&self, item: ReleaseItem) -> Result<Ownership, StoreError> {
        self.releases.run(item).await
    }

    pub(crate) async fn rate_limit(&self, item: RateItem) -> Result<RateReply, StoreError> {
        self.rates.run(item).await
    }

    /// Renewals without a replica requirement in one call on the shared connection; those
    /// with one on a lane, one call per requirement; all at once.
    pub(crate) async fn renew(
        &self,
        items: &[RenewItem<'_>],
    ) -> Result<Vec<Ownership>, StoreError> {
        if items.iter().all(|item| item.replicas.is_none()) {
            return renew::run(&self.conn, items).await;
        }
        let mut groups: Vec<(Option<Replicas>, Vec<usize>)> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match groups.iter_mut().find(|(r, _)| *r == item.replicas) {
                Some((_, indices)) => indices.push(i),
                None => groups.push((item.replicas, vec![i])),
            }
        }
        let calls = groups.into_iter().map(|(replicas, indices)| async move {
            let group: Vec<RenewItem<'_>> = indices.iter().map(|&i| items[i].clone()).collect();
            let held = match replicas {
                None => renew::run(&self.conn, &group).await,
                Some(_) => renew::run(&self.lanes, &group).await,
            };
            held.map(|held| (indices, held))
        });
        let mut answers = vec![Ownership::Expired; items.len()];
        for result in futures_util::future::join_all(calls).await {
            let (indices, held) = result?;
            for (i, h) in indices.into_iter().zip(held) {
                answers[i] = h;
            }
        }
        Ok(answers)
    }

    /// The batcher of acquires that need `replicas`.
    fn acked(&self, replicas: Replicas) -> Batcher<AckedAcquires> {
        let mut acked = self.acked.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, batcher)) = acked.iter().find(|(r, _)| *r == replicas) {
            return batcher.clone();
        }
        let made = batcher(
            AckedAcquires {
                lanes: self.lanes.clone(),
                shared: self.conn.clone(),
                replicas,
            },
            self.timeout,
        );
        acked.push((replicas, made.clone()));
        made
    }
}

/// Acquires that all need `replicas`: one call and its `WAIT` on a lane per batch.
#[derive(Clone)]
struct AckedAcquires {
    lanes: Lanes,
    /// Where an abandoned grant is released (a release waits for no replica).
    shared: PrimaryConn,
    replicas: Replicas,
}

impl Batch for AckedAcquires {
    type Item = AcquireItem;
    type Reply = AcquireReply;
    const FLUSH_AT: usize = Acquires::FLUSH_AT;

    async fn run(&self, items: &[AcquireItem]) -> Result<Vec<AcquireReply>, StoreError> {
        let refs: Vec<&AcquireItem> = items.iter().collect();
        let (script, cmd) = Acquires.encode(&refs);
        let (reply, acked): (Value, u32) = script
            .invoke_then_wait(&cmd, self.replicas, &self.lanes)
            .await?;
        let replies = Acquires.decode(reply, &refs)?;
        Ok(Acquires::acknowledged(replies, &refs, acked))
    }

    fn abandoned(&self, item: AcquireItem, reply: AcquireReply) {
        if let Some(undo) = Acquires.undo(item, &reply) {
            release::in_background(self.shared.clone(), Publish::Plain, undo);
        }
    }
}
