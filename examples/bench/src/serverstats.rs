//! What the server spent on a run: `INFO commandstats` and `INFO cpu` read from every node
//! (the single primary, or every master of a cluster) before and after the run, summed over the
//! nodes. On a 2-core machine throughput cannot grow with masters, so the cost per operation is
//! how a cluster path is compared with the single-primary path.
//!
//! Commandstats count the commands a script makes (`redis.call`) as well as the script, and a
//! script's `usec` already includes theirs, so summing every line would count nested work twice.
//! The server time of a run is therefore the `usec` of the commands the client sent itself
//! (every script command, plus whatever plain commands the peer sends: raw's `SET NX PX`).

use std::collections::BTreeMap;

use redis::aio::MultiplexedConnection;

/// Commands that run a script; their `usec` includes the commands the script made.
const SCRIPT_COMMANDS: [&str; 6] = [
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// One command's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    pub calls: u64,
    pub usec: u64,
}

/// Counters of one or more nodes at one moment (or the difference of two such moments).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// By command name as commandstats spell it (`evalsha`, `set`, `client|list`, ...).
    pub commands: BTreeMap<String, Stat>,
    /// `used_cpu_user + used_cpu_sys` in µs: the whole process, I/O included.
    pub cpu_us: f64,
}

impl Snapshot {
    /// Parses the text of `INFO commandstats cpu` (either section may be missing).
    pub fn parse(info: &str) -> Self {
        let mut snapshot = Self::default();
        for line in info.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("cmdstat_") {
                let Some((name, fields)) = rest.split_once(':') else {
                    continue;
                };
                let mut stat = Stat::default();
                for field in fields.split(',') {
                    match field.split_once('=') {
                        Some(("calls", v)) => stat.calls = v.parse().unwrap_or(0),
                        Some(("usec", v)) => stat.usec = v.parse().unwrap_or(0),
                        _ => {}
                    }
                }
                snapshot.commands.insert(name.to_owned(), stat);
            } else if let Some(v) = line
                .strip_prefix("used_cpu_user:")
                .or_else(|| line.strip_prefix("used_cpu_sys:"))
            {
                snapshot.cpu_us += v.parse::<f64>().unwrap_or(0.0) * 1e6;
            }
        }
        snapshot
    }

    /// Adds another node's counters.
    pub fn add(&mut self, other: &Snapshot) {
        for (name, stat) in &other.commands {
            let mine = self.commands.entry(name.clone()).or_default();
            mine.calls += stat.calls;
            mine.usec += stat.usec;
        }
        self.cpu_us += other.cpu_us;
    }

    /// What happened between `before` and `self` (a counter that went down, after a
    /// `CONFIG RESETSTAT` or a restart, counts from zero).
    pub fn since(&self, before: &Snapshot) -> Snapshot {
        let commands = self
            .commands
            .iter()
            .map(|(name, stat)| {
                let old = before.commands.get(name).copied().unwrap_or_default();
                let delta = if stat.calls < old.calls {
                    *stat
                } else {
                    Stat {
                        calls: stat.calls - old.calls,
                        usec: stat.usec.saturating_sub(old.usec),
                    }
                };
                (name.clone(), delta)
            })
            .filter(|(_, stat)| stat.calls > 0)
            .collect();
        Snapshot {
            commands,
            cpu_us: (self.cpu_us - before.cpu_us).max(0.0),
        }
    }

    fn stat(&self, name: &str) -> Stat {
        self.commands.get(name).copied().unwrap_or_default()
    }

    /// Script calls (round trips that ran a script).
    pub fn script_calls(&self) -> u64 {
        SCRIPT_COMMANDS.iter().map(|c| self.stat(c).calls).sum()
    }

    /// Server time of the script calls alone (the commands they made included).
    pub fn script_usec(&self) -> u64 {
        SCRIPT_COMMANDS.iter().map(|c| self.stat(c).usec).sum()
    }

    /// Server time of the commands the client sent itself: every script command plus `plain`
    /// (lower-case names), without double-counting what scripts ran inside.
    pub fn top_level_usec(&self, plain: &[&str]) -> u64 {
        SCRIPT_COMMANDS
            .iter()
            .chain(plain)
            .map(|c| self.stat(c).usec)
            .sum()
    }

    /// Every command executed, the ones scripts made included, except our own `INFO`.
    pub fn commands_executed(&self) -> u64 {
        self.commands
            .iter()
            .filter(|(name, _)| name.as_str() != "info")
            .map(|(_, stat)| stat.calls)
            .sum()
    }
}

