//! `distlock-bench`: runs each workload through distlock and through a hand-written `redis`
//! baseline ("raw") against the same server in the same run, and prints one JSON line per
//! (peer, workload) plus a table.
//!
//! ```text
//! cargo run --release -p distlock-bench -- [--url redis://127.0.0.1:6379/] [--workloads a,b]
//!     [--peers distlock,raw] [--duration 5s] [--ops N] [--tasks N] [--rounds N]
//!     [--cluster] [--cluster-url redis://127.0.0.1:7001/,...] [--server-cpus 0]
//!     [--quorum] [--quorum-url redis://127.0.0.1:7001/,...] [--runtime multi-thread]
//! ```
//! Without `--url` it starts its own `redis-server` on a free loopback port, for the
//! `cluster_*` workloads without `--cluster-url` its own local cluster, and for the `quorum_*`
//! workloads without `--quorum-url` `--quorum-nodes` (5) more independent `redis-server`s; all
//! are killed on exit, on an error and on SIGINT/SIGTERM.

mod bloom;
mod chart;
mod cli;
mod cluster;
mod drain;
mod layer;
mod ratelimit;
mod raw;
mod report;
mod rls;
mod semaphore;
mod server;
mod serverstats;
mod slots;
mod stats;
mod watchdog;
mod workloads;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args = match cli::Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("distlock-bench: {message}\n\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    if args.help {
        println!("{}", cli::USAGE);
        return ExitCode::SUCCESS;
    }
    // The default is a current-thread runtime: what the outside benchmark (../shared/peer-bench)
    // and many small services run on, so the figures here are the ones users measure. It
    // schedules the library's batching differently from the multi-thread runtime
    // (`#[tokio::main]`'s), so the ratios are worth taking on both.
    let runtime = match args.runtime {
        cli::Runtime::MultiThread => tokio::runtime::Builder::new_multi_thread(),
        cli::Runtime::CurrentThread => tokio::runtime::Builder::new_current_thread(),
    }
    .enable_all()
    .build();
    match runtime {
        Ok(runtime) => runtime.block_on(bench(args)),
        Err(e) => {
            eprintln!("distlock-bench: cannot start the tokio runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn bench(args: cli::Args) -> ExitCode {
    // The servers this run starts live inside `run`: when a signal ends the run, the future is
    // dropped at the end of `main` and so are they (their `Drop` kills them, after the
    // workload's tasks are aborted), instead of outliving the bench.
    let run = run(args);
    tokio::pin!(run);
    tokio::select! {
        biased;
        signal = shutdown_signal() => {
            eprintln!("distlock-bench: {signal}; stopping");
            ExitCode::from(130)
        }
        code = &mut run => code,
    }
}

/// Resolves on SIGINT or SIGTERM, with the signal's name.
async fn shutdown_signal() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return "interrupted";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupted",
        _ = term.recv() => "terminated",
    }
}

async fn run(args: cli::Args) -> ExitCode {
    let mut targets = workloads::Targets::default();
    let cpus = args.server_cpus.as_deref();
    let _server = if args
        .workloads
        .iter()
        .any(|w| !w.is_cluster() && !w.is_quorum())
    {
        match &args.url {
            Some(url) => {
                targets.single = Some(url.clone());
                None
            }
            None => match server::Server::start(cpus) {
                Ok(server) => {
                    targets.single = Some(server.url());
                    Some(server)
                }
                Err(message) => {
                    eprintln!("distlock-bench: {message}");
                    return ExitCode::FAILURE;
                }
            },
        }
    } else {
        None
    };
    let _cluster = if args.workloads.iter().any(|w| w.is_cluster()) {
        let (cluster, seeds) = if args.cluster_urls.is_empty() {
            match cluster::LocalCluster::start(args.masters, cpus) {
                Ok(cluster) => {
                    let urls = cluster.urls();
                    (Some(cluster), urls)
                }
                Err(message) => {
                    eprintln!("distlock-bench: {message}");
                    return ExitCode::FAILURE;
                }
            }
        } else {
            (None, args.cluster_urls.clone())
        };
        match cluster::Target::discover(seeds).await {
            Ok(target) => {
                eprintln!(
                    "distlock-bench: cluster masters {}",
                    target.masters.join(" ")
                );
                targets.cluster = Some(target);
            }
            Err(message) => {
                eprintln!("distlock-bench: {message}");
                return ExitCode::FAILURE;
            }
        }
        cluster
    } else {
        None
    };
    let mut _quorum = Vec::new();
    if args.workloads.iter().any(|w| w.is_quorum()) {
        if args.quorum_urls.is_empty() {
            for _ in 0..args.quorum_nodes {
                match server::Server::start(cpus) {
                    Ok(server) => _quorum.push(server),
                    Err(message) => {
                        eprintln!("distlock-bench: {message}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            targets.quorum = Some(_quorum.iter().map(server::Server::url).collect());
        } else {
            targets.quorum = Some(args.quorum_urls.clone());
        }
    }
    let mut results = Vec::new();
    for workload in &args.workloads {
        let mut runs: Vec<Vec<report::Outcome>> = vec![Vec::new(); args.peers.len()];
        for round in 0..args.rounds {
            // The order flips every round, so a drift in the machine's speed (another tenant,
            // the server's memory growing) does not favour the peer that always runs first.
            let mut order: Vec<usize> = (0..args.peers.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let peer = args.peers[i];
                let job = workloads::Job {
                    workload: *workload,
                    peer,
                    targets: &targets,
                    args: &args,
                };
                match workloads::run(job).await {
                    Ok(result) => {
                        if args.rounds > 1 {
                            eprintln!(
                                "round {}/{}: {} {}: {:.0} ops/s",
                                round + 1,
                                args.rounds,
                                workload.name(),
                                peer.name(),
                                result.ops_per_s
                            );
                        }
                        runs[i].push(result);
                    }
                    Err(message) => {
                        eprintln!(
                            "distlock-bench: {} / {}: {message}",
                            peer.name(),
                            workload.name()
                        );
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
        for peer_runs in runs {
            let result = report::median(peer_runs);
            println!("{}", result.json());
            results.push(result);
        }
    }
    eprintln!("\n{}", report::table(&results));
    if let Some(path) = &args.chart {
        let title = "distlock vs raw redis-rs: same server, same run";
        match chart::svg(&results, title) {
            Some(svg) => {
                if let Err(e) = std::fs::write(path, svg) {
                    eprintln!("distlock-bench: cannot write {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
                eprintln!("chart written to {}", path.display());
            }
            None => eprintln!("distlock-bench: no workload ran on both peers; no chart"),
        }
    }
    ExitCode::SUCCESS
}
