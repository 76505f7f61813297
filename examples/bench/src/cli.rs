//! Command-line flags (a handful, parsed by hand).

use std::time::Duration;

use crate::workloads::{Peer, Workload};

pub const USAGE: &str = "\
usage: distlock-bench [flags]
  --url URL            Redis to use (default: start a redis-server on a free port)
  --workloads LIST     comma-separated (default: all); see below
  --peers LIST         distlock,raw (default: both)
  --duration D         time budget per run, humantime (default: 5s; 3s for ratelimit_accuracy)
  --ops N              cap on operations per run (default: the workload's own)
  --tasks N            override the workload's concurrency
  --rounds N           run each (peer, workload) N times, peers alternating, and report the
                       median run by ops/s (errors summed, violations the worst; default: 1)
  --chart FILE         also write an SVG chart of distlock vs raw per workload
  --help

workloads: lock_uncontended_seq lock_uncontended_parallel lock_contended ratelimit_seq
           ratelimit_parallel ratelimit_accuracy ratelimit_denied_hot watchdog_scale layer_overhead";

#[derive(Debug)]
pub struct Args {
    pub url: Option<String>,
    pub workloads: Vec<Workload>,
    pub peers: Vec<Peer>,
    pub duration: Option<Duration>,
    pub ops: Option<u64>,
    pub tasks: Option<usize>,
    pub rounds: usize,
    pub chart: Option<std::path::PathBuf>,
    pub help: bool,
}

impl Args {
    pub fn parse(mut argv: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut args = Args {
            url: None,
            workloads: Workload::ALL.to_vec(),
            peers: vec![Peer::Distlock, Peer::Raw],
            duration: None,
            ops: None,
            tasks: None,
            rounds: 1,
            chart: None,
            help: false,
        };
        while let Some(flag) = argv.next() {
            let mut value = || argv.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--url" => args.url = Some(value()?),
                "--workloads" => {
                    args.workloads = value()?
                        .split(',')
                        .map(|w| {
                            Workload::from_name(w.trim())
                                .ok_or_else(|| format!("unknown workload `{w}`"))
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--peers" => {
                    args.peers = value()?
                        .split(',')
                        .map(|p| {
                            Peer::from_name(p.trim()).ok_or_else(|| format!("unknown peer `{p}`"))
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--duration" => {
                    let v = value()?;
                    args.duration = Some(
                        humantime::parse_duration(&v)
                            .map_err(|e| format!("--duration {v}: {e}"))?,
                    );
                }
                "--ops" => args.ops = Some(value()?.parse().map_err(|e| format!("--ops: {e}"))?),
                "--tasks" => {
                    let n: usize = value()?.parse().map_err(|e| format!("--tasks: {e}"))?;
                    if n == 0 {
                        return Err("--tasks must be at least 1".into());
                    }
                    args.tasks = Some(n);
                }
                "--rounds" => {
                    let n: usize = value()?.parse().map_err(|e| format!("--rounds: {e}"))?;
                    if n == 0 {
                        return Err("--rounds must be at least 1".into());
                    }
                    args.rounds = n;
                }
                "--chart" => args.chart = Some(value()?.into()),
                "--help" | "-h" => args.help = true,
                other => return Err(format!("unknown flag `{other}`")),
            }
        }
        Ok(args)
    }
}
