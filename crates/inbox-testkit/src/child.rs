//! The built binary's `serve` as a child process on a loopback port. Either on port 0, its
//! address read from the line it logs on stderr (which is then drained, so the child never
//! blocks on a full pipe), or on a port chosen beforehand: then the address is known before
//! the node is ready, the node can be restarted on the same port, and stderr can go to a file.
//! A child may run under a wrapper that execs it (`ip netns exec NS`), listening on an address
//! of that namespace, so a partition test can cut it off.

use std::ffi::OsString;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// What `agent-inbox serve` writes on stderr once it listens, before its base URL
/// (`http://127.0.0.1:PORT` or `https://...`).
pub const LISTENING_PREFIX: &str = "agent-inbox listening on ";

/// How to start one `serve` child. Reusable: [`Serve::spawn`] may be called again, for a
/// restart in place.
#[derive(Debug, Clone)]
pub struct Serve {
    program: PathBuf,
    wrapper: Vec<OsString>,
    host: IpAddr,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    port: Option<u16>,
    log: Option<PathBuf>,
    echo: bool,
}

impl Serve {
    /// `program serve --listen 127.0.0.1:<port> --database-url <database_url>`, port 0 unless
    /// [`Serve::on_port`] says otherwise.
    pub fn new(program: impl AsRef<Path>, database_url: &str) -> Serve {
        Serve::command(program, ["serve", "--database-url", database_url])
    }

    /// Any command that takes `--listen ADDR` and logs [`LISTENING_PREFIX`] with its address
    /// (the benchmarks' own node process).
    pub fn command<I, S>(program: impl AsRef<Path>, args: I) -> Serve
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Serve {
            program: program.as_ref().to_owned(),
            wrapper: Vec::new(),
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            args: args.into_iter().map(Into::into).collect(),
            envs: Vec::new(),
            port: None,
            log: None,
            echo: false,
        }
    }

    pub fn args<I, S>(mut self, args: I) -> Serve
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// A flag and the path it names.
    pub fn arg_path(self, flag: &str, path: &Path) -> Serve {
        self.args([OsString::from(flag), path.as_os_str().to_owned()])
    }

    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Serve {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Runs the program under `wrapper` (such as `ip netns exec NS`), which must exec it, so that
    /// the child's pid is the server's and a kill reaches it.
    pub fn wrapped_in<I, S>(mut self, wrapper: I) -> Serve
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.wrapper = wrapper.into_iter().map(Into::into).collect();
        self
    }

    /// Listens on `host` instead of 127.0.0.1: an address of the network namespace a wrapper
    /// runs the child in, which the loopback address of this process cannot reach.
    pub fn on_host(mut self, host: IpAddr) -> Serve {
        self.host = host;
        self
    }

    /// Listens on this port instead of port 0.
    pub fn on_port(mut self, port: u16) -> Serve {
        self.port = Some(port);
        self
    }

    /// Sends stderr to a new file at `path`. Needs a known address, so a free port is chosen
    /// beforehand unless [`Serve::on_port`] named one.
    pub fn log_to(mut self, path: impl AsRef<Path>) -> Serve {
        self.log = Some(path.as_ref().to_owned());
        self
    }

    /// Copies the child's stderr to this process's stderr instead of discarding it.
    pub fn echo_stderr(mut self) -> Serve {
        self.echo = true;
        self
    }

    /// Starts the child. On port 0 this returns once the child has logged its address; it does
    /// not wait for readiness (see [`crate::wait_ready`]).
    pub fn spawn(&self) -> Result<ServeChild, String> {
        let port = match (self.port, &self.log) {
            (Some(port), _) => Some(port),
            (None, Some(_)) => Some(crate::free_port()),
            (None, None) => None,
        };
        let mut command = match self.wrapper.split_first() {
            Some((wrapper, wrapper_args)) => {
                let mut command = Command::new(wrapper);
                command.args(wrapper_args).arg(&self.program);
                command
            }
            None => Command::new(&self.program),
        };
        let listen = SocketAddr::new(self.host, port.unwrap_or(0));
        command
            .args(&self.args)
            .arg("--listen")
            .arg(listen.to_string())
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::null());
        match &self.log {
            Some(path) => {
                let file = std::fs::File::create(path)
                    .map_err(|err| format!("cannot create {}: {err}", path.display()))?;
                command.stderr(file);
            }
            None => {
                command.stderr(Stdio::piped());
            }
        }
        let mut child =
            command.spawn().map_err(|err| format!("cannot start {}: {err}", self.program.display()))?;
        let Some(stderr) = child.stderr.take() else {
            let port = port.expect("a log file comes with a port");
            let base = format!("http://{}", SocketAddr::new(self.host, port));
            return Ok(ServeChild { child, base, port });
        };
        let mut lines = BufReader::new(stderr).lines();
        let mut address = None;
        if port.is_none() {
            for line in lines.by_ref() {
                let line = line.map_err(|err| format!("cannot read the child's stderr: {err}"))?;
                if self.echo {
                    eprintln!("{line}");
                }
                if let Some(rest) = line.strip_prefix(LISTENING_PREFIX) {
                    address = rest.split_whitespace().next().map(str::to_owned);
                    break;
                }
            }
        }
        let echo = self.echo;
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if echo {
                    let _ = writeln!(std::io::stderr(), "{line}");
                }
            }
        });
        let (base, port) = match (port, address) {
            (Some(port), _) => (format!("http://{}", SocketAddr::new(self.host, port)), port),
            (None, Some(base)) => {
                let port = base.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
                (base, port)
            }
            (None, None) => {
                let _ = child.kill();
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                return Err(format!("the server exited ({status}) before it said where it listens"));
            }
        };
        Ok(ServeChild { child, base, port })
    }
}

/// A running `serve` child, killed (SIGKILL) when dropped if it still runs.
#[derive(Debug)]
pub struct ServeChild {
    /// The process itself, for signals and `wait`.
    pub child: Child,
    /// `http://127.0.0.1:<port>` (or the host [`Serve::on_host`] named).
    pub base: String,
    pub port: u16,
}

impl ServeChild {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Closes the child's stdin (a graceful stop for a process that serves until its stdin
    /// closes) and waits for it to exit.
    pub fn close_stdin_and_wait(mut self) -> std::io::Result<std::process::ExitStatus> {
        drop(self.child.stdin.take());
        self.child.wait()
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}
