//! The network faults the partition tests make, and only theirs: a network namespace joined to
//! this one by a veth pair (a node runs in it with `ip netns exec`), and cuts, nftables tables
//! that drop chosen packets silently (no RST, no ICMP: sockets stay open and half of them waits,
//! as across a real partition). Each is removed by its guard when dropped, on a failing test
//! too; names carry this process's id, so tests running at once never share one.

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Why network namespaces and nftables cannot be used here (not root, no CAP_NET_ADMIN, `ip` or
/// `nft` missing), or `None` when they can.
pub fn unavailable() -> Option<String> {
    for (program, version, package) in [("ip", "-V", "iproute2"), ("nft", "--version", "nftables")] {
        if Command::new(program).arg(version).stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
            return Some(format!("{program} is not installed (apt-get install {package})"));
        }
    }
    let probe = format!("agent-inbox-probe-{}", std::process::id());
    if let Err(why) = run("ip", &["netns", "add", &probe]) {
        return Some(format!(
            "network namespaces cannot be made here ({why}); run as root with CAP_NET_ADMIN"
        ));
    }
    let tables = run("ip", &["netns", "exec", &probe, "nft", "list", "tables"]);
    let _ = run("ip", &["netns", "del", &probe]);
    tables.err().map(|why| format!("nftables does not work in a network namespace here ({why})"))
}

/// A network namespace with one veth pair to this one: `host_ip` on this side, `inside_ip` in
/// the namespace (a /30 of 10.213.0.0/16 no interface of this machine uses). Deleting the
/// namespace deletes the pair and every table inside it.
pub struct Namespace {
    pub name: String,
    pub host_ip: Ipv4Addr,
    pub inside_ip: Ipv4Addr,
    host_link: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Namespace {
    pub fn new() -> Namespace {
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("agent-inbox-{pid}-{n}");
        // Interface names are at most 15 bytes.
        let (host_link, inside_link) = (format!("aih{pid}x{n}"), format!("ain{pid}x{n}"));
        let (host_ip, inside_ip) = free_subnet(pid, n);
        let namespace = Namespace { name, host_ip, inside_ip, host_link };
        let ns = namespace.name.as_str();
        let steps: [&[&str]; 8] = [
            &["netns", "add", ns],
            &["link", "add", &namespace.host_link, "type", "veth", "peer", "name", &inside_link],
            &["link", "set", &inside_link, "netns", ns],
            &["addr", "add", &format!("{host_ip}/30"), "dev", &namespace.host_link],
            &["link", "set", &namespace.host_link, "up"],
            &["-n", ns, "addr", "add", &format!("{inside_ip}/30"), "dev", &inside_link],
            &["-n", ns, "link", "set", &inside_link, "up"],
            &["-n", ns, "link", "set", "lo", "up"],
        ];
        for step in steps {
            if let Err(why) = run("ip", step) {
                panic!("ip {}: {why}", step.join(" "));
            }
        }
        namespace
    }

    /// The wrapper that runs a command inside this namespace.
    pub fn exec_prefix(&self) -> [String; 4] {
        ["ip".into(), "netns".into(), "exec".into(), self.name.clone()]
    }

    /// Drops, inside this namespace, the packets that arrive matching one of `input` and those
    /// that leave matching one of `output` (nftables rule expressions), until the cut is dropped.
    pub fn cut(&self, input: &[String], output: &[String]) -> Cut {
        Cut::new(Some(self.name.clone()), input, output)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.name]);
        // Gone with the namespace already, unless the namespace never got its end.
        let _ = run("ip", &["link", "del", &self.host_link]);
    }
}

/// An nftables table of this test's own, in a namespace of the test's or in this one (for
/// loopback traffic between processes that share it); deleted when dropped, which heals the cut.
pub struct Cut {
    namespace: Option<String>,
    table: String,
}

impl Cut {
    /// See [`Namespace::cut`]; `namespace` `None` puts the table in this process's namespace,
    /// after deleting any a test process killed before its guards ran left there.
    pub fn new(namespace: Option<String>, input: &[String], output: &[String]) -> Cut {
        if namespace.is_none() {
            remove_abandoned_tables();
        }
        let table =
            format!("agent_inbox_cut_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let chain = |name: &str, hook: &str, rules: &[String]| {
            let rules: String = rules.iter().map(|rule| format!("    {rule} drop\n")).collect();
            format!(
                "  chain {name} {{\n    type filter hook {hook} priority 0; policy accept;\n{rules}  }}\n"
            )
        };
        let script = format!(
            "table inet {table} {{\n{}{}}}\n",
            chain("cut_in", "input", input),
            chain("cut_out", "output", output)
        );
        let cut = Cut { namespace, table };
        let mut child =
            cut.nft().args(["-f", "-"]).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "nft -f:\n{script}\n{}", String::from_utf8_lossy(&out.stderr));
        cut
    }

    fn nft(&self) -> Command {
        match &self.namespace {
            Some(ns) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", ns, "nft"]);
                command
            }
            None => Command::new("nft"),
        }
    }

    /// Lets the packets through again.
    pub fn heal(self) {}
}

