//! Redis Cluster for the `cluster_*` workloads: a throw-away local one (masters only, on free
//! loopback ports, each node in its own temporary directory, all killed and removed on drop),
//! or the one `--cluster-url` points at; and the discovery of its masters, whose counters make
//! up a run's server cost.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::server;

/// The cluster a run uses: the URLs clients start from, and every master's URL.
#[derive(Debug, Clone)]
pub struct Target {
    pub seeds: Vec<String>,
    pub masters: Vec<String>,
}

impl Target {
    /// Asks the first seed for the cluster's masters.
    pub async fn discover(seeds: Vec<String>) -> Result<Self, String> {
        let seed = seeds.first().ok_or("no cluster URL")?;
        let mut conn = crate::raw::connect(seed).await?;
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut conn)
            .await
            .map_err(|e| format!("CLUSTER NODES on {seed}: {e} (is it a cluster node?)"))?;
        let masters = masters(&nodes)
            .into_iter()
            .map(|(host, port)| with_address(seed, &host, port))
            .collect::<Result<Vec<_>, _>>()?;
        if masters.is_empty() {
            return Err(format!("{seed} knows no master that serves slots"));
        }
        Ok(Self { seeds, masters })
    }
}

/// (host, port) of every master in a `CLUSTER NODES` reply that serves slots and is not
/// failed. An empty host (a node that has not learnt its own address) comes back empty.
pub fn masters(cluster_nodes: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for line in cluster_nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // id addr flags master ping pong epoch link [slot ...]
        if fields.len() < 9 {
            continue;
        }
        let flags: Vec<&str> = fields[2].split(',').collect();
        if !flags.contains(&"master")
            || flags
                .iter()
                .any(|f| matches!(*f, "fail" | "noaddr" | "handshake"))
        {
            continue;
        }
        // ip:port@cport[,hostname]
        let addr = fields[1].split(['@', ',']).next().unwrap_or_default();
        let Some((host, port)) = addr.rsplit_once(':') else {
            continue;
        };
        let Ok(port) = port.parse::<u16>() else {
            continue;
        };
        out.push((host.to_owned(), port));
    }
    out.sort();
    out
}

/// `url` with its host and port replaced (scheme, credentials and path kept). An empty `host`
/// keeps the URL's own.
pub fn with_address(url: &str, host: &str, port: u16) -> Result<String, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("not a URL: {url}"))?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((user, hostport)) => (format!("{user}@"), hostport),
        None => (String::new(), authority),
    };
    let own_host = if hostport.starts_with('[') {
        hostport
            .split_once(']')
            .map_or(hostport, |(h, _)| h)
            .trim_start_matches('[')
    } else {
        hostport.split(':').next().unwrap_or(hostport)
    };
    let host = if host.is_empty() { own_host } else { host };
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    Ok(format!("{scheme}://{userinfo}{host}:{port}{tail}"))
}

/// Whether a node's `CLUSTER INFO` says the cluster is up, with every slot served and all
/// `nodes` known.
pub fn ready(cluster_info: &str, nodes: usize) -> bool {
    let field = |name: &str| {
        cluster_info
            .lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
    };
    field("cluster_state") == Some("ok")
        && field("cluster_slots_ok") == Some("16384")
        && field("cluster_known_nodes").and_then(|n| n.parse::<usize>().ok()) == Some(nodes)
}

/// A local cluster of masters without replicas.
pub struct LocalCluster {
    nodes: Vec<Child>,
    ports: Vec<u16>,
    dir: PathBuf,
}

impl LocalCluster {
    /// Starts `masters` nodes (pinned to `cpus` if given), joins them with
    /// `redis-cli --cluster create`, and waits until every node reports `cluster_state:ok`.
    pub fn start(masters: usize, cpus: Option<&str>) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!(
            "distlock-bench-cluster-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        // From here on, dropping `cluster` kills what started and removes the directory.
        let mut cluster = Self {
            nodes: Vec::with_capacity(masters),
            ports: Vec::with_capacity(masters),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        for _ in 0..masters {
            let port = cluster_port(&cluster.ports)?;
            let node_dir = cluster.dir.join(port.to_string());
            std::fs::create_dir_all(&node_dir)
                .map_err(|e| format!("cannot create {}: {e}", node_dir.display()))?;
            let port_arg = port.to_string();
            let dir_arg = node_dir.to_string_lossy().into_owned();
            let args = [
                "--port",
                &port_arg,
                "--bind",
                "127.0.0.1",
                "--dir",
                &dir_arg,
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--save",
                "",
                "--appendonly",
                "no",
            ];
            let log = node_dir.join("redis.log");
            let child = server::spawn(&args, cpus, Some(&node_dir), Some(&log))?;
            cluster.nodes.push(child);
            cluster.ports.push(port);
        }
        for i in 0..masters {
            let port = cluster.ports[i];
            server::wait_listening(&mut cluster.nodes[i], port, deadline)
                .map_err(|e| format!("{e}\n{}", cluster.log_tail(port)))?;
        }
        cluster.create()?;
        cluster.wait_ready(Instant::now() + Duration::from_secs(30))?;
        eprintln!(
            "distlock-bench: started a {masters}-master cluster on 127.0.0.1 ports {:?} (pids {:?}{})",
            cluster.ports,
            cluster.nodes.iter().map(Child::id).collect::<Vec<_>>(),
            cpus.map_or_else(String::new, |c| format!(", CPUs {c}"))
        );
        Ok(cluster)
    }

    pub fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect()
    }

