//! `distlock-bench`: runs each workload through distlock and through a hand-written `redis`
//! baseline ("raw") against the same server in the same run, and prints one JSON line per
//! (peer, workload) plus a table.
//!
//! ```text
//! cargo run --release -p distlock-bench -- [--url redis://127.0.0.1:6379/] [--workloads a,b]
//!     [--peers distlock,raw] [--duration 5s] [--ops N] [--tasks N] [--rounds N]
//! ```
//! Without `--url` it starts its own `redis-server` on a free loopback port.

mod chart;
mod cli;
mod layer;
mod ratelimit;
mod raw;
mod report;
mod server;
mod stats;
mod watchdog;
mod workloads;

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
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
    let (_server, url) = match &args.url {
        Some(url) => (None, url.clone()),
        None => match server::Server::start() {
            Ok(server) => {
                let url = server.url();
                (Some(server), url)
            }
            Err(message) => {
                eprintln!("distlock-bench: {message}");
                return ExitCode::FAILURE;
            }
        },
    };
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
                match workloads::run(*workload, peer, &url, &args).await {
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
