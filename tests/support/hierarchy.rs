//! Hierarchical locks' shared test bodies (the lock suite runs them on a single primary and in
//! memory, the cluster suite on a Cluster): a model check of the compatibility matrix, a
//! workload of row and table holders checked for incompatible overlap, and a waiter for the
//! table behind a stream of readers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{Client, HierarchyMode, Lease, LockError, ReleaseOutcome};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use super::readers::ReaderStream;

/// The reference: a grant of `mode` on `path` is compatible iff, on every level of the path,
/// the mode it takes there (the intention mode above the last level) is compatible with the
/// mode every live holder takes there. Written from the textbook matrix, not the library's.
fn reference_grants(held: &[(String, HierarchyMode)], path: &str, mode: HierarchyMode) -> bool {
    fn compatible(a: char, b: char) -> bool {
        // IS = 'i', IX = 'x', S = 'S', X = 'X'.
        matches!(
            (a, b),
            ('i', 'i' | 'x' | 'S') | ('x', 'i' | 'x') | ('S', 'i' | 'S')
        )
    }
    fn letter(mode: HierarchyMode) -> char {
        match mode.as_str() {
            "IS" => 'i',
            "IX" => 'x',
            "S" => 'S',
            _ => 'X',
        }
    }
    // What a holder of (path, mode) takes on each level it touches.
    fn levels(path: &str, mode: HierarchyMode) -> Vec<(String, char)> {
        let names: Vec<&str> = path.split('/').collect();
        let intention = if matches!(letter(mode), 'i' | 'S') {
            'i'
        } else {
            'x'
        };
        (1..=names.len())
            .map(|n| {
                let letter = if n == names.len() {
                    letter(mode)
                } else {
                    intention
                };
                (names[..n].join("/"), letter)
            })
            .collect()
    }
    let wanted = levels(path, mode);
    held.iter().all(|(other_path, other_mode)| {
        levels(other_path, *other_mode)
            .iter()
            .all(|(level, theirs)| {
                wanted
                    .iter()
                    .filter(|(mine, _)| mine == level)
                    .all(|(_, mine)| compatible(*mine, *theirs))
            })
    })
}

/// Random sequences of tries (no waiting, so no waiter's mark takes part) and releases of
/// (path, mode) over a small tree under `root`, held against [`reference_grants`] at every
/// step: a grant exactly when the reference grants, `Busy` otherwise. `seed` makes a run
/// repeatable; a failure names it and the steps so far.
pub async fn model_check(client: &Client, root: &str, seed: u64, steps: usize) {
    let paths: Vec<String> = ["", "/b", "/c", "/b/x", "/b/y", "/c/z"]
        .iter()
        .map(|tail| format!("{root}{tail}"))
        .collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut held: Vec<(String, HierarchyMode, Lease)> = Vec::new();
    let mut log = Vec::new();
    let (mut granted, mut refused) = (0u32, 0u32);
    for step in 0..steps {
        if !held.is_empty() && rng.random_range(0..3) == 0 {
            let (path, mode, lease) = held.swap_remove(rng.random_range(0..held.len()));
            log.push(format!("release {path} {mode}"));
            assert_eq!(
                lease.release().await.expect("release"),
                ReleaseOutcome::Released,
                "seed {seed} step {step}: {log:?}"
            );
            continue;
        }
        let path = &paths[rng.random_range(0..paths.len())];
        let mode = HierarchyMode::ALL[rng.random_range(0..4)];
        let model: Vec<(String, HierarchyMode)> =
            held.iter().map(|(p, m, _)| (p.clone(), *m)).collect();
        let expected = reference_grants(&model, path, mode);
        let got = client.hierarchy_lock(path.as_str()).lock(mode).await;
        log.push(format!(
            "take {path} {mode}: {}",
            if got.is_ok() { "granted" } else { "busy" }
        ));
        match got {
            Ok(lease) => {
                assert!(
                    expected,
                    "seed {seed} step {step}: granted against the model: {log:?}"
                );
                granted += 1;
                held.push((path.clone(), mode, lease));
            }
            Err(LockError::Busy { .. }) => {
                assert!(
                    !expected,
                    "seed {seed} step {step}: refused against the model: {log:?}"
                );
                refused += 1;
            }
            Err(err) => panic!("seed {seed} step {step}: {err}"),
        }
    }
    for (_, _, lease) in held {
        lease.release().await.expect("release");
    }
    assert!(
        granted > 10 && refused > 10,
        "seed {seed}: {granted} granted, {refused} refused: too few of one to tell"
    );
}

/// Who is inside the table `db/t` and its rows, as the workers say: entering checks the
/// entrant is compatible with everyone inside, and counts a violation if not.
#[derive(Default)]
pub struct Occupancy {
    state: Mutex<Inside>,
    pub violations: AtomicU32,
    /// Most row holders inside at once, and most table readers: the test is only telling if
    /// both overlapped.
    pub most_rows: AtomicU32,
    pub most_table_readers: AtomicU32,
}

#[derive(Default)]
struct Inside {
    table_x: u32,
    table_s: u32,
    rows: BTreeMap<u32, u32>,
}