    /// `redis-cli --cluster create`, bounded in time, its output kept for the error.
    fn create(&self) -> Result<(), String> {
        let out_path = self.dir.join("create.log");
        let out = std::fs::File::create(&out_path).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut command = Command::new("redis-cli");
        command.args(["--cluster", "create"]);
        for port in &self.ports {
            command.arg(format!("127.0.0.1:{port}"));
        }
        let mut child = command
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot run redis-cli ({e}); install redis-tools"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break std::process::ExitStatus::default();
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let output = std::fs::read_to_string(&out_path).unwrap_or_default();
        // redis-cli exits 0 on some failures; its last line says whether all slots are covered.
        if !status.success() || !output.contains("All 16384 slots covered") {
            return Err(format!(
                "redis-cli --cluster create failed ({status}):\n{}",
                tail(&output, 20)
            ));
        }
        Ok(())
    }

    fn wait_ready(&self, deadline: Instant) -> Result<(), String> {
        for &port in &self.ports {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .map_err(|e| e.to_string())?;
            loop {
                let info = client
                    .get_connection_with_timeout(Duration::from_secs(1))
                    .and_then(|mut conn| {
                        redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut conn)
                    })
                    .unwrap_or_default();
                if ready(&info, self.ports.len()) {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "node 127.0.0.1:{port} never reported cluster_state:ok:\n{}",
                        tail(&info, 20)
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    fn log_tail(&self, port: u16) -> String {
        let log = self.dir.join(port.to_string()).join("redis.log");
        tail(&std::fs::read_to_string(log).unwrap_or_default(), 10)
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for child in &mut self.nodes {
            let _ = child.kill();
        }
        for child in &mut self.nodes {
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A free port whose cluster bus port (+10 000) is free too, not one of `taken`.
fn cluster_port(taken: &[u16]) -> Result<u16, String> {
    for _ in 0..200 {
        let port = server::free_port()?;
        if port > u16::MAX - 10_000 || taken.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    Err("cannot find a free port pair for a cluster node".into())
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_masters_that_serve_slots() {
        let nodes = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002,host2 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 master,fail - 0 1426238316232 5 connected 1-2
824fe116063bc5fcf9f4ffd895bc17aee7731ac3 127.0.0.1:30006@31006 master - 0 1426238317741 6 connected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460
aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa ::1:30007@31007 master - 0 0 7 connected 3 [4->-bbbb]
bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb :30008@31008 myself,master - 0 0 8 connected 5
";
        assert_eq!(
            masters(nodes),
            vec![
                (String::new(), 30008),
                ("127.0.0.1".to_owned(), 30001),
                ("127.0.0.1".to_owned(), 30002),
                ("127.0.0.1".to_owned(), 30003),
                ("::1".to_owned(), 30007),
            ],
            "no replica, no failed master, no master without slots"
        );
        assert!(masters("").is_empty());
    }

    #[test]
    fn rewrites_a_url_to_another_node() {
        assert_eq!(
            with_address("redis://127.0.0.1:7001/", "10.0.0.2", 7002).unwrap(),
            "redis://10.0.0.2:7002/"
        );
        assert_eq!(
            with_address(
                "rediss://user:p%40ss@seed.example:6379/0?x=1",
                "10.0.0.3",
                6380
            )
            .unwrap(),
            "rediss://user:p%40ss@10.0.0.3:6380/0?x=1"
        );
        assert_eq!(
            with_address("redis://seed:7001", "", 7005).unwrap(),
            "redis://seed:7005",
            "an empty host keeps the seed's"
        );
        assert_eq!(
            with_address("redis://[::1]:7001/", "", 7002).unwrap(),
            "redis://[::1]:7002/"
        );
        assert_eq!(
            with_address("redis://h:1/", "::1", 7002).unwrap(),
            "redis://[::1]:7002/"
        );
        assert!(with_address("127.0.0.1:7001", "h", 1).is_err());
    }

    #[test]
    fn ready_needs_state_ok_every_slot_and_every_node() {
        let info = "cluster_enabled:1\r\ncluster_state:ok\r\ncluster_slots_assigned:16384\r\n\
                    cluster_slots_ok:16384\r\ncluster_slots_pfail:0\r\ncluster_known_nodes:3\r\n";
        assert!(ready(info, 3));
        assert!(!ready(info, 4), "a node not yet met");
        assert!(!ready(&info.replace("state:ok", "state:fail"), 3));
        assert!(!ready(&info.replace("slots_ok:16384", "slots_ok:10923"), 3));
        assert!(!ready("", 3));
    }
}
