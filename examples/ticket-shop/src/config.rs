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
    /// Where locks, limits and records live: `REDIS_URL`, `REDIS_CLUSTER_URLS` or memory.
    pub backend: Backend,
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
    /// `CONSOLE_TOKEN`: the bearer token the operator console at `/admin/console` wants for
    /// every request (unset: the console answers `403` to everyone).
    pub console_token: Option<String>,
    /// `LAZY_START`: `true` starts serving while the Redis of `REDIS_URL` is down; `GET /ready`
    /// answers 503 until it answers, requests meanwhile get 503 (default `false`: exit at
    /// start if Redis cannot be reached). Not with `REDIS_CLUSTER_URLS`.
    pub lazy_start: bool,
}

/// Where the locks, the rate limits and the shop's records live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Neither `REDIS_URL` nor `REDIS_CLUSTER_URLS`: this process's memory (one replica).
    Memory,
    /// `REDIS_URL`: one Redis primary.
    Redis(String),
    /// `REDIS_CLUSTER_URLS`: a Redis Cluster, reached through these nodes (one or more; the
    /// rest of the cluster is discovered from them).
    Cluster(Vec<String>),
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
  REDIS_URL        one Redis, e.g. redis://127.0.0.1:6379/ (default: an in-memory store)
  REDIS_CLUSTER_URLS
                   a Redis Cluster instead: comma-separated node URLs, e.g.
                   redis://127.0.0.1:7001/,redis://127.0.0.1:7002/ (any of its nodes;
                   the rest is discovered). Set REDIS_URL or this, not both.
  SEATS            seats for sale (default 50)
  TRUSTED_PROXIES  CIDRs of your load balancers, e.g. 10.0.0.0/8 (default: none)
  REPLICA_ID       this replica's name (default replica-<pid>)
  JOB_PERIOD       how often settle-payments is due (default 2s)
  LAZY_START       true: start while REDIS_URL's Redis is down and become ready when it
                   answers (GET /ready); default false: exit if it cannot be reached
  CONSOLE_TOKEN    token the console at /admin/console wants for every request, reads
                   included (default: unset, the console is closed)
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
        let console_token = vars("CONSOLE_TOKEN").filter(|t| !t.trim().is_empty());
        let lazy_start = match vars("LAZY_START").as_deref().map(str::trim) {
            None | Some("" | "0" | "false" | "no") => false,
            Some("1" | "true" | "yes") => true,
            Some(other) => {
                return Err(ConfigError(format!(
                    "LAZY_START={other:?} must be true or false"
                )));
            }
        };
        let backend = backend(
            vars("REDIS_URL").filter(|u| !u.trim().is_empty()),
            vars("REDIS_CLUSTER_URLS").filter(|u| !u.trim().is_empty()),
        )?;
        if lazy_start && matches!(backend, Backend::Cluster(_)) {
            return Err(ConfigError(
                "LAZY_START works with REDIS_URL only: a Cluster client learns the cluster's \
                 shape from its nodes at start"
                    .into(),
            ));
        }
        Ok(Self {
            listen: SocketAddr::new(host, port),
            backend,
            seats,
            trusted_proxies,
            replica,
            job_period,
            console_token,
            lazy_start,
        })
    }

    /// The settings of this process.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_sources(|name| std::env::var(name).ok(), std::env::args().skip(1))
    }
}

