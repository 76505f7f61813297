//! Settings, from the environment and the command line. Every one has a default, so the app
//! starts with no setup at all.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use distlock_tower::client_ip::Cidr;

/// How the process was asked to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where to listen (`HOST`, default 127.0.0.1; `PORT` or `--port`, default 3000; port 0
    /// picks a free one).
    pub listen: SocketAddr,
    /// `REDIS_URL`; the in-memory store when unset.
    pub redis_url: Option<String>,
    /// `SEATS`: seats 1..=seats are for sale (default 50).
    pub seats: u32,
    /// `TRUSTED_PROXIES`: comma-separated CIDRs of the load balancers in front of the app,
    /// whose `X-Forwarded-For` is believed. Empty (the default): the peer address is the
    /// client.
    pub trusted_proxies: Vec<Cidr>,
    /// `REPLICA_ID`: how this process names itself in records and logs (default
    /// `replica-<pid>`).
    pub replica: String,
    /// `JOB_PERIOD`: how often the settle-payments job is due (default `2s`).
    pub job_period: Duration,
}

/// A setting that cannot be used; the message says which and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

/// The most seats a shop may have: every seat is a key, and listing them is one response.
pub const MAX_SEATS: u32 = 10_000;

pub const USAGE: &str = "\
ticket-shop: an example of distlock's locks and rate limits

USAGE: ticket-shop [--port PORT]

Environment:
  PORT             port to listen on (default 3000; 0 picks a free one)
  HOST             address to listen on (default 127.0.0.1)
  REDIS_URL        e.g. redis://127.0.0.1:6379/ (default: an in-memory store)
  SEATS            seats for sale (default 50)
  TRUSTED_PROXIES  CIDRs of your load balancers, e.g. 10.0.0.0/8 (default: none)
  REPLICA_ID       this replica's name (default replica-<pid>)
  JOB_PERIOD       how often settle-payments is due (default 2s)
  RUST_LOG         log filter (default info)";

impl Config {
    /// Reads the settings from `vars` (the environment) and `args` (the command line,
    /// without the program name).
    pub fn from_sources(
        vars: impl Fn(&str) -> Option<String>,
        args: impl IntoIterator<Item = String>,
    ) -> Result<Self, ConfigError> {
        let mut port = match vars("PORT") {
            Some(p) => parse_port(&p)?,
            None => 3000,
        };
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            if arg == "--port" {
                let value = args
                    .next()
                    .ok_or_else(|| ConfigError("--port needs a value".into()))?;
                port = parse_port(&value)?;
            } else if let Some(value) = arg.strip_prefix("--port=") {
                port = parse_port(value)?;
            } else {
                return Err(ConfigError(format!("unknown argument {arg:?}\n\n{USAGE}")));
            }
        }
        let host = match vars("HOST") {
            Some(h) => h
                .parse::<IpAddr>()
                .map_err(|_| ConfigError(format!("HOST={h:?} is not an IP address")))?,
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        let seats = match vars("SEATS") {
            Some(s) => match s.trim().parse::<u32>() {
                Ok(n @ 1..=MAX_SEATS) => n,
                _ => {
                    return Err(ConfigError(format!(
                        "SEATS={s:?} must be a whole number from 1 to {MAX_SEATS}"
                    )));
                }
            },
            None => 50,
        };
        let trusted_proxies = match vars("TRUSTED_PROXIES") {
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    s.parse::<Cidr>()
                        .map_err(|e| ConfigError(format!("TRUSTED_PROXIES: {e}")))
                })
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        let replica = match vars("REPLICA_ID") {
            Some(r) if valid_replica(&r) => r,
            Some(r) => {
                return Err(ConfigError(format!(
                    "REPLICA_ID={r:?} must be 1 to 64 letters, digits, '-', '_' or '.'"
                )));
            }
            None => format!("replica-{}", std::process::id()),
        };
        let job_period = match vars("JOB_PERIOD") {
            Some(p) => match humantime::parse_duration(&p) {
                Ok(d) if d >= Duration::from_millis(100) => d,
                _ => {
                    return Err(ConfigError(format!(
                        "JOB_PERIOD={p:?} must be a duration of at least 100ms, e.g. 2s"
                    )));
                }
            },
            None => Duration::from_secs(2),
        };
        Ok(Self {
            listen: SocketAddr::new(host, port),
            redis_url: vars("REDIS_URL").filter(|u| !u.trim().is_empty()),
            seats,
            trusted_proxies,
            replica,
            job_period,
        })
    }

    /// The settings of this process.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_sources(|name| std::env::var(name).ok(), std::env::args().skip(1))
    }
}

fn parse_port(text: &str) -> Result<u16, ConfigError> {
    text.trim()
        .parse()
        .map_err(|_| ConfigError(format!("port {text:?} must be a number from 0 to 65535")))
}

fn valid_replica(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)], args: &[&str]) -> Result<Config, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_sources(
            move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
            args.iter().map(|a| (*a).to_owned()),
        )
    }

    #[test]
    fn defaults_need_no_setup() {
        let c = config(&[], &[]).unwrap();
        assert_eq!(c.listen, "127.0.0.1:3000".parse().unwrap());
        assert_eq!(c.seats, 50);
        assert!(c.redis_url.is_none());
        assert!(c.trusted_proxies.is_empty());
        assert_eq!(c.job_period, Duration::from_secs(2));
    }

    #[test]
    fn the_command_line_port_wins_over_the_environment() {
        let c = config(&[("PORT", "4000")], &["--port", "5000"]).unwrap();
        assert_eq!(c.listen.port(), 5000);
        let c = config(&[("PORT", "4000")], &["--port=0"]).unwrap();
        assert_eq!(c.listen.port(), 0);
    }

    #[test]
    fn trusted_proxies_are_a_list_of_cidrs() {
        let c = config(&[("TRUSTED_PROXIES", "10.0.0.0/8, 192.168.1.1")], &[]).unwrap();
        assert_eq!(c.trusted_proxies.len(), 2);
        assert!(config(&[("TRUSTED_PROXIES", "10.0.0.0/33")], &[]).is_err());
    }

    #[test]
    fn bad_settings_are_refused_with_a_message() {
        for (vars, args) in [
            (vec![("PORT", "http")], vec![]),
            (vec![("SEATS", "0")], vec![]),
            (vec![("SEATS", "1000000")], vec![]),
            (vec![("REPLICA_ID", "a b")], vec![]),
            (vec![("JOB_PERIOD", "soon")], vec![]),
            (vec![("HOST", "localhost")], vec![]),
            (vec![], vec!["--port"]),
            (vec![], vec!["--verbose"]),
        ] {
            let err = config(&vars, &args).expect_err("refused");
            assert!(!err.to_string().is_empty());
        }
    }
}
