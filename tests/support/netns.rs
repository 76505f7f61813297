//! Network namespaces made by the test itself, for partitions between client processes and
//! servers, and between servers (issue 26 §2).
//!
//! [`Lab::new`] makes one network namespace per client process, `dlh-<pid>-<k>`, joined to the
//! root namespace by a veth pair. Inside a client namespace every TCP connection to
//! `127.0.0.1` is carried over the veth to the root namespace's `127.0.0.1` (nft DNAT and SNAT
//! on both sides, with `route_localnet` on the two veth ends), so the harness's servers, bound
//! to 127.0.0.1, and every address they announce (cluster slots, sentinel answers) work
//! unchanged from inside, and the servers see loopback clients (no protected-mode refusal).
//!
//! * [`Lab::block`] cuts client `k` off from some server ports, both ways (nft `drop` on the
//!   root side's input from that veth, and on the client side's input from those ports): TCP
//!   sees silence, not a reset, as in a real partition. [`Lab::heal`] lifts it.
//! * [`Lab::isolate`] cuts a server process off from the other server processes (replication,
//!   cluster bus, sentinels), both ways: nft drops loopback packets to and from its ports, and
//!   what it sends to the others' ports, told apart by its cgroup (v2, `socket cgroupv2`).
//!   [`Lab::heal_servers`] lifts it.
//!
//! Everything is named after the test process's pid, removed on drop, and removed at the next
//! start if the process that made it is gone (a test that was SIGKILLed). Making a lab needs
//! root, `ip` (iproute2), `nft` (nftables) and a cgroup v2 mount: without them
//! [`Lab::new`] fails with what is missing, so the suite fails loudly instead of skipping.
//! (`tc netem` is not used: the kernels these tests run on may lack it; delays come from the
//! in-test proxy instead.)

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Prefix of every namespace, nft table and cgroup a lab makes.
const PREFIX: &str = "dlh";

/// One client namespace.
#[derive(Debug)]
struct ClientNs {
    name: String,
    root_if: String,
    root_addr: String,
    ns_addr: String,
}

/// The namespaces, veth pairs, nft tables and cgroups of one test process; removed on drop.
#[derive(Debug)]
pub struct Lab {
    pid: u32,
    clients: Vec<ClientNs>,
    table: String,
    cgroup: Option<CgroupRoot>,
}

#[derive(Debug)]
struct CgroupRoot {
    /// Our directory in the cgroup v2 hierarchy.
    dir: PathBuf,
    /// Its path as nft names it (relative to /sys/fs/cgroup).
    nft_path: String,
}

/// Runs `program args` and returns its stdout, or what went wrong.
fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run `{program}`: {e} (install iproute2 and nftables)"))?;
    if let Some(text) = stdin {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(text.as_bytes())
            .map_err(|e| format!("{program}: write stdin: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`{program} {}` failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            stdin.map(|s| format!("\ninput:\n{s}")).unwrap_or_default()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn must(program: &str, args: &[&str], stdin: Option<&str>) -> String {
    run(program, args, stdin).unwrap_or_else(|e| panic!("network lab: {e}"))
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The cgroup v2 mount point, from /proc/mounts.
fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (_, at, kind) = (w.next()?, w.next()?, w.next()?);
            (kind == "cgroup2").then(|| PathBuf::from(at))
        })
        .next()
}

