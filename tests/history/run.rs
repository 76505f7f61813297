//! One recorded run on one backend: its servers, worker processes in network namespaces, the
//! nemesis, and the check.
//!
//! Settings (environment):
//! * `DISTLOCK_HISTORY_SECS`: how long the workers run on each backend (default 20; the
//!   nemesis goes on past it until it has injected every fault kind of the backend once).
//!   The long run, e.g. 600, also blocks all 32 subsets of a quorum's nodes (TESTPLAN 13) and
//!   holds a hot lock for 30 s against 500 waiters (TESTPLAN 16).
//! * `DISTLOCK_HISTORY_SEED`: replays a run's random choices (workers' and nemesis').
//! * `DISTLOCK_HISTORY_KEEP`: keeps the history files (their directory is printed).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use rand::{Rng, SeedableRng};

use crate::checker;
use crate::record::{self, Recorder};
use crate::support::Proxy;
use crate::support::cluster::{RedisCluster, slot_of};
use crate::support::faketime::ClockedServer;
use crate::support::netns::Lab;
use crate::support::process::{TiedChild, spawn_tied};
use crate::support::sentinel::SentinelSetup;
use crate::worker::{
    FAIR_LOCK, HOT, LOCKS, MAX_HOLD_MS, MAX_TTL_MS, PLAN_VAR, Plan, RW_LOCKS, SEMAPHORES, SUBJECTS,
};

/// Worker processes of the random mix.
const WORKERS: usize = 4;
/// Tasks per worker.
const TASKS: usize = 3;
/// Nodes of the quorum.
const QUORUM_NODES: usize = 5;
/// How far a server clock jumps.
const JUMP: Duration = Duration::from_secs(2);
/// Pause between two faults: longer than any lease lives (hold + ttl), so that no lease
/// granted under one fault meets the next one (faults are checked one at a time).
const QUIET: Duration = Duration::from_millis(MAX_HOLD_MS + MAX_TTL_MS + 800);

/// The servers of one backend.
pub enum Servers {
    /// A single primary, on a fake clock, with append-only persistence.
    Primary(ClockedServer),
    Sentinel(SentinelSetup),
    Cluster(RedisCluster),
    /// Five independent primaries; node 0 on a fake clock.
    Quorum(Vec<ClockedServer>),
}

impl Servers {
    fn name(&self) -> &'static str {
        match self {
            Self::Primary(_) => "primary",
            Self::Sentinel(_) => "sentinel",
            Self::Cluster(_) => "cluster",
            Self::Quorum(_) => "quorum",
        }
    }

    fn urls(&self) -> (Vec<String>, String) {
        match self {
            Self::Primary(s) => (vec![s.url()], String::new()),
            Self::Sentinel(s) => (s.sentinel_urls(), s.master_name().to_owned()),
            Self::Cluster(c) => (c.seed_urls(), String::new()),
            Self::Quorum(nodes) => (
                nodes.iter().map(ClockedServer::url).collect(),
                String::new(),
            ),
        }
    }

    /// The fault kinds the nemesis injects on this backend.
    fn kinds(&self) -> &'static [&'static str] {
        match self {
            // A quorum takes the single primary's faults, on its nodes.
            Self::Primary(_) | Self::Quorum(_) => &[
                "pause-worker",
                "partition",
                "delay",
                "pause-server",
                "crash-restart",
                "crash-restart-empty",
                "clock-jump",
            ],
            Self::Sentinel(_) => &[
                "pause-worker",
                "partition",
                "pause-server",
                "pause-primary-long",
                "kill-primary",
                "failover",
                "isolate-primary",
            ],
            Self::Cluster(_) => &[
                "pause-worker",
                "partition",
                "pause-server",
                "kill-master",
                "failover",
                "migrate-slot",
                "isolate-master",
            ],
        }
    }
}

/// Starts `backend`'s servers.
pub fn start(backend: &str) -> Servers {
    match backend {
        "primary" => Servers::Primary(ClockedServer::start("primary", true)),
        "sentinel" => Servers::Sentinel(SentinelSetup::start()),
        "cluster" => Servers::Cluster(RedisCluster::start()),
        "quorum" => Servers::Quorum(
            (0..QUORUM_NODES)
                .map(|i| ClockedServer::start(&format!("node{i}"), i == 0))
                .collect(),
        ),
        other => panic!("unknown backend {other}"),
    }
}

/// Where histories go: a tmpfs when there is one (/dev/shm), so that writing them never waits
/// on a busy disk (a worker records from its runtime's thread).
pub fn scratch() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