impl Drop for Cut {
    fn drop(&mut self) {
        let deleted = self.nft().args(["delete", "table", "inet", &self.table]).output();
        let failed = deleted.as_ref().map_or(true, |out| !out.status.success());
        if failed && !std::thread::panicking() {
            panic!("nft delete table inet {}: {deleted:?}", self.table);
        }
    }
}

/// Deletes this namespace's cut tables whose test process is gone (killed, so no guard ran):
/// their rules name ports that others may take next.
fn remove_abandoned_tables() {
    let Ok(out) = Command::new("nft").args(["list", "tables"]).output() else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(table) = line.strip_prefix("table inet ") else { continue };
        let Some(owner) = table.strip_prefix("agent_inbox_cut_").and_then(|rest| rest.split('_').next())
        else {
            continue;
        };
        if owner.parse::<u32>().is_ok() && !Path::new(&format!("/proc/{owner}")).exists() {
            let _ = run("nft", &["delete", "table", "inet", table]);
        }
    }
}

/// A TCP socket as `/proc/net/tcp` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpSocket {
    pub local_port: u16,
    pub remote_port: u16,
    pub established: bool,
    /// Bytes sent and not acknowledged: a request waiting on a silent peer.
    pub unacknowledged: bool,
    inode: String,
}

impl Namespace {
    /// Every TCP socket of this namespace.
    pub fn tcp_sockets(&self) -> Vec<TcpSocket> {
        ["/proc/net/tcp", "/proc/net/tcp6"]
            .iter()
            .flat_map(|table| {
                let out =
                    Command::new("ip").args(["netns", "exec", &self.name, "cat", table]).output().unwrap();
                parse_proc_net_tcp(&String::from_utf8_lossy(&out.stdout))
            })
            .collect()
    }
}

/// The established TCP connections of process `pid`, in this namespace, from `/proc` (its
/// descriptors' socket inodes, matched in `/proc/net/tcp`).
pub fn tcp_connections_of(pid: u32) -> Vec<TcpSocket> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                .filter_map(|link| {
                    let link = link.to_string_lossy().into_owned();
                    Some(link.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .flat_map(|table| parse_proc_net_tcp(&std::fs::read_to_string(table).unwrap_or_default()))
        .filter(|socket| socket.established && inodes.contains(&socket.inode))
        .collect()
}

/// `sl local_address rem_address st tx_queue:rx_queue tr:when retrnsmt uid timeout inode ...`,
/// addresses as hex `IP:PORT`; state 01 is ESTABLISHED.
fn parse_proc_net_tcp(text: &str) -> Vec<TcpSocket> {
    let port = |address: &str| address.rsplit(':').next().and_then(|hex| u16::from_str_radix(hex, 16).ok());
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 10 {
                return None;
            }
            let tx_queue = fields[4].split(':').next().and_then(|hex| u64::from_str_radix(hex, 16).ok())?;
            Some(TcpSocket {
                local_port: port(fields[1])?,
                remote_port: port(fields[2])?,
                established: fields[3] == "01",
                unacknowledged: tx_queue > 0,
                inode: fields[9].to_owned(),
            })
        })
        .collect()
}

/// A /30 no interface here has: derived from the process id, then the next ones.
fn free_subnet(pid: u32, n: u32) -> (Ipv4Addr, Ipv4Addr) {
    let used =
        String::from_utf8(Command::new("ip").args(["-o", "-4", "addr", "show"]).output().unwrap().stdout)
            .unwrap_or_default();
    for attempt in 0..256u32 {
        let block = (pid.wrapping_mul(8).wrapping_add(n).wrapping_add(attempt * 97)) % 16_384;
        let (third, fourth) = ((block / 64) as u8, ((block % 64) * 4) as u8);
        let host = Ipv4Addr::new(10, 213, third, fourth + 1);
        let inside = Ipv4Addr::new(10, 213, third, fourth + 2);
        let prefix = format!("10.213.{third}.");
        let taken = used.lines().any(|line| {
            line.split_whitespace().skip_while(|w| *w != "inet").nth(1).is_some_and(|a| {
                a.strip_prefix(&prefix)
                    .and_then(|rest| rest.split('/').next()?.parse::<u8>().ok())
                    .is_some_and(|last| last / 4 == fourth / 4)
            })
        });
        if !taken {
            return (host, inside);
        }
    }
    panic!("no free /30 in 10.213.0.0/16");
}

/// Runs a command, its stderr as the error.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()) }
}