/// How a run's operations map onto what the server saw.
#[derive(Debug, Clone, Copy)]
pub struct Accounting<'a> {
    /// Plain (non-script) commands the peer sends itself, e.g. `["set"]` for raw locks.
    pub plain: &'a [&'a str],
    /// Items carried by script calls per operation (distlock's lock cycle: an acquire and a
    /// release; raw's: the release only; a rate-limit check: 1).
    pub scripted_items_per_op: u64,
}

/// The extra JSON fields of a run of `ops` operations that cost `delta` on `nodes` nodes.
pub fn fields(
    delta: &Snapshot,
    ops: u64,
    nodes: usize,
    accounting: Accounting<'_>,
) -> Vec<(&'static str, String)> {
    let per_op = |x: f64| {
        if ops == 0 {
            "null".to_owned()
        } else {
            format!("{:.3}", x / ops as f64)
        }
    };
    let script_calls = delta.script_calls();
    let items_per_call = if script_calls == 0 {
        "null".to_owned()
    } else {
        format!(
            "{:.2}",
            (ops * accounting.scripted_items_per_op) as f64 / script_calls as f64
        )
    };
    let us_per_call = if script_calls == 0 {
        "null".to_owned()
    } else {
        format!("{:.2}", delta.script_usec() as f64 / script_calls as f64)
    };
    vec![
        (
            "server_us_per_op",
            per_op(delta.top_level_usec(accounting.plain) as f64),
        ),
        ("server_cpu_us_per_op", per_op(delta.cpu_us)),
        ("script_calls", script_calls.to_string()),
        ("script_calls_per_op", per_op(script_calls as f64)),
        ("items_per_script_call", items_per_call),
        ("script_us_per_call", us_per_call),
        ("commands_per_op", per_op(delta.commands_executed() as f64)),
        ("masters", nodes.to_string()),
    ]
}

/// Admin connections to the nodes whose counters make up a run's cost.
pub struct Probe {
    nodes: Vec<MultiplexedConnection>,
}

impl Probe {
    pub async fn connect(urls: &[String]) -> Result<Self, String> {
        let mut nodes = Vec::with_capacity(urls.len());
        for url in urls {
            nodes.push(crate::raw::connect(url).await?);
        }
        Ok(Self { nodes })
    }

    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The counters of every node, summed.
    pub async fn snapshot(&mut self) -> Result<Snapshot, String> {
        let mut total = Snapshot::default();
        for conn in &mut self.nodes {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .arg("cpu")
                .query_async(conn)
                .await
                .map_err(|e| format!("INFO commandstats cpu: {e}"))?;
            total.add(&Snapshot::parse(&info));
        }
        Ok(total)
    }

