//! What the semaphore tests of every store share.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use distlock::{Client, ReleaseOutcome};

/// How [`most_inside`] works a semaphore.
pub struct Workload {
    /// The semaphore's name and permits.
    pub name: String,
    pub permits: u32,
    /// How many tasks (alternately on the two clients), and how many times each takes and
    /// gives back a permit.
    pub tasks: usize,
    pub rounds: usize,
    /// The permits' ttl (the library's default if `None`).
    pub ttl: Option<Duration>,
    /// A holder keeps its permit a random while below this.
    pub max_hold: Duration,
}

/// Runs `work` on the semaphore through clients `a` and `b` (waiting up to 60 s for each
/// permit, every release `Released`) and returns the most holders that were inside at once.
pub async fn most_inside(a: Client, b: Client, work: Workload) -> u32 {
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let work = Arc::new(work);
    let mut tasks = Vec::new();
    for task in 0..work.tasks {
        let client = if task % 2 == 0 { a.clone() } else { b.clone() };
        let (inside, most, work) = (inside.clone(), most.clone(), work.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..work.rounds {
                let mut semaphore = client
                    .semaphore(&work.name, work.permits)
                    .wait(Duration::from_secs(60));
                if let Some(ttl) = work.ttl {
                    semaphore = semaphore.ttl(ttl);
                }
                let lease = semaphore.acquire().await.expect("acquire a permit");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let max_hold = work.max_hold.as_micros() as u64;
                tokio::time::sleep(Duration::from_micros(rand::random_range(0..max_hold))).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(
                    lease.release().await.expect("release"),
                    ReleaseOutcome::Released
                );
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    most.load(Ordering::SeqCst)
}