/// `REDIS_URL` and `REDIS_CLUSTER_URLS` (each already `None` when empty) as a backend.
fn backend(url: Option<String>, cluster: Option<String>) -> Result<Backend, ConfigError> {
    match (url, cluster) {
        (None, None) => Ok(Backend::Memory),
        (Some(url), None) => Ok(Backend::Redis(url.trim().to_owned())),
        (None, Some(list)) => {
            let urls: Vec<String> = list
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect();
            if urls.is_empty() {
                return Err(ConfigError(format!(
                    "REDIS_CLUSTER_URLS={list:?} lists no node; give one or more, \
                     e.g. redis://127.0.0.1:7001/,redis://127.0.0.1:7002/"
                )));
            }
            // A bare `host:port` is the usual slip: say what is expected rather than let the
            // URL parser say something vaguer at connect time.
            if let Some(bad) = urls
                .iter()
                .find(|u| !(u.starts_with("redis://") || u.starts_with("rediss://")))
            {
                return Err(ConfigError(format!(
                    "REDIS_CLUSTER_URLS: {bad:?} is not a redis:// or rediss:// URL, \
                     e.g. redis://127.0.0.1:7001/"
                )));
            }
            Ok(Backend::Cluster(urls))
        }
        (Some(_), Some(_)) => Err(ConfigError(
            "REDIS_URL and REDIS_CLUSTER_URLS are both set: use REDIS_URL for one Redis \
             primary or REDIS_CLUSTER_URLS for the nodes of a Redis Cluster, not both"
                .to_owned(),
        )),
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
        assert_eq!(c.backend, Backend::Memory);
        assert!(c.trusted_proxies.is_empty());
        assert_eq!(c.job_period, Duration::from_secs(2));
    }

    #[test]
    fn lazy_start_is_a_yes_or_no_for_one_primary() {
        assert!(!config(&[], &[]).unwrap().lazy_start);
        let url = ("REDIS_URL", "redis://10.0.0.5:6379/");
        assert!(
            config(&[url, ("LAZY_START", "true")], &[])
                .unwrap()
                .lazy_start
        );
        assert!(!config(&[url, ("LAZY_START", "0")], &[]).unwrap().lazy_start);
        let err = config(&[url, ("LAZY_START", "sometimes")], &[]).unwrap_err();
        assert!(err.to_string().contains("LAZY_START"), "{err}");
        let cluster = ("REDIS_CLUSTER_URLS", "redis://127.0.0.1:7001/");
        let err = config(&[cluster, ("LAZY_START", "yes")], &[]).unwrap_err();
        assert!(err.to_string().contains("REDIS_URL only"), "{err}");
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
    fn redis_url_is_one_primary() {
        let c = config(&[("REDIS_URL", "redis://10.0.0.5:6379/")], &[]).unwrap();
        assert_eq!(c.backend, Backend::Redis("redis://10.0.0.5:6379/".into()));
        // Empty counts as unset (`REDIS_URL=` in a compose file).
        let c = config(&[("REDIS_URL", " ")], &[]).unwrap();
        assert_eq!(c.backend, Backend::Memory);
    }

    #[test]
    fn redis_cluster_urls_are_a_list_of_nodes() {
        let c = config(
            &[(
                "REDIS_CLUSTER_URLS",
                " redis://127.0.0.1:7001/, redis://127.0.0.1:7002/,,rediss://u:p@db.example:7003 ",
            )],
            &[],
        )
        .unwrap();
        assert_eq!(
            c.backend,
            Backend::Cluster(vec![
                "redis://127.0.0.1:7001/".into(),
                "redis://127.0.0.1:7002/".into(),
                "rediss://u:p@db.example:7003".into(),
            ])
        );
        let c = config(&[("REDIS_CLUSTER_URLS", "redis://127.0.0.1:7001")], &[]).unwrap();
        assert_eq!(
            c.backend,
            Backend::Cluster(vec!["redis://127.0.0.1:7001".into()])
        );
        // Empty counts as unset, as for REDIS_URL; so an empty one beside REDIS_URL is fine.
        let c = config(
            &[
                ("REDIS_CLUSTER_URLS", ""),
                ("REDIS_URL", "redis://127.0.0.1:6379/"),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(c.backend, Backend::Redis("redis://127.0.0.1:6379/".into()));
    }

    #[test]
    fn redis_cluster_urls_must_be_urls() {
        let err = config(
            &[("REDIS_CLUSTER_URLS", "127.0.0.1:7001,127.0.0.1:7002")],
            &[],
        )
        .expect_err("refused")
        .to_string();
        assert!(
            err.contains("\"127.0.0.1:7001\" is not a redis://"),
            "{err}"
        );
        let err = config(&[("REDIS_CLUSTER_URLS", " , ,")], &[])
            .expect_err("refused")
            .to_string();
        assert!(err.contains("lists no node"), "{err}");
    }

    #[test]
    fn redis_url_and_redis_cluster_urls_conflict() {
        let err = config(
            &[
                ("REDIS_URL", "redis://127.0.0.1:6379/"),
                ("REDIS_CLUSTER_URLS", "redis://127.0.0.1:7001/"),
            ],
            &[],
        )
        .expect_err("refused")
        .to_string();
        assert!(
            err.contains("REDIS_URL and REDIS_CLUSTER_URLS are both set"),
            "{err}"
        );
    }

    #[test]
    fn usage_names_every_variable() {
        for name in [
            "PORT",
            "HOST",
            "REDIS_URL",
            "REDIS_CLUSTER_URLS",
            "SEATS",
            "TRUSTED_PROXIES",
            "REPLICA_ID",
            "JOB_PERIOD",
            "RUST_LOG",
        ] {
            assert!(USAGE.contains(name), "{name}");
        }
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
            (vec![("REDIS_CLUSTER_URLS", "localhost:7001")], vec![]),
            (
                vec![
                    ("REDIS_URL", "redis://a/"),
                    ("REDIS_CLUSTER_URLS", "redis://b/"),
                ],
                vec![],
            ),
            (vec![], vec!["--port"]),
            (vec![], vec!["--verbose"]),
        ] {
            let err = config(&vars, &args).expect_err("refused");
            assert!(!err.to_string().is_empty());
        }
    }
}