impl Lab {
    /// Makes `clients` client namespaces, after removing what dead test processes left.
    ///
    /// # Errors
    ///
    /// What is missing (not root, no `ip`, no `nft`, a namespace that cannot be made), for the
    /// caller to fail with.
    pub fn new(clients: usize) -> Result<Lab, String> {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("network namespaces need root (run the suite as root, as CI does)".into());
        }
        run("ip", &["-V"], None)?;
        run("nft", &["--version"], None)?;
        clean_stale();
        let pid = std::process::id();
        let table = format!("{PREFIX}_{pid}");
        let mut lab = Lab {
            pid,
            clients: Vec::new(),
            table,
            cgroup: None,
        };
        // Root side: carry each veth's traffic to 127.0.0.1 and back, and the chains that
        // partitions fill.
        let mut rules = format!(
            "table ip {t} {{\n  chain pre {{ type nat hook prerouting priority -100; }}\n  \
             chain nat_in {{ type nat hook input priority 100; }}\n  \
             chain block_in {{ type filter hook input priority 0; }}\n  \
             chain servers_in {{ type filter hook input priority 0; }}\n  \
             chain servers_out {{ type filter hook output priority 0; }}\n}}\n",
            t = lab.table
        );
        let octet2 = 200 + (pid >> 8) % 50;
        let octet3 = pid % 256;
        for k in 0..clients {
            let name = format!("{PREFIX}-{pid}-{k}");
            let root_if = format!("dh{pid:x}x{k}");
            let ns_if = format!("dh{pid:x}y{k}");
            let base = k * 4;
            let root_addr = format!("10.{octet2}.{octet3}.{}", base + 1);
            let ns_addr = format!("10.{octet2}.{octet3}.{}", base + 2);
            run("ip", &["netns", "add", &name], None)?;
            lab.clients.push(ClientNs {
                name: name.clone(),
                root_if: root_if.clone(),
                root_addr: root_addr.clone(),
                ns_addr: ns_addr.clone(),
            });
            run(
                "ip",
                &[
                    "link", "add", &root_if, "type", "veth", "peer", "name", &ns_if,
                ],
                None,
            )?;
            run("ip", &["link", "set", &ns_if, "netns", &name], None)?;
            run(
                "ip",
                &["addr", "add", &format!("{root_addr}/30"), "dev", &root_if],
                None,
            )?;
            run("ip", &["link", "set", &root_if, "up"], None)?;
            run(
                "ip",
                &[
                    "-n",
                    &name,
                    "addr",
                    "add",
                    &format!("{ns_addr}/30"),
                    "dev",
                    &ns_if,
                ],
                None,
            )?;
            run("ip", &["-n", &name, "link", "set", &ns_if, "up"], None)?;
            run("ip", &["-n", &name, "link", "set", "lo", "up"], None)?;
            run(
                "ip",
                &["-n", &name, "route", "add", "default", "via", &root_addr],
                None,
            )?;
            run(
                "sysctl",
                &["-qw", &format!("net.ipv4.conf.{root_if}.route_localnet=1")],
                None,
            )?;
            for iface in ["all", ns_if.as_str()] {
                run(
                    "ip",
                    &[
                        "netns",
                        "exec",
                        &name,
                        "sysctl",
                        "-qw",
                        &format!("net.ipv4.conf.{iface}.route_localnet=1"),
                    ],
                    None,
                )?;
            }
            run(
                "ip",
                &["netns", "exec", &name, "nft", "-f", "-"],
                Some(&format!(
                    "table ip {PREFIX} {{\n  chain out {{ type nat hook output priority -100; \
                     ip daddr 127.0.0.1 meta l4proto tcp dnat to {root_addr}; }}\n  \
                     chain post {{ type nat hook postrouting priority 100; oifname \"{ns_if}\" \
                     snat to {ns_addr}; }}\n  \
                     chain block {{ type filter hook input priority 0; }}\n}}\n"
                )),
            )?;
            let _ = write!(
                rules,
                "add rule ip {t} pre iifname \"{root_if}\" ip daddr {root_addr} dnat to 127.0.0.1\n\
                 add rule ip {t} nat_in iifname \"{root_if}\" snat to 127.0.0.1\n\
                 add chain ip {t} block{k}\n\
                 add rule ip {t} block_in iifname \"{root_if}\" jump block{k}\n",
                t = lab.table
            );
        }
        run("nft", &["-f", "-"], Some(&rules))?;
        if let Some(mount) = cgroup2_mount() {
            let dir = mount.join(&lab.table);
            if fs::create_dir_all(&dir).is_ok() {
                let nft_path = dir
                    .strip_prefix("/sys/fs/cgroup")
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                lab.cgroup = Some(CgroupRoot { dir, nft_path });
            }
        }
        Ok(lab)
    }

    /// Client namespace `k`'s name.
    pub fn netns(&self, k: usize) -> &str {
        &self.clients[k].name
    }

    /// Client `k`'s address, as the servers would see it without the SNAT (for messages).
    pub fn address(&self, k: usize) -> &str {
        &self.clients[k].ns_addr
    }

    /// `program` to run in client namespace `k` (`ip netns exec <ns> program`).
    pub fn command(&self, k: usize, program: &Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.netns(k)]).arg(program);
        cmd
    }

    /// Runs `nft args` inside client namespace `k` (its own `PREFIX` table), panicking if
    /// it fails.
    fn nft_inside(&self, k: usize, args: &[&str]) {
        let mut all = vec!["netns", "exec", self.netns(k), "nft"];
        all.extend_from_slice(args);
        must("ip", &all, None);
    }

    /// Cuts client `k` off from `ports` on 127.0.0.1, both ways, until [`heal`](Self::heal).
    pub fn block(&self, k: usize, ports: &[u16]) {
        if ports.is_empty() {
            return;
        }
        let set = ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        must(
            "nft",
            &[
                "add",
                "rule",
                "ip",
                &self.table,
                &format!("block{k}"),
                "tcp",
                "dport",
                &format!("{{ {set} }}"),
                "drop",
            ],
            None,
        );
        self.nft_inside(
            k,
            &[
                "add",
                "rule",
                "ip",
                PREFIX,
                "block",
                "tcp",
                "sport",
                &format!("{{ {set} }}"),
                "drop",
            ],
        );
        // `nft` accepting the rules is not the partition: a connection from inside must now
        // get silence. (A port nothing listens on answers with a reset, which the rules drop
        // too; only a connection that opens means the cut did not take.)
        let open: Vec<u16> = std::thread::scope(|scope| {
            let probes: Vec<_> = ports
                .iter()
                .map(|&port| scope.spawn(move || (port, self.connects(k, port))))
                .collect();
            probes
                .into_iter()
                .filter_map(|probe| probe.join().ok())
                .filter(|&(_, connected)| connected)
                .map(|(port, _)| port)
                .collect()
        });
        assert!(
            open.is_empty(),
            "network lab: client {k} ({}) still connects to port(s) {open:?} after the \
             partition's nft rules were added: the partition did not take",
            self.netns(k)
        );
    }

    /// Whether a TCP connection from client namespace `k` to `127.0.0.1:port` opens within
    /// 300 ms (bash's `/dev/tcp`, under `timeout`).
    pub fn connects(&self, k: usize, port: u16) -> bool {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                self.netns(k),
                "timeout",
                "0.3",
                "bash",
                "-c",
            ])
            .arg(format!("exec 3<>/dev/tcp/127.0.0.1/{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Lifts every block of client `k`.
    pub fn heal(&self, k: usize) {
        must(
            "nft",
            &["flush", "chain", "ip", &self.table, &format!("block{k}")],
            None,
        );
        self.nft_inside(k, &["flush", "chain", "ip", PREFIX, "block"]);
    }

    /// Cuts server processes off from each other, both ways, until
    /// [`heal_servers`](Self::heal_servers): every packet from a local process to `ports` or
    /// from `ports` to a local process is dropped (loopback only: the clients in the lab's
    /// namespaces keep reaching them), and what the process `pid` sends to `outbound` ports
    /// (its own connections to the others, e.g. a cluster node's bus links) is dropped too.
    ///
    /// A socket belongs to the cgroup its process was in when it was made, so `pid` is moved
    /// into a cgroup of its own and its established connections to `outbound` ports are then
    /// destroyed (`ss -K`): it makes them again at once, from the new cgroup.
    ///
    /// # Panics
    ///
    /// Without a cgroup v2 mount when `outbound` is not empty, or if nft or ss refuse.
    pub fn isolate(&self, ports: &[u16], pid: u32, outbound: &[u16]) {
        let set = |ports: &[u16]| {
            ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut rules = String::new();
        if !ports.is_empty() {
            let _ = writeln!(
                rules,
                "add rule ip {t} servers_in iifname \"lo\" tcp dport {{ {p} }} drop\n\
                 add rule ip {t} servers_in iifname \"lo\" tcp sport {{ {p} }} drop",
                t = self.table,
                p = set(ports)
            );
        }
        if !outbound.is_empty() {
            let Some(cg) = &self.cgroup else {
                panic!("network lab: no cgroup v2 mount, cannot tell server processes apart");
            };
            let dir = cg.dir.join(format!("p{pid}"));
            fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
            fs::write(dir.join("cgroup.procs"), pid.to_string())
                .unwrap_or_else(|e| panic!("move {pid} into {}: {e}", dir.display()));
            let _ = writeln!(
                rules,
                "add rule ip {t} servers_out socket cgroupv2 level 2 \"{path}/p{pid}\" tcp dport {{ {p} }} drop",
                t = self.table,
                path = cg.nft_path,
                p = set(outbound)
            );
        }
        must("nft", &["-f", "-"], Some(&rules));
        if !outbound.is_empty() {
            let filter = outbound
                .iter()
                .map(|p| format!("dport = :{p}"))
                .collect::<Vec<_>>()
                .join(" or ");
            must(
                "ss",
                &[
                    "-K",
                    "-tn",
                    "state",
                    "established",
                    &format!("( {filter} )"),
                ],
                None,
            );
        }
        // As for `block`: a local connection to an isolated port must now get silence.
        let open: Vec<u16> = ports
            .iter()
            .copied()
            .filter(|&port| {
                std::net::TcpStream::connect_timeout(
                    &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
                    std::time::Duration::from_millis(300),
                )
                .is_ok()
            })
            .collect();
        assert!(
            open.is_empty(),
            "network lab: port(s) {open:?} still accept local connections after the \
             isolation's nft rules were added: the isolation did not take"
        );
    }

    /// Lifts every isolation between servers.
    pub fn heal_servers(&self) {
        must(
            "nft",
            &["flush", "chain", "ip", &self.table, "servers_in"],
            None,
        );
        must(
            "nft",
            &["flush", "chain", "ip", &self.table, "servers_out"],
            None,
        );
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        remove(self.pid);
    }
}

/// Removes what the test process `pid` made (never panics).
fn remove(pid: u32) {
    let _ = run(
        "nft",
        &["delete", "table", "ip", &format!("{PREFIX}_{pid}")],
        None,
    );
    if let Ok(list) = run("ip", &["netns", "list"], None) {
        for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
            if name.starts_with(&format!("{PREFIX}-{pid}-")) {
                let _ = run("ip", &["netns", "del", name], None);
            }
        }
    }
    if let Ok(links) = run("ip", &["-o", "link", "show"], None) {
        for link in links.lines().filter_map(|l| l.split(": ").nth(1)) {
            let link = link.split('@').next().unwrap_or(link);
            if link.starts_with(&format!("dh{pid:x}x")) {
                let _ = run("ip", &["link", "del", link], None);
            }
        }
    }
    if let Some(mount) = cgroup2_mount() {
        let dir = mount.join(format!("{PREFIX}_{pid}"));
        if let Ok(entries) = fs::read_dir(&dir) {
            for entry in entries.flatten() {
                // Processes still inside (a server that outlived the test) go back to the root.
                if let Ok(procs) = fs::read_to_string(entry.path().join("cgroup.procs")) {
                    for p in procs.lines() {
                        let _ = fs::write(mount.join("cgroup.procs"), p);
                    }
                }
                let _ = fs::remove_dir(entry.path());
            }
        }
        let _ = fs::remove_dir(&dir);
    }
}

/// Removes the namespaces, tables, links and cgroups of test processes that are gone.
fn clean_stale() {
    let mut dead = std::collections::BTreeSet::new();
    if let Ok(list) = run("ip", &["netns", "list"], None) {
        for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
            if let Some(pid) = name
                .strip_prefix(&format!("{PREFIX}-"))
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
                && !alive(pid)
            {
                dead.insert(pid);
            }
        }
    }
    if let Ok(tables) = run("nft", &["list", "tables"], None) {
        for table in tables.lines() {
            if let Some(pid) = table
                .strip_prefix(&format!("table ip {PREFIX}_"))
                .and_then(|p| p.trim().parse::<u32>().ok())
                && !alive(pid)
            {
                dead.insert(pid);
            }
        }
    }
    for pid in dead {
        eprintln!("network lab: removing what dead test process {pid} left behind");
        remove(pid);
    }
}
