//! A private `mariadbd` the test owns: its own data directory and loopback port, started,
//! paused (SIGSTOP), resumed and killed by the test, never the machine's own server. Its
//! temporary files stay in its own folder, never the `/tmp` other servers share. Besides the
//! loopback address it may listen on one more of this machine's addresses (a veth's, for a
//! node in a network namespace).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use inbox_testkit::free_port;

pub struct PrivateMariaDb {
    dir: PathBuf,
    pub port: u16,
    also_on: Option<IpAddr>,
    child: Option<Child>,
}

impl PrivateMariaDb {
    /// Creates the data directory (system tables included); the server is not started.
    pub fn install(name: &str) -> PrivateMariaDb {
        let dir = std::env::temp_dir().join(format!("agent-inbox-mariadb-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        let installed = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .args(["--user=root", "--skip-test-db", "--auth-root-authentication-method=normal"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("mariadb-install-db runs (apt-get install mariadb-server)");
        assert!(
            installed.status.success(),
            "mariadb-install-db: {}",
            String::from_utf8_lossy(&installed.stderr)
        );
        PrivateMariaDb { dir, port: free_port(), also_on: None, child: None }
    }

    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/agent_inbox_outage", self.port)
    }

    /// Listens on `address` too, from the next start (the address must exist by then).
    pub fn also_listen_on(&mut self, address: IpAddr) {
        self.also_on = Some(address);
    }

    /// The test database's URL through the address [`Self::also_listen_on`] named.
    pub fn url_via(&self, address: IpAddr) -> String {
        assert_eq!(self.also_on, Some(address), "the server listens on {address}");
        format!("mysql://root@{address}:{}/agent_inbox_outage", self.port)
    }

    /// Starts the server and waits until it answers, with the test database created.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "already running");
        let data = self.dir.join("data");
        let bind = match self.also_on {
            Some(address) => format!("--bind-address=127.0.0.1,{address}"),
            None => "--bind-address=127.0.0.1".to_owned(),
        };
        let child = Command::new("/usr/sbin/mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", self.dir.join("tmp").display()))
            .arg(format!("--socket={}", self.dir.join("mariadb.sock").display()))
            .arg(format!("--pid-file={}", self.dir.join("mariadb.pid").display()))
            .arg(format!("--port={}", self.port))
            .arg(bind)
            .args([
                "--user=root",
                "--skip-grant-tables",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=16M",
                "--max-connections=200",
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join("mariadb.err")).unwrap())
            .spawn()
            .expect("start mariadbd");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.answers() {
            assert!(Instant::now() < deadline, "the private mariadbd did not start: {}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        self.sql("CREATE DATABASE IF NOT EXISTS agent_inbox_outage");
    }

    fn answers(&self) -> bool {
        Command::new("mariadb-admin")
            .args(["--no-defaults", "--protocol=tcp", "-h127.0.0.1", &format!("-P{}", self.port), "-uroot"])
            .args(["--connect-timeout=1", "ping"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn sql(&self, statement: &str) {
        let done = Command::new("mariadb")
            .args(["--no-defaults", "--protocol=tcp", "-h127.0.0.1", &format!("-P{}", self.port), "-uroot"])
            .args(["-e", statement])
            .output()
            .expect("the mariadb client runs");
        assert!(done.status.success(), "{statement}: {}", String::from_utf8_lossy(&done.stderr));
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let sent = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(sent.success(), "kill {signal} {pid}");
    }

    /// SIGSTOP: connections stay open and nothing answers, as on a hung or partitioned host.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// SIGKILL, then waits until the process is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("mariadb.err")).unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // SIGKILL works on a stopped process too; continue it first all the same, so it
            // never lingers stopped if the kill fails.
            let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