    /// `FLUSHALL` on every node.
    pub async fn flush(&mut self) -> Result<(), String> {
        for conn in &mut self.nodes {
            let () = redis::cmd("FLUSHALL")
                .query_async(conn)
                .await
                .map_err(|e| format!("FLUSHALL: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# Commandstats\r\n\
        cmdstat_set:calls=100,usec=150,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_evalsha:calls=10,usec=400,usec_per_call=40.00,rejected_calls=0,failed_calls=1\r\n\
        cmdstat_client|list:calls=1,usec=20,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_info:calls=3,usec=90,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n\
        \r\n# CPU\r\n\
        used_cpu_sys:0.250000\r\nused_cpu_user:1.500000\r\n\
        used_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n\
        used_cpu_sys_main_thread:0.200000\r\nused_cpu_user_main_thread:1.400000\r\n";

    #[test]
    fn parses_commandstats_and_cpu() {
        let s = Snapshot::parse(BEFORE);
        assert_eq!(s.commands.len(), 4);
        assert_eq!(
            s.commands["set"],
            Stat {
                calls: 100,
                usec: 150
            }
        );
        assert_eq!(
            s.commands["evalsha"],
            Stat {
                calls: 10,
                usec: 400
            }
        );
        assert_eq!(s.commands["client|list"], Stat { calls: 1, usec: 20 });
        // The process's user + sys, not the children's nor the main thread's on their own.
        assert!((s.cpu_us - 1_750_000.0).abs() < 1e-6, "{}", s.cpu_us);
        assert_eq!(Snapshot::parse(""), Snapshot::default());
    }

    #[test]
    fn nodes_add_up_and_a_run_is_the_difference() {
        let one = Snapshot::parse(BEFORE);
        let mut two = one.clone();
        two.add(&one);
        assert_eq!(
            two.commands["evalsha"],
            Stat {
                calls: 20,
                usec: 800
            }
        );
        assert!((two.cpu_us - 3_500_000.0).abs() < 1e-6);

        let after = Snapshot::parse(
            "cmdstat_set:calls=160,usec=250,usec_per_call=1.5\n\
             cmdstat_evalsha:calls=40,usec=1600,usec_per_call=40.0\n\
             cmdstat_get:calls=30,usec=30,usec_per_call=1.0\n\
             cmdstat_client|list:calls=1,usec=20,usec_per_call=20.00\n\
             cmdstat_info:calls=4,usec=120,usec_per_call=30.0\n\
             used_cpu_sys:0.500000\nused_cpu_user:2.000000\n",
        );
        let delta = after.since(&one);
        assert_eq!(
            delta.commands["set"],
            Stat {
                calls: 60,
                usec: 100
            }
        );
        assert_eq!(
            delta.commands["evalsha"],
            Stat {
                calls: 30,
                usec: 1200
            }
        );
        assert_eq!(
            delta.commands["get"],
            Stat {
                calls: 30,
                usec: 30
            }
        );
        assert!(
            !delta.commands.contains_key("client|list"),
            "unchanged lines drop out"
        );
        assert!((delta.cpu_us - 750_000.0).abs() < 1e-3, "{}", delta.cpu_us);

        assert_eq!(delta.script_calls(), 30);
        // Scripts' usec already contains the GETs they made: not counted again.
        assert_eq!(delta.top_level_usec(&[]), 1200);
        assert_eq!(delta.top_level_usec(&["set"]), 1300);
        assert_eq!(
            delta.commands_executed(),
            60 + 30 + 30,
            "INFO is ours, not the run's"
        );
    }

    #[test]
    fn a_reset_counter_counts_from_zero() {
        let before = Snapshot::parse("cmdstat_evalsha:calls=500,usec=9000\n");
        let after = Snapshot::parse("cmdstat_evalsha:calls=7,usec=70\n");
        assert_eq!(
            after.since(&before).commands["evalsha"],
            Stat { calls: 7, usec: 70 }
        );
    }

    #[test]
    fn fields_are_per_operation() {
        let delta = Snapshot::parse(
            "cmdstat_evalsha:calls=250,usec=4000\ncmdstat_set:calls=1000,usec=1000\n\
             cmdstat_get:calls=1000,usec=500\nused_cpu_user:0.006\nused_cpu_sys:0.002\n",
        );
        let accounting = Accounting {
            plain: &[],
            scripted_items_per_op: 2,
        };
        let f: BTreeMap<_, _> = fields(&delta, 500, 3, accounting).into_iter().collect();
        assert_eq!(f["server_us_per_op"], "8.000");
        assert_eq!(f["server_cpu_us_per_op"], "16.000");
        assert_eq!(f["script_calls"], "250");
        assert_eq!(f["script_calls_per_op"], "0.500");
        assert_eq!(f["items_per_script_call"], "4.00");
        assert_eq!(f["script_us_per_call"], "16.00");
        assert_eq!(f["commands_per_op"], "4.500");
        assert_eq!(f["masters"], "3");
        let none: BTreeMap<_, _> = fields(&Snapshot::default(), 0, 1, accounting)
            .into_iter()
            .collect();
        assert_eq!(none["server_us_per_op"], "null");
        assert_eq!(none["items_per_script_call"], "null");
        assert_eq!(none["script_us_per_call"], "null");
    }
}