/// Who enters.
#[derive(Debug, Clone, Copy)]
pub enum Entrant {
    /// X on the table.
    TableX,
    /// S on the table.
    TableS,
    /// X on row `n`.
    Row(u32),
}

impl Occupancy {
    pub fn enter(&self, who: Entrant) {
        let mut inside = self.state.lock().expect("occupancy");
        let rows: u32 = inside.rows.values().sum();
        let clash = match who {
            Entrant::TableX => inside.table_x + inside.table_s + rows > 0,
            Entrant::TableS => inside.table_x + rows > 0,
            Entrant::Row(n) => {
                inside.table_x + inside.table_s + inside.rows.get(&n).copied().unwrap_or(0) > 0
            }
        };
        if clash {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        match who {
            Entrant::TableX => inside.table_x += 1,
            Entrant::TableS => {
                inside.table_s += 1;
                self.most_table_readers
                    .fetch_max(inside.table_s, Ordering::SeqCst);
            }
            Entrant::Row(n) => {
                *inside.rows.entry(n).or_default() += 1;
                self.most_rows.fetch_max(rows + 1, Ordering::SeqCst);
            }
        }
    }

    pub fn leave(&self, who: Entrant) {
        let mut inside = self.state.lock().expect("occupancy");
        match who {
            Entrant::TableX => inside.table_x -= 1,
            Entrant::TableS => inside.table_s -= 1,
            Entrant::Row(n) => {
                if let Some(count) = inside.rows.get_mut(&n) {
                    *count -= 1;
                }
            }
        }
    }
}

/// The path and mode of an entrant under `root` (the database).
pub fn path_of(root: &str, who: Entrant) -> (String, HierarchyMode) {
    match who {
        Entrant::TableX => (format!("{root}/t"), HierarchyMode::Exclusive),
        Entrant::TableS => (format!("{root}/t"), HierarchyMode::Shared),
        Entrant::Row(n) => (format!("{root}/t/{n}"), HierarchyMode::Exclusive),
    }
}

/// `rows` tasks taking X on random rows and `tables` tasks taking S or X on the table, over
/// `clients` in turn, `sections` each, checked by `occupancy`.
pub async fn mixed_workload(
    clients: &[Client],
    root: &str,
    row_tasks: usize,
    table_tasks: usize,
    sections: usize,
    occupancy: Arc<Occupancy>,
) {
    let mut tasks = Vec::new();
    for task in 0..row_tasks + table_tasks {
        let client = clients[task % clients.len()].clone();
        let (root, occupancy) = (root.to_owned(), occupancy.clone());
        let table = task >= row_tasks;
        tasks.push(tokio::spawn(async move {
            for _ in 0..sections {
                let who = if table {
                    if rand::random_bool(0.5) {
                        Entrant::TableS
                    } else {
                        Entrant::TableX
                    }
                } else {
                    Entrant::Row(rand::random_range(0..6))
                };
                let (path, mode) = path_of(&root, who);
                let lease = take(&client, path, mode).await;
                occupancy.enter(who);
                tokio::time::sleep(Duration::from_micros(rand::random_range(0..1500))).await;
                occupancy.leave(who);
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
}

/// `mode` on `path`, as an entrant of a workload takes it: waiting up to 60 s in line.
pub async fn take(client: &Client, path: String, mode: HierarchyMode) -> Lease {
    client
        .hierarchy_lock(path)
        .wait(Duration::from_secs(60))
        .lock(mode)
        .await
        .expect("lock")
}

/// 6 readers keep `<root>/t` read-held without a gap (S on the table and IS-backed S on rows,
/// each 40 ms, back at once); an X waiter for the table that starts meanwhile gets in within
/// `bound`: the readers already in finish, no new one starts. Returns the waits.
pub async fn a_table_writer_behind_readers(
    readers: &[Client],
    writer: &Client,
    root: &str,
    bound: Duration,
) -> Vec<Duration> {
    let stream = ReaderStream::start((0..6u32).map(|task| {
        let client = readers[task as usize % readers.len()].clone();
        let path = if task % 2 == 0 {
            format!("{root}/t")
        } else {
            format!("{root}/t/{task}")
        };
        move || {
            let (client, path) = (client.clone(), path.clone());
            async move {
                client
                    .hierarchy_lock(path.as_str())
                    .wait(Duration::from_secs(10))
                    .shared()
                    .await
            }
        }
    }));
    // Let the stream run, then start only once readers are inside: a loaded machine (or a
    // cluster client's first round trips) can leave a moment without one.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ready = Instant::now();
    while stream.inside() == 0 {
        assert!(
            ready.elapsed() < Duration::from_secs(10),
            "the readers do not hold the table"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let waits = stream
        .writer_waits("the table's writer", || {
            writer
                .hierarchy_lock(format!("{root}/t"))
                .wait(Duration::from_secs(10))
                .exclusive()
        })
        .await;
    let longest = waits.iter().max().copied().unwrap_or_default();
    assert!(
        longest < bound,
        "the table's writer waited {longest:?} behind the readers: {waits:?}"
    );
    waits
}
