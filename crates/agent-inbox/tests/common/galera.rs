//! A private 3-member MariaDB Galera cluster that `scripts/galera.sh` starts for one test (never
//! the shared one), stopped when dropped, and what a fault test needs to know of its members:
//! their ports, process ids and state.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Cluster {
    pub dir: PathBuf,
    /// Each member's URL without a database.
    pub urls: Vec<String>,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/galera.sh")
}

impl Cluster {
    /// Starts the members (about 10 to 30 s) and waits until all three are Synced.
    pub fn start(name: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("agent-inbox-galera-{name}-{}", std::process::id()));
        let out = Command::new(script()).arg("start").arg(&dir).output().expect("run scripts/galera.sh");
        assert!(out.status.success(), "galera.sh start: {}", String::from_utf8_lossy(&out.stderr));
        let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let urls = line
            .strip_prefix("AGENT_INBOX_TEST_GALERA_URLS=")
            .expect("galera.sh prints the URLs")
            .split(',')
            .map(|u| u.trim_end_matches('/').to_owned())
            .collect();
        Cluster { dir, urls }
    }

    /// Member `member`'s (1 to 3) folder: under the cluster's, or the private one
    /// `DIR/members` names (see scripts/galera.sh).
    fn home(&self, member: usize) -> PathBuf {
        let root = std::fs::read_to_string(self.dir.join("members"))
            .ok()
            .map(|root| PathBuf::from(root.trim()))
            .filter(|root| !root.as_os_str().is_empty())
            .unwrap_or_else(|| self.dir.clone());
        root.join(format!("member{member}"))
    }

    /// One of member `member`'s ports: `sql`, `gcomm`, `ist` or `sst`.
    pub fn port(&self, member: usize, which: &str) -> u16 {
        let ports =
            std::fs::read_to_string(self.home(member).join("ports")).expect("the member's ports file");
        ports
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{which}="))?.parse().ok())
            .unwrap_or_else(|| panic!("member {member} has no {which} port"))
    }

    pub fn pid(&self, member: usize) -> u32 {
        let pid =
            std::fs::read_to_string(self.home(member).join("mariadbd.pid")).expect("the member's pid file");
        pid.trim().parse().expect("a pid")
    }

    pub fn sql(&self, member: usize, statement: &str) {
        let out = self.client(member).args(["-e", statement]).output().unwrap();
        assert!(out.status.success(), "{statement}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// `wsrep_local_state_comment` and `wsrep_cluster_status`, such as `Synced Primary`.
    pub fn state(&self, member: usize) -> String {
        let out = self
            .client(member)
            .args(["-N", "-e"])
            .arg("SHOW STATUS WHERE Variable_name IN ('wsrep_local_state_comment', 'wsrep_cluster_status')")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let value = |name: &str| {
            text.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or("(no answer)").to_owned()
        };
        format!("{} {}", value("wsrep_local_state_comment"), value("wsrep_cluster_status"))
    }

    /// Waits until `member` is back in the primary component and caught up; how long it took.
    pub async fn wait_synced(&self, member: usize, within: Duration) -> Duration {
        let started = Instant::now();
        loop {
            let state = self.state(member);
            if state == "Synced Primary" {
                return started.elapsed();
            }
            assert!(started.elapsed() < within, "member {member} is not Synced within {within:?}: {state}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn client(&self, member: usize) -> Command {
        let mut command = Command::new("mariadb");
        command
            .args(["--no-defaults", "--protocol=tcp", "-h127.0.0.1", "-uroot", "--connect-timeout=2"])
            .arg(format!("-P{}", self.port(member, "sql")));
        command
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.dir).output();
        if std::thread::panicking() {
            eprintln!("the cluster's and nodes' logs are kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
