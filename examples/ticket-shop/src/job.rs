//! A periodic job that runs on one replica at a time: the scheduled-job lock that ShedLock
//! made familiar.
//!
//! Every replica wakes up at each multiple of the period on its own wall clock, as cron
//! would, and runs the job through `distlock`'s scheduled-job lock
//! ([`Client::job`](distlock::Client::job)). The replica that gets the lock runs the job; the
//! others find it held and skip this period. Two bounds make that hold up:
//!
//! * **`at_least`.** A job that takes 50 ms would free its lock long before a replica whose
//!   clock is 300 ms behind wakes up, and that replica would run the job a second time in the
//!   same period. So the lock is kept for at least [`Schedule::min_hold`] (¾ of the period)
//!   after the run starts, whatever the job's length: clocks may disagree by up to that much.
//!   The library keeps it by setting the key's expiry, not by a task that sleeps, so a
//!   replica that crashes right after the job keeps it as long.
//! * **`at_most`.** The watchdog renews the lease while the job runs, but no longer than
//!   [`Schedule::max_hold`]; a job stuck past it loses the lock (and is dropped at its next
//!   `.await`) so the job is not blocked for ever.
//!
//! Each run records its replica, its fence and its start and end (on the store's clock)
//! with a fenced append, so a run whose lease expired cannot record after a newer one.
//!
//! **Leader work.** Rather than every replica waking at every tick to race for the lock,
//! the replicas elect a leader ([`Client::election`](distlock::Client::election)) and only
//! the leader keeps the schedule ([`run_forever`]). The others wait in `campaign`, woken the
//! moment the leader resigns, and take over within the election's ttl if it dies or freezes.
//! Each run still takes the job lock above: a leader that froze past its term and resumes
//! mid-period cannot run the period's job a second time beside its successor, and its record
//! is refused by the fence. `GET /admin/leader` says who leads and in which term.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::LockError;

use crate::AppState;
use crate::error::AppError;
use crate::store::{Fenced, JobRun, Log};

/// The job's lock name.
pub const JOB_LOCK: &str = "job:settle-payments";
/// The election of the replica that keeps the job's schedule.
pub const JOB_ELECTION: &str = "job:settle-payments:leader";
/// How long a leader that stopped renewing keeps the schedule before another takes over.
pub const LEADER_TTL: Duration = Duration::from_secs(10);
/// The job's name in its records.
pub const JOB_NAME: &str = "settle-payments";

/// When the job is due and how long a run keeps its lock.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// Due at every multiple of this on the wall clock.
    pub period: Duration,
    /// A run keeps the lock at least this long after it starts.
    pub min_hold: Duration,
    /// A run keeps the lock at most this long (then it is lost and the run dropped).
    pub max_hold: Duration,
}

impl Schedule {
    /// Every `period`, holding the lock for ¾ of it at least and 10 periods (at least 30 s)
    /// at most.
    pub fn every(period: Duration) -> Self {
        Self {
            period,
            min_hold: period * 3 / 4,
            max_hold: (period * 10).max(Duration::from_secs(30)),
        }
    }
}

/// The election of the job's leader, on the state's client.
pub fn election(state: &AppState) -> Result<distlock::Election, LockError> {
    state.locks.election(JOB_ELECTION).ttl(LEADER_TTL).build()
}

/// Campaigns to lead the job's schedule, and while leading runs the job whenever it is due;
/// campaigns again when the leadership is lost. For ever.
pub async fn run_forever(state: AppState, schedule: Schedule) {
    let election = match election(&state) {
        Ok(election) => election,
        Err(err) => {
            tracing::error!(error = %err, "cannot elect the job's leader; the job will not run here");
            return;
        }
    };
    loop {
        let leadership = match election.campaign(state.settings.replica.clone()).await {
            Ok(leadership) => leadership,
            // The replica is draining (`Client::shutdown` in main): it leads no more.
            Err(distlock::LockError::ShuttingDown { .. }) => {
                tracing::info!(job = JOB_NAME, "shutting down: no longer campaigning");
                return;
            }
            Err(err) => {
                tracing::warn!(error = %err, "campaign failed; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let term = leadership.term();
        tracing::info!(
            job = JOB_NAME,
            term,
            "leading: the job's schedule runs on this replica"
        );
        let led = leadership
            .run(|_| async { keep_schedule(&state, &schedule).await })
            .await;
        if let Err(err) = led {
            tracing::warn!(job = JOB_NAME, term, error = %err, "leadership lost; campaigning again");
        }
    }
}

/// Runs the job at every tick, for as long as the caller lets it (the leadership drops it
/// when lost).
async fn keep_schedule(state: &AppState, schedule: &Schedule) {
    loop {
        tokio::time::sleep(until_next_tick(schedule.period)).await;
        match run_once(state, schedule).await {
            Ok(Some(run)) => tracing::info!(
                job = JOB_NAME,
                fence = run.fence,
                took_ms = run.ended_ms.saturating_sub(run.started_ms),
                "ran"
            ),
            Ok(None) => tracing::debug!(job = JOB_NAME, "another replica has it this period"),
            Err(err) => tracing::warn!(job = JOB_NAME, error = %err, "run failed"),
        }
    }
}

/// One due run: `Ok(None)` if another replica holds the job's lock (it runs the job, or ran
/// it less than `min_hold` ago).
pub async fn run_once(state: &AppState, schedule: &Schedule) -> Result<Option<JobRun>, AppError> {
    let outcome: Result<Option<Result<JobRun, AppError>>, LockError> = state
        .locks
        .job(JOB_LOCK)
        .ttl(Duration::from_secs(10))
        .at_least(schedule.min_hold)
        .at_most(schedule.max_hold)
        // Every run records its fence: minted with the grant.
        .fenced()
        .run(|lease| async move { settle_payments(state, lease.fence().await?).await })
        .await;
    match outcome? {
        Some(run) => run.map(Some),
        None => Ok(None),
    }
}

/// The job itself: settles the day's payments (here: looks at the sales and takes a while),
/// then records the run.
async fn settle_payments(state: &AppState, fence: u64) -> Result<JobRun, AppError> {
    let started_ms = state.store.now_ms().await?;
    let seats_sold = state.store.sold_count().await?;
    tokio::time::sleep(state.settings.job_work_time).await;
    let run = JobRun {
        job: JOB_NAME.to_owned(),
        replica: state.settings.replica.clone(),
        fence,
        started_ms,
        ended_ms: state.store.now_ms().await?,
        seats_sold,
    };
    match state.store.append(Log::JobRuns, fence, &run).await? {
        Fenced::Ok => Ok(run),
        Fenced::Sold | Fenced::Stale { .. } => Err(AppError::LostLock),
    }
}

/// How long until the next multiple of `period` on the wall clock.
fn until_next_tick(period: Duration) -> Duration {
    let period_ms = period.as_millis().max(1);
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let wait = period_ms - now_ms % period_ms;
    Duration::from_millis(u64::try_from(wait).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_land_on_multiples_of_the_period() {
        let period = Duration::from_secs(2);
        let wait = until_next_tick(period);
        assert!(wait > Duration::ZERO && wait <= period);
    }
}