/// Seconds per backend.
pub fn secs() -> f64 {
    std::env::var("DISTLOCK_HISTORY_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20.0)
}

fn long_run() -> bool {
    secs() >= 120.0
}

fn seed() -> u64 {
    std::env::var("DISTLOCK_HISTORY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random)
}

/// A worker process in its namespace; killed on drop.
struct WorkerProc {
    k: usize,
    child: TiedChild,
    log: PathBuf,
}

impl WorkerProc {
    fn spawn(lab: &Lab, k: usize, plan: &Plan, dir: &Path, extra_env: &[(&str, String)]) -> Self {
        let exe = std::env::current_exe().expect("this test binary");
        let log = dir.join(format!("w{}.log", plan.worker));
        let out = fs::File::create(&log).expect("worker log");
        let mut cmd = lab.command(k, &exe);
        cmd.args([
            "--exact",
            "worker_entry",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PLAN_VAR, plan.to_string())
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out);
        for (key, value) in extra_env {
            cmd.env(key, value);
        }
        let child = spawn_tied(cmd).expect("spawn a worker process");
        Self { k, child, log }
    }

    fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Waits for the worker to exit; panics with its log if it failed or took too long.
    fn wait(mut self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait() {
                assert!(
                    status.success(),
                    "worker {} failed ({status}); its log:\n{}",
                    self.k,
                    tail(&self.log)
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "worker {} did not finish within {within:?}; its log:\n{}",
                self.k,
                tail(&self.log)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Runs one backend: servers, workers, nemesis, probes and the hot lock (long run), check.
pub async fn run(backend: &str) {
    let seed = seed();
    let secs = secs();
    println!("history {backend}: seed {seed} (replay with DISTLOCK_HISTORY_SEED={seed}), {secs} s");
    let lab = Lab::new(WORKERS + 1).unwrap_or_else(|e| {
        panic!(
            "history {backend}: cannot make the network namespaces this suite needs for its \
             partitions, so it FAILS rather than skip: {e}"
        )
    });
    let dir = scratch().join(format!(
        "distlock-history-{backend}-{}-{seed}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("history dir");
    let began = Instant::now();
    let servers = start(backend);
    println!(
        "history {backend}: servers up in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    // On a single primary and a quorum the workers reach each server through an in-test
    // proxy (tests/support/proxy.rs), the nemesis's way to delay traffic (`tc netem` is not
    // available on every kernel these tests run on). Sentinel and Cluster servers announce
    // their own addresses, so their workers connect directly.
    let mut proxies = Vec::new();
    match &servers {
        Servers::Primary(s) => proxies.push(Proxy::start(s.addr()).await),
        Servers::Quorum(nodes) => {
            for node in nodes {
                proxies.push(Proxy::start(node.addr()).await);
            }
        }
        _ => {}
    }
    let (mut urls, master) = servers.urls();
    if !proxies.is_empty() {
        urls = proxies.iter().map(Proxy::url).collect();
    }
    let plan = |worker: u32, role: String| Plan {
        worker,
        seed,
        backend: backend.to_owned(),
        urls: urls.clone(),
        master: master.clone(),
        secs,
        tasks: TASKS,
        out: dir.join(format!("w{worker}.hist")),
        role,
        clock_rate: 1.0,
    };
    let nemesis_rec = Recorder::create(&dir.join("nemesis.hist"), 0);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x006e_656d_6573_6973);
    // The random mix. Worker 4 runs on a client clock 1% slow (libfaketime), the drift the
    // lease's safety margin allows for.
    let mut workers = Vec::new();
    for k in 0..WORKERS {
        let worker = u32::try_from(k + 1).expect("few workers");
        let mut p = plan(worker, "mix".into());
        let mut env = Vec::new();
        if k == WORKERS - 1 {
            p.clock_rate = CLIENT_CLOCK_RATE;
            env = client_clock_env();
        }
        workers.push(WorkerProc::spawn(&lab, k, &p, &dir, &env));
    }
    let run_for = Duration::from_secs_f64(secs);
    let pids: Vec<u32> = workers.iter().map(WorkerProc::pid).collect();
    let mut nemesis = Nemesis {
        rec: nemesis_rec,
        rng: &mut rng,
        servers: &servers,
        lab: &lab,
        workers: &pids,
        proxies: &proxies,
        next: 1,
    };
    nemesis.run(run_for).await;
    fs::write(dir.join("stop"), "stop").expect("stop file");
    for w in workers {
        tokio::task::block_in_place(|| w.wait(Duration::from_secs(60)));
    }
    // TESTPLAN 16 at full scale (long run, single primary): 500 waiters on a hot lock.
    if long_run() && backend == "primary" {
        hot_lock(&servers, &lab, &dir, &mut nemesis, &plan).await;
    }
    // TESTPLAN 13 (quorum): blocked subsets of the nodes, every one in the long run.
    if let Servers::Quorum(nodes) = &servers {
        let subsets: Vec<u32> = if long_run() {
            (0..32).collect()
        } else {
            vec![0, 0b00011, 0b10101, 0b01111]
        };
        for subset in subsets {
            probe(nodes, subset, &lab, &dir, &mut nemesis, &plan).await;
        }
    }
    let kinds = servers.kinds();
    let quorum = matches!(servers, Servers::Quorum(_));
    drop(proxies);
    drop(servers);
    crate::support::faketime::remove_dead_segments();
    let ran = began.elapsed();
    let events = record::read_dir(&dir);
    let report = checker::check(&events);
    println!(
        "history {backend}: {:.0} s of history checked",
        ran.as_secs_f64()
    );
    print!("{}", checker::figures(&report));
    for kind in kinds {
        assert!(
            report.faults.iter().any(|f| f.kind == *kind),
            "history {backend}: fault kind {kind} was never injected"
        );
    }
    did_work(backend, &events);
    let probes = probe_check(&events, &report);
    if quorum {
        assert!(
            probes > 0,
            "history {backend}: no probe acquisition was recorded (TESTPLAN 13 ran nothing)"
        );
    }
    let keep = std::env::var_os("DISTLOCK_HISTORY_KEEP").is_some() || !report.violations.is_empty();
    if report.violations.is_empty() {
        if !keep {
            let _ = fs::remove_dir_all(&dir);
        }
    } else {
        for v in report.violations.iter().take(10) {
            println!(
                "VIOLATION [{}] {}\n{}",
                v.rule,
                v.what,
                checker::excerpt(&events, v)
            );
        }
        panic!(
            "history {backend}: {} violations (first above); replay with DISTLOCK_HISTORY_SEED={seed}; \
             history kept in {}",
            report.violations.len(),
            dir.display()
        );
    }
    if keep {
        println!("history {backend}: files kept in {}", dir.display());
    }
}

/// The rate of the drifting worker's clock: 1% slow, the drift `safety_margin` allows for
/// (1% of the ttl + 2 ms). A slow client clock is the dangerous direction: its deadline
/// comes later in real time.
pub const CLIENT_CLOCK_RATE: f64 = 0.99;

/// libfaketime for a worker: its clocks (monotonic included) run at [`CLIENT_CLOCK_RATE`].
/// The history itself is recorded from the kernel's clocks (raw system calls), so it stays on
/// the true time line.
fn client_clock_env() -> Vec<(&'static str, String)> {
    let ft = crate::support::faketime::faketime();
    vec![
        ("LD_PRELOAD", ft.libfaketime().display().to_string()),
        ("FAKETIME", format!("+0 x{CLIENT_CLOCK_RATE}")),
        ("FAKETIME_NO_CACHE", "1".into()),
    ]
}

/// The nemesis: one fault at a time, each kind of the backend at least once (in a seeded
/// order), then at random, until the time is up; [`QUIET`] between two faults.
struct Nemesis<'a> {
    rec: Recorder,
    rng: &'a mut StdRng,
    servers: &'a Servers,
    lab: &'a Lab,
    /// The mix workers' pids.
    workers: &'a [u32],
    /// The proxies the workers reach the servers through (single primary, quorum), in server
    /// order.
    proxies: &'a [Proxy],
    next: u64,
}

impl Nemesis<'_> {
    async fn run(&mut self, run_for: Duration) {
        let start = Instant::now();
        let mut order: Vec<&str> = self.servers.kinds().to_vec();
        order.shuffle(self.rng);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut i = 0;
        while i < order.len() || start.elapsed() + Duration::from_secs(3) < run_for {
            let kind = if i < order.len() {
                order[i]
            } else {
                order[self.rng.random_range(0..order.len())]
            };
            i += 1;
            self.inject(kind).await;
            tokio::time::sleep(QUIET).await;
        }
    }

    fn start(&mut self, kind: &str, target: &str, extra: &[(&str, String)]) -> u64 {
        let id = self.next;
        self.next += 1;
        let mut pairs = vec![
            ("kind", kind.to_owned()),
            ("target", target.to_owned()),
            ("phase", "start".into()),
        ];
        pairs.extend_from_slice(extra);
        self.rec.record(id, "fault", &pairs);
        id
    }

    fn end(&self, id: u64, kind: &str) {
        self.rec.record(
            id,
            "fault",
            &[("kind", kind.to_owned()), ("phase", "end".into())],
        );
    }

    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.rng.random_range(lo..hi))
    }

    /// Fault `kind` on `target`: the server process paused (`stop`, SIGSTOP) for `length`,
    /// then resumed (`cont`).
    async fn pause(
        &mut self,
        kind: &str,
        target: &str,
        length: Duration,
        stop: impl FnOnce(),
        cont: impl FnOnce(),
    ) {
        let id = self.start(kind, target, &[]);
        stop();
        tokio::time::sleep(length).await;
        cont();
        self.end(id, kind);
    }

    #[allow(clippy::too_many_lines)]
    async fn inject(&mut self, kind: &str) {
        let lossy = ("lossy", "1".to_owned());
        match (self.servers, kind) {
            (_, "pause-worker") => {
                let k = self.rng.random_range(0..self.workers.len());
                let pid = libc::pid_t::try_from(self.workers[k]).expect("pid");
                let length = self.ms(MAX_TTL_MS + 200, MAX_TTL_MS + 1200);
                let id = self.start(
                    kind,
                    &format!("worker{}", k + 1),
                    &[("ms", length.as_millis().to_string())],
                );
                // SAFETY: kill(2) has no memory-safety preconditions; the worker is our child,
                // reaped only after the nemesis is done.
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                tokio::time::sleep(length).await;
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGCONT) };
                self.end(id, kind);
            }
            (servers, "partition") => {
                let k = self.rng.random_range(0..self.workers.len());
                let ports: Vec<u16> = match servers {
                    Servers::Primary(_) => vec![self.proxies[0].addr().port()],
                    Servers::Sentinel(s) => vec![s.primary().await.port()],
                    Servers::Cluster(c) => {
                        let masters = c.masters().await;
                        vec![masters[self.rng.random_range(0..masters.len())].port()]
                    }
                    Servers::Quorum(nodes) => {
                        let n = self.rng.random_range(1..=3);
                        let mut idx: Vec<usize> = (0..nodes.len()).collect();
                        idx.shuffle(self.rng);
                        debug_assert_eq!(nodes.len(), self.proxies.len());
                        idx[..n]
                            .iter()
                            .map(|&i| self.proxies[i].addr().port())
                            .collect()
                    }
                };
                let length = self.ms(500, 2500);
                let target = format!("worker{}", k + 1);
                let id = self.start(
                    kind,
                    &target,
                    &[(
                        "ports",
                        ports
                            .iter()
                            .map(u16::to_string)
                            .collect::<Vec<_>>()
                            .join(","),
                    )],
                );
                self.lab.block(k, &ports);
                tokio::time::sleep(length).await;
                self.lab.heal(k);
                self.end(id, kind);
            }
            (Servers::Primary(_) | Servers::Quorum(_), "delay") => {
                // Delay every chunk both ways through one or two servers' proxies.
                let n = if self.proxies.len() > 1 {
                    self.rng.random_range(1..=2)
                } else {
                    1
                };
                let mut idx: Vec<usize> = (0..self.proxies.len()).collect();
                idx.shuffle(self.rng);
                let delay = self.ms(20, 250);
                let length = self.ms(1000, 3000);
                let target = idx[..n]
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join("+");
                let id = self.start(
                    kind,
                    &format!("server{target}"),
                    &[("delay_ms", delay.as_millis().to_string())],
                );
                for &i in &idx[..n] {
                    self.proxies[i].delay(delay);
                }
                tokio::time::sleep(length).await;
                for &i in &idx[..n] {
                    self.proxies[i].pass();
                }
                self.end(id, kind);
            }
            (Servers::Primary(s), "pause-server") => {
                let length = self.ms(300, 1500);
                self.pause(
                    kind,
                    "primary",
                    length,
                    || s.stop_process(),
                    || s.cont_process(),
                )
                .await;
            }
            (Servers::Quorum(nodes), "pause-server") => {
                let node = &nodes[self.rng.random_range(0..nodes.len())];
                let length = self.ms(300, 1500);
                let (stop, cont) = (|| node.stop_process(), || node.cont_process());
                self.pause(kind, node.name(), length, stop, cont).await;
            }
            (Servers::Primary(s), "crash-restart" | "crash-restart-empty") => {
                let keep = kind == "crash-restart";
                let extra = if keep { vec![] } else { vec![lossy] };
                let id = self.start(kind, "primary", &extra);
                let pause = self.ms(0, 500);
                tokio::task::block_in_place(|| {
                    s.crash_restart_after(keep, pause);
                });
                self.end(id, kind);
            }
            (Servers::Quorum(nodes), "crash-restart" | "crash-restart-empty") => {
                let keep = kind == "crash-restart";
                let node = &nodes[self.rng.random_range(0..nodes.len())];
                // A quorum node that restarts empty sits out majorities: not lossy for anyone
                // else; a lease whose bare majority needed it ends early, told (early_loss).
                let extra = if keep {
                    vec![]
                } else {
                    vec![("early_loss", "1".to_owned())]
                };
                let id = self.start(kind, node.name(), &extra);
                let pause = self.ms(0, 500);
                tokio::task::block_in_place(|| node.crash_restart_after(keep, pause));
                self.end(id, kind);
            }
            (Servers::Primary(s), "clock-jump") => {
                let clock = s.clock().expect("the primary runs on a fake clock");
                let id = self.start(kind, "primary", &[("jump_ns", JUMP.as_nanos().to_string())]);
                clock.jump(JUMP);
                self.end(id, kind);
            }
            (Servers::Quorum(nodes), "clock-jump") => {
                let clock = nodes[0].clock().expect("node 0 runs on a fake clock");
                // Its keys expire early: a grant that holds a bare majority with this node in
                // it ends early (early_loss, its holder told). Nothing else is excused: a node
                // whose clock is ahead does not vote and its fences are not used
                // (src/store/quorum/clocks.rs), so an overlap or a fence going down is a
                // violation.
                let id = self.start(kind, nodes[0].name(), &[("early_loss", "1".into())]);
                clock.jump(JUMP);
                self.end(id, kind);
            }
            (Servers::Sentinel(s), "pause-server") => {
                // Shorter than down-after-milliseconds: no failover.
                let primary = s.primary().await;
                let length = self.ms(200, 600);
                let (stop, cont) = (|| primary.stop_process(), || primary.cont_process());
                self.pause(kind, "sentinel-primary", length, stop, cont)
                    .await;
            }
            (Servers::Sentinel(s), "pause-primary-long") => {
                let primary = s.primary().await;
                let id = self.start(kind, "sentinel-primary", &[lossy]);
                primary.stop_process();
                tokio::time::sleep(self.ms(2500, 3500)).await;
                primary.cont_process();
                s.wait_settled().await;
                self.end(id, kind);
            }
            (Servers::Sentinel(s), "kill-primary") => {
                let id = self.start(kind, "sentinel-primary", &[lossy]);
                let promotion = s.kill_primary().await;
                let old = promotion.old_primary;
                s.restart_node(old).await;
                self.end(id, kind);
            }
            (Servers::Sentinel(s), "failover") => {
                let id = self.start(kind, "sentinel-primary", &[lossy]);
                let _ = s.failover().await;
                self.end(id, kind);
            }
            (Servers::Sentinel(s), "isolate-primary") => {
                // The replica and the sentinels lose the primary (they connect to it; it
                // connects to no one); the workers, in their namespaces, keep it.
                let primary = s.primary().await;
                let id = self.start(kind, "sentinel-primary", &[lossy]);
                self.lab.isolate(&[primary.port()], primary.pid(), &[]);
                // Isolated until the sentinels have promoted the replica (proof that the
                // isolation isolates), and a little longer.
                let deadline = Instant::now() + Duration::from_secs(15);
                while s.primary_addr().await == primary.addr() {
                    assert!(
                        Instant::now() < deadline,
                        "isolating the primary did not make the sentinels fail over within 15 s"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(self.ms(200, 1500)).await;
                self.lab.heal_servers();
                s.wait_settled().await;
                self.end(id, kind);
            }
            (Servers::Cluster(c), "pause-server") => {
                let masters = c.masters().await;
                let m = masters[self.rng.random_range(0..masters.len())];
                let length = self.ms(200, 600);
                let id = self.start(kind, &format!("master:{}", m.port()), &[]);
                c.stop_node(m);
                tokio::time::sleep(length).await;
                c.cont_node(m);
                self.end(id, kind);
            }
            (Servers::Cluster(c), "kill-master") => {
                let masters = c.masters().await;
                let m = masters[self.rng.random_range(0..masters.len())];
                let id = self.start(kind, &format!("master:{}", m.port()), &[lossy]);
                let _ = c.kill_master(m).await;
                c.restart_node(m).await;
                self.end(id, kind);
            }
            (Servers::Cluster(c), "failover") => {
                let masters = c.masters().await;
                let m = masters[self.rng.random_range(0..masters.len())];
                // Graceful (CLUSTER FAILOVER): the replica catches up first; nothing lost.
                let id = self.start(kind, &format!("master:{}", m.port()), &[]);
                let _ = c.failover(m).await;
                self.end(id, kind);
            }
            (Servers::Cluster(c), "migrate-slot") => {
                let tags: Vec<&str> = LOCKS
                    .iter()
                    .chain(&[FAIR_LOCK])
                    .chain(RW_LOCKS)
                    .chain(SUBJECTS)
                    .copied()
                    .chain(SEMAPHORES.iter().map(|(n, _)| *n))
                    .collect();
                let tag = tags[self.rng.random_range(0..tags.len())];
                let slot = slot_of(format!("{{{tag}}}"));
                let owner = c.master_of_slot(slot).await;
                let masters = c.masters().await;
                let others: Vec<_> = masters
                    .into_iter()
                    .filter(|m| m.port() != owner.port())
                    .collect();
                let to = others[self.rng.random_range(0..others.len())];
                let id = self.start(kind, &format!("slot:{slot}:{tag}"), &[]);
                c.migrate_slot(slot, to).await;
                self.end(id, kind);
            }
            (Servers::Cluster(c), "isolate-master") => {
                let masters = c.masters().await;
                let m = masters[self.rng.random_range(0..masters.len())];
                // Cut off the cluster bus both ways (its own links to the others too); the
                // workers, in their namespaces, keep reaching it.
                let others: Vec<u16> = c
                    .nodes()
                    .iter()
                    .filter(|n| n.port() != m.port())
                    .map(|n| n.bus_port())
                    .collect();
                let id = self.start(kind, &format!("master:{}", m.port()), &[lossy]);
                self.lab.isolate(&[m.bus_port()], m.pid(), &others);
                // Isolated until another node has flagged it failed (proof that the isolation
                // isolates), and a little longer.
                let witness = c
                    .nodes()
                    .iter()
                    .find(|n| n.port() != m.port() && n.is_serving())
                    .expect("another node");
                let deadline = Instant::now() + Duration::from_secs(15);
                loop {
                    let view = witness.view().await;
                    if view
                        .get(m.id())
                        .is_some_and(|e| e.is_failed() || !e.is_master())
                    {
                        break;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "isolating master {} did not make the cluster fail it within 15 s",
                        m.port()
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(self.ms(200, 1500)).await;
                self.lab.heal_servers();
                c.wait_settled().await;
                self.end(id, kind);
            }
            (servers, kind) => panic!("no fault {kind} on {}", servers.name()),
        }
    }
}

/// One subset of TESTPLAN 13: a probe worker connects, the nodes of `subset` are cut off from
/// it, and it tries five acquisitions.
async fn probe(
    nodes: &[ClockedServer],
    subset: u32,
    lab: &Lab,
    dir: &Path,
    nemesis: &mut Nemesis<'_>,
    plan: &impl Fn(u32, String) -> Plan,
) {
    let k = WORKERS;
    let blocked: Vec<usize> = (0..nodes.len())
        .filter(|i| subset & (1 << i) != 0)
        .collect();
    let label = if blocked.is_empty() {
        "-".to_owned()
    } else {
        blocked
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join("+")
    };
    let worker = 100 + subset;
    let mut p = plan(worker, format!("probe:{label}"));
    p.out = dir.join(format!("w{worker}.hist"));
    let go = dir.join(format!("go-{worker}"));
    let ready = dir.join(format!("ready-{worker}"));
    let proc = WorkerProc::spawn(
        lab,
        k,
        &p,
        dir,
        &[
            ("DISTLOCK_HISTORY_GO", go.display().to_string()),
            ("DISTLOCK_HISTORY_READY", ready.display().to_string()),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        assert!(
            Instant::now() < deadline,
            "probe {label} never connected:\n{}",
            tail(&proc.log)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ports: Vec<u16> = blocked
        .iter()
        .map(|&i| nemesis.proxies[i].addr().port())
        .collect();
    let id = nemesis.start(
        "partition-probe",
        &format!("worker{worker}"),
        &[("blocked", label.clone())],
    );
    lab.block(k, &ports);
    fs::write(&go, "go").expect("go file");
    tokio::task::block_in_place(|| proc.wait(Duration::from_secs(60)));
    lab.heal(k);
    nemesis.end(id, "partition-probe");
}

/// TESTPLAN 13's pass criterion on the probes: with at least 3 of 5 nodes free every
/// acquisition succeeds with validity in (0, ttl); otherwise every one fails. A node whose
/// clock jumped ahead is not free: it does not vote.
fn probe_check(events: &[record::Event], report: &checker::Report) -> usize {
    let mut done = std::collections::BTreeMap::new();
    for e in events
        .iter()
        .filter(|e| matches!(e.tag.as_str(), "ok" | "fail"))
    {
        done.insert((e.process, e.op), e);
    }
    let mut probes = 0;
    let mut subsets = std::collections::BTreeSet::new();
    for inv in events
        .iter()
        .filter(|e| e.tag == "inv" && e.get("kind") == Some("probe"))
    {
        probes += 1;
        let blocked = inv.get("blocked").unwrap_or("-");
        subsets.insert(blocked.to_owned());
        let n_blocked = if blocked == "-" {
            0
        } else {
            blocked.split('+').count()
        };
        // Nodes that answer but do not vote: node 0 from its first clock jump on (its clock is
        // never set back, so it stays ahead of the others': src/store/quorum/clocks.rs), and
        // a node restarted empty until the probe's quarantine (3 × the longest ttl, counted
        // from the restart) has passed.
        let quarantine = 3 * MAX_TTL_MS * 1_000_000 + 1_000_000_000;
        let sitting_out = (0..QUORUM_NODES).filter(|&i| {
            !blocked.split('+').any(|b| b == i.to_string())
                && report.faults.iter().any(|f| {
                    (i == 0 && f.kind == "clock-jump" && f.start <= inv.mono)
                        || (f.kind == "crash-restart-empty"
                            && f.target == format!("node{i}")
                            && f.start <= inv.mono
                            && inv.mono <= f.end + quarantine)
                })
        });
        let free = QUORUM_NODES - n_blocked - sitting_out.count();
        let d = done
            .get(&(inv.process, inv.op))
            .expect("the checker found every completion");
        if free * 2 > QUORUM_NODES {
            let valid = d.num("valid").unwrap_or(0);
            assert!(
                d.tag == "ok" && valid > 0 && valid < 1_000_000_000,
                "TESTPLAN 13: {free} of {QUORUM_NODES} nodes free (blocked {blocked}), yet {}",
                d.line()
            );
        } else if (QUORUM_NODES - n_blocked) * 2 <= QUORUM_NODES {
            assert_eq!(
                d.tag,
                "fail",
                "TESTPLAN 13: only {free} of {QUORUM_NODES} nodes free (blocked {blocked}), yet granted: {}",
                d.line()
            );
        }
    }
    if probes > 0 {
        println!(
            "TESTPLAN 13: {probes} acquisitions over {} subsets of blocked nodes, success iff ≥ 3 of 5 free ({} grants in all)",
            subsets.len(),
            report.grants
        );
    }
    probes
}

/// Every mix worker ran to its end (its `done` record: a worker that failed to start, or a
/// child entry that libtest no longer finds, records nothing and exits 0) and did real work:
/// at least [`MIN_GRANTS`] lock grants and [`MIN_CHECKS`] rate-limit checks each. A run whose
/// workers did nothing has no history to find a violation in.
fn did_work(backend: &str, events: &[record::Event]) {
    let mix: std::collections::BTreeSet<u32> = events
        .iter()
        .filter(|e| e.tag == "meta" && e.get("role") == Some("mix"))
        .map(|e| e.process)
        .collect();
    assert_eq!(
        mix.len(),
        WORKERS,
        "history {backend}: {} of {WORKERS} mix workers recorded their start",
        mix.len()
    );
    let mut kinds = std::collections::BTreeMap::new();
    for e in events.iter().filter(|e| e.tag == "inv") {
        kinds.insert((e.process, e.op), e.get("kind").unwrap_or(""));
    }
    for worker in &mix {
        assert!(
            events
                .iter()
                .any(|e| e.process == *worker && e.tag == "meta" && e.get("done") == Some("1")),
            "history {backend}: worker {worker} never recorded that it finished"
        );
        let ok = |kind: &str| {
            events
                .iter()
                .filter(|e| {
                    e.process == *worker
                        && e.tag == "ok"
                        && kinds.get(&(e.process, e.op)) == Some(&kind)
                })
                .count()
        };
        // A quorum does not count: its workers make no rate-limit checks.
        let min_checks = if backend == "quorum" { 0 } else { MIN_CHECKS };
        let (grants, checks) = (ok("lock"), ok("rl"));
        assert!(
            grants >= MIN_GRANTS && checks >= min_checks,
            "history {backend}: worker {worker} did too little to check: {grants} lock grants \
             (at least {MIN_GRANTS}), {checks} rate-limit checks (at least {min_checks})"
        );
    }
}

/// The least each mix worker must do in a run for the run to count (a CI-length run does
/// dozens of grants and hundreds of checks: 70 and 155 a worker on a primary, 40 grants on a
/// quorum).
const MIN_GRANTS: usize = 10;
const MIN_CHECKS: usize = 20;

/// TESTPLAN 16 at full scale: the parent holds the hot lock for 30 s while 4 processes × 125
/// tasks wait on it; the attempts (SET calls) stay within 2× of what the waiting rule
/// predicts; then every waiter gets it in turn.
async fn hot_lock(
    servers: &Servers,
    lab: &Lab,
    dir: &Path,
    nemesis: &mut Nemesis<'_>,
    plan: &impl Fn(u32, String) -> Plan,
) {
    const HOLD: Duration = Duration::from_secs(30);
    const TTL: Duration = Duration::from_secs(1);
    const PROCESSES: u32 = 4;
    const PER_PROCESS: usize = 125;
    let Servers::Primary(server) = servers else {
        return;
    };
    let client = distlock::Client::connect(&server.url())
        .await
        .expect("hot lock holder");
    let op = nemesis.rec.next_op() + 1_000_000;
    nemesis.rec.record(
        op,
        "inv",
        &[
            ("kind", "lock".into()),
            ("name", HOT.into()),
            ("ttl", "1000".into()),
        ],
    );
    let holder = client
        .lock(HOT)
        .ttl(TTL)
        .acquire()
        .await
        .expect("hold the hot lock");
    nemesis.rec.record(
        op,
        "ok",
        &[
            ("fence", holder.fence().await.expect("fence").to_string()),
            ("valid", holder.valid_for().as_nanos().to_string()),
        ],
    );
    let redis = redis::Client::open(server.url()).expect("url");
    let mut conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("INFO connection");
    let set_calls = |info: String| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_set:calls="))
            .and_then(|r| r.split(',').next())
            .map_or(0, |c| c.parse().unwrap_or(0))
    };
    let before = set_calls(
        redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .expect("INFO"),
    );
    let mut procs = Vec::new();
    for i in 0..PROCESSES {
        let worker = 200 + i;
        let mut p = plan(worker, format!("hot:{PER_PROCESS}"));
        p.out = dir.join(format!("w{worker}.hist"));
        procs.push(WorkerProc::spawn(lab, i as usize, &p, dir, &[]));
    }
    let start = Instant::now();
    while start.elapsed() < HOLD {
        // Keep the claim fresh in the history, as a worker would.
        nemesis.rec.record(
            op,
            "claim",
            &[
                ("lease", op.to_string()),
                ("valid", holder.valid_for().as_nanos().to_string()),
            ],
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let attempts = set_calls(
        redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .expect("INFO"),
    ) - before;
    nemesis.rec.record(op, "end", &[("lease", op.to_string())]);
    let rel = nemesis.rec.next_op() + 1_000_000;
    nemesis.rec.record(
        rel,
        "inv",
        &[("kind", "release".into()), ("lease", op.to_string())],
    );
    holder.release().await.expect("release the hot lock");
    nemesis.rec.record(rel, "ok", &[]);
    let waiters = PROCESSES as usize * PER_PROCESS;
    let min_sleep = TTL.as_secs_f64() * 2.0 / 3.0;
    #[allow(clippy::cast_precision_loss)]
    let predicted = (2.0 + HOLD.as_secs_f64() / min_sleep + 1.0) * waiters as f64;
    println!(
        "TESTPLAN 16: {waiters} waiters in {PROCESSES} processes on one hot lock for {HOLD:?}: \
         {attempts} attempts, the waiting rule predicts at most {predicted:.0}"
    );
    #[allow(clippy::cast_precision_loss)]
    let ok = (attempts as f64) <= 2.0 * predicted && attempts >= 2 * waiters as u64;
    assert!(
        ok,
        "TESTPLAN 16: {attempts} attempts against {predicted:.0} predicted (at least {})",
        2 * waiters
    );
    for p in procs {
        tokio::task::block_in_place(|| p.wait(Duration::from_secs(120)));
    }
}
