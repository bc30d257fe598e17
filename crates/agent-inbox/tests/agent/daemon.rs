//! The local wake daemon (`agent-inbox daemon`) end to end: transient `wait` runs answered
//! through its one stream, falling back when it is gone and using it again when it is back,
//! another user's process refused, socket activation under `systemd-socket-activate`, and bad
//! input on its socket that never stops it. And `wait` when the service is away: an
//! unreachable service told from an idle inbox, a restart ridden out.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use inbox_client::local_daemon::LocalDaemon;
use inbox_client::local_daemon::protocol::Status;
use inbox_server::CallerKind;
use serde_json::{Value, json};

use crate::login::agent_inbox;
use crate::support::{AGENT, BIN, Listen, QUICK, Server, TempDir, append_handler, wait_until};

/// A logged-in profile and where its daemon's socket goes.
struct Local {
    home: TempDir,
    socket: PathBuf,
}

impl Local {
    async fn log_in(server: &Server, name: &str) -> Local {
        let home = TempDir::new(name);
        let (_, refresh) =
            server.token(AGENT, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES, true).await;
        let out = agent_inbox(
            &home,
            &["login", "--server", &server.base],
            Some(&format!("{}\n", refresh.unwrap())),
        );
        assert!(out.status.success(), "login: {}", String::from_utf8_lossy(&out.stderr));
        let socket = home.path("run/daemon.sock");
        Local { home, socket }
    }

    /// `agent-inbox ARGS` with this profile's home and socket.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .env("AGENT_INBOX_HOME", &self.home.0)
            .env("AGENT_INBOX_SECRET_STORE", "file")
            .env("AGENT_INBOX_DAEMON_SOCKET", &self.socket)
            .env_remove("AGENT_INBOX_TOKEN")
            .env_remove("XDG_RUNTIME_DIR");
        command
    }

    fn start_daemon(&self) -> Daemon {
        let log = std::fs::File::create(self.home.path("daemon.log")).unwrap();
        let child = self
            .command(&["daemon"])
            .env("AGENT_INBOX_LOG", "info,inbox_client=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start agent-inbox daemon");
        Daemon { child, log: self.home.path("daemon.log") }
    }

    fn daemon(&self) -> LocalDaemon {
        LocalDaemon::at(&self.socket)
    }

    /// The daemon's status, once it follows the profile with a live view.
    async fn live_status(&self) -> Status {
        let daemon = self.daemon();
        wait_until("the daemon follows the profile, live", Duration::from_secs(20), || {
            let daemon = daemon.clone();
            async move { daemon.status().await.is_ok_and(|s| s.identities.iter().any(|i| i.fresh)) }
        })
        .await;
        daemon.status().await.unwrap()
    }

    fn spawn_wait(&self, timeout: &str) -> Child {
        self.spawn_wait_with(&["--timeout", timeout])
    }

    /// `agent-inbox wait ARGS` on this profile.
    fn spawn_wait_with(&self, args: &[&str]) -> Child {
        self.command(&[&["wait"], args].concat())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running `wait`, with the moment it exited.
struct Waiting {
    done: std::sync::mpsc::Receiver<(Instant, std::process::Output)>,
}

impl Waiting {
    fn watch(child: Child) -> Waiting {
        let (tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let output = child.wait_with_output().unwrap();
            let _ = tx.send((Instant::now(), output));
        });
        Waiting { done }
    }

    fn finished(self, within: Duration) -> (Instant, std::process::Output) {
        self.done.recv_timeout(within).expect("wait exited in time")
    }
}

async fn metric(server: &Server, prefix: &str) -> f64 {
    let text =
        server.client.get(format!("{}/metrics", server.base)).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn waiters(local: &Local) -> usize {
    local.daemon().status().await.map(|s| s.identities.iter().map(|i| i.waiters).sum()).unwrap_or(0)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Ten transient `wait` runs, one after another, each answered by the daemon within
/// milliseconds of a publish (the median is printed: a figure, not an assertion), then ten at
/// once: the service sees one stream for the identity however many wait, and no long poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_waits_are_answered_through_the_daemons_one_stream() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let local = Local::log_in(&server, "daemon-waits").await;
    let _daemon = local.start_daemon();
    local.live_status().await;
    let long_polls_before = metric(&server, "agent_inbox_long_polls_total").await;

    let mut latencies = Vec::new();
    for round in 0..10 {
        let waiting = Waiting::watch(local.spawn_wait("60s"));
        wait_until("the daemon holds the wait", Duration::from_secs(20), || async {
            waiters(&local).await == 1
        })
        .await;
        let published = Instant::now();
        server.publish(&publisher, AGENT, "task", json!({"round": round})).await;
        let (exited, output) = waiting.finished(Duration::from_secs(20));
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "1 event(s) waiting");
        latencies.push(exited - published);
        assert_eq!(server.claim_and_acknowledge(&agent, 10).await, 1, "the wait claimed nothing");
    }
    let median_latency = median(latencies.clone());
    println!(
        "daemon wait: publish to exit, median {:.1} ms over {} runs (all: {:?})",
        median_latency.as_secs_f64() * 1000.0,
        latencies.len(),
        latencies.iter().map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0)).collect::<Vec<_>>()
    );

    let waiting: Vec<Waiting> = (0..10).map(|_| Waiting::watch(local.spawn_wait("60s"))).collect();
    wait_until("the daemon holds ten waits", Duration::from_secs(30), || async {
        waiters(&local).await == 10
    })
    .await;
    assert_eq!(metric(&server, "agent_inbox_connected_streams{transport=\"sse\"}").await, 1.0, "one stream");
    assert_eq!(metric(&server, "agent_inbox_connected_streams{transport=\"long-poll\"}").await, 0.0);
    let published = Instant::now();
    server.publish(&publisher, AGENT, "task", json!({"round": "all"})).await;
    let mut together = Vec::new();
    for waiting in waiting {
        let (exited, output) = waiting.finished(Duration::from_secs(20));
        assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "1 event(s) waiting");
        together.push(exited - published);
    }
    println!(
        "daemon wait: ten at once, publish to exit, median {:.1} ms",
        median(together).as_secs_f64() * 1000.0
    );
    assert_eq!(
        metric(&server, "agent_inbox_long_polls_total").await,
        long_polls_before,
        "no wait asked the service itself"
    );
    let status = local.daemon().status().await.unwrap();
    assert_eq!(status.waits_answered, 20);
    assert_eq!(status.identities.len(), 1);
    assert_eq!((status.identities[0].head_seq, status.identities[0].transport.as_str()), (11, "sse"));
}

/// Killed, then its socket removed: `wait` asks the service itself and still returns when
/// work arrives; restarted: `wait` goes through it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_falls_back_without_the_daemon_and_uses_it_again_after_a_restart() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let local = Local::log_in(&server, "daemon-fallback").await;

    let direct_wait = async |why: &str| {
        let waiting = Waiting::watch(local.spawn_wait("60s"));
        wait_until("wait long-polls the service itself", Duration::from_secs(20), || async {
            metric(&server, "agent_inbox_connected_streams{transport=\"long-poll\"}").await == 1.0
        })
        .await;
        server.publish(&publisher, AGENT, "task", json!({})).await;
        let (_, output) = waiting.finished(Duration::from_secs(20));
        assert_eq!(output.status.code(), Some(0), "{why}: {}", String::from_utf8_lossy(&output.stderr));
        assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "1 event(s) waiting", "{why}");
        assert_eq!(server.claim_and_acknowledge(&agent, 10).await, 1);
    };

    // Killed: its socket file stays, and nothing answers it.
    let mut daemon = local.start_daemon();
    local.live_status().await;
    daemon.kill();
    assert!(local.socket.exists());
    direct_wait("the daemon was killed").await;

    // Alive, but its socket removed: it notices and exits, since no one can reach it.
    let mut daemon = local.start_daemon();
    local.live_status().await;
    std::fs::remove_file(&local.socket).unwrap();
    direct_wait("the socket was removed").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while daemon.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "a daemon nobody can reach exits:\n{}", daemon.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(daemon.log().contains("the socket was removed or replaced"), "{}", daemon.log());

    // Restarted: clients use it again.
    let _daemon = local.start_daemon();
    local.live_status().await;
    let waiting = Waiting::watch(local.spawn_wait("60s"));
    wait_until("the daemon holds the wait", Duration::from_secs(20), || async { waiters(&local).await == 1 })
        .await;
    server.publish(&publisher, AGENT, "task", json!({})).await;
    let (_, output) = waiting.finished(Duration::from_secs(20));
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "1 event(s) waiting");
    assert_eq!(local.daemon().status().await.unwrap().waits_answered, 1, "answered by the daemon");
}

/// A process of another user (`nobody`, started with `setpriv`) is refused: by the socket's
/// mode in its 0700 directory, and, where the path was made reachable, by the daemon's check
/// of the peer's user id. The daemon keeps serving its own user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_process_is_refused() {
    assert!(
        std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).ok() == Some(0),
        "this test runs a process as user nobody with setpriv, which needs root (CI runs as root)"
    );
    let server = Server::start(&[]).await;
    let local = Local::log_in(&server, "daemon-peer").await;
    let _daemon = local.start_daemon();
    local.live_status().await;
    let as_nobody = |socket: &Path| {
        let script = "import socket, sys\n\
                      s = socket.socket(socket.AF_UNIX)\n\
                      try:\n    s.connect(sys.argv[1])\n\
                      except OSError as e:\n    print('connect failed:', e.strerror); sys.exit(0)\n\
                      try:\n    s.sendall(b'{\"v\":1,\"op\":\"status\"}\\n')\n\
                      except OSError:\n    pass  # refused before it asked: the answer is there to read\n\
                      print(s.makefile().readline().strip())\n";
        let out = Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3", "-c", script])
            .arg(socket)
            .output()
            .expect("setpriv runs (util-linux)");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let answer = as_nobody(&local.socket);
    assert_eq!(answer.trim(), "connect failed: Permission denied", "the 0700 directory keeps others out");

    // A socket path made reachable (say, a loose AGENT_INBOX_DAEMON_SOCKET): the peer check.
    use std::os::unix::fs::PermissionsExt as _;
    for (path, mode) in
        [(local.home.0.clone(), 0o755), (local.home.path("run"), 0o755), (local.socket.clone(), 0o666)]
    {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let answer: Value = serde_json::from_str(&as_nobody(&local.socket)).unwrap();
    assert_eq!(answer["code"], "peer_refused", "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("runs as user id 65534"), "{answer}");

    // `daemon status` of that user names the refusal every time, whether its request was sent
    // before the daemon hung up or ran into the closed socket (EPIPE).
    for run in 0..10 {
        let out = Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", BIN, "daemon", "status"])
            .env("AGENT_INBOX_HOME", &local.home.0)
            .env("AGENT_INBOX_DAEMON_SOCKET", &local.socket)
            .env_remove("XDG_RUNTIME_DIR")
            .output()
            .expect("setpriv runs (util-linux)");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "run {run}: {stderr}");
        assert!(
            stderr.contains("the local daemon refused") && stderr.contains("(peer_refused)"),
            "run {run}: {stderr}"
        );
    }
    assert!(local.daemon().status().await.is_ok(), "its own user is still served");
}

/// Under `systemd-socket-activate` the daemon serves the socket it inherits (LISTEN_FDS),
/// answers a wait through it, and exits once idle, as a socket-activated service does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_activation_serves_the_inherited_socket_and_exits_when_idle() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let local = Local::log_in(&server, "daemon-activation").await;
    std::fs::create_dir_all(local.home.path("run")).unwrap();
    let log = std::fs::File::create(local.home.path("daemon.log")).unwrap();
    let mut activator = Command::new("systemd-socket-activate")
        .arg("--listen")
        .arg(&local.socket)
        .args(["-E", "AGENT_INBOX_HOME", "-E", "AGENT_INBOX_SECRET_STORE", "-E", "AGENT_INBOX_LOG"])
        .args([BIN, "daemon", "--idle-exit", "2s"])
        .env("AGENT_INBOX_HOME", &local.home.0)
        .env("AGENT_INBOX_SECRET_STORE", "file")
        .env("AGENT_INBOX_LOG", "info")
        .stderr(log)
        .spawn()
        .expect("systemd-socket-activate runs (scripts/test.sh installs the systemd package)");
    wait_until("the activator listens", Duration::from_secs(20), || async { local.socket.exists() }).await;
    let status = local.live_status().await;
    assert_eq!(status.listener, "inherited", "{status:?}");
    assert_eq!(status.pid, activator.id(), "the activator execs the daemon in place");

    let waiting = Waiting::watch(local.spawn_wait("60s"));
    wait_until("the daemon holds the wait", Duration::from_secs(20), || async { waiters(&local).await == 1 })
        .await;
    server.publish(&publisher, AGENT, "task", json!({})).await;
    let (_, output) = waiting.finished(Duration::from_secs(20));
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "1 event(s) waiting");

    let deadline = Instant::now() + Duration::from_secs(20);
    let exited = loop {
        if let Some(status) = activator.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the daemon exits after 2 s without clients");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let log = std::fs::read_to_string(local.home.path("daemon.log")).unwrap();
    assert!(exited.success(), "{exited:?}\n{log}");
    assert!(log.contains("listener=\"inherited\"") && log.contains("no local client for a while"), "{log}");
}

/// Garbage, a line over the limit, an unknown version, a peer that stops mid-line, idle
/// peers and more clients than it takes: each gets a clear error, and the daemon goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_error_and_never_stops_the_daemon() {
    let server = Server::start(&[]).await;
    let local = Local::log_in(&server, "daemon-bad-input").await;
    let mut daemon = local.start_daemon();
    local.live_status().await;
    let socket = local.socket.clone();
    let connect = move || {
        let stream = UnixStream::connect(&socket).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        stream
    };
    let answer = |stream: &UnixStream| -> Value {
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("a JSON line: {line:?}"))
    };
    let closed = |mut stream: &UnixStream| {
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "nothing after the last answer");
    };

    {
        let stream = connect();
        (&stream).write_all(b"hello daemon\n").unwrap();
        let bad = answer(&stream);
        assert_eq!(bad["code"], "bad_request");
        assert!(bad["message"].as_str().unwrap().contains(r#"{"v":1,"op":"status"}"#), "{bad}");
        (&stream).write_all(b"{\"v\":2,\"op\":\"status\"}\n").unwrap();
        assert_eq!(answer(&stream)["code"], "unsupported_version");
        (&stream).write_all(b"{\"v\":1,\"op\":\"status\"}\n").unwrap();
        assert_eq!(answer(&stream)["type"], "status", "a client may go on after a bad line");

        let stream = connect();
        let huge = vec![b'x'; 1024 * 1024];
        let _ = (&stream).write_all(&huge);
        let too_long = answer(&stream);
        assert_eq!(too_long["code"], "line_too_long");
        assert!(too_long["message"].as_str().unwrap().contains("at most 4096 bytes"), "{too_long}");
        closed(&stream);

        // A peer that stops mid-line and shuts its side: the partial line is answered as one.
        let stream = connect();
        (&stream).write_all(b"{\"v\":1,\"op\":\"sta").unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(answer(&stream)["code"], "bad_request");
        closed(&stream);
    }
    // Half-open peers that send nothing, as many as the daemon takes: one more is told so;
    // the idle ones are hung up on with a reason; meanwhile status still answers.
    wait_until("the earlier clients are gone", Duration::from_secs(20), || async {
        local.daemon().status().await.is_ok_and(|s| s.clients == 1)
    })
    .await;
    let idle: Vec<UnixStream> = (0..256).map(|_| connect()).collect();
    let busy = answer(&connect());
    assert_eq!(busy["code"], "too_many_clients", "{busy}");
    for _ in 0..10 {
        // The client's own request may run into the refusal's hang-up: still named.
        match local.daemon().status().await {
            Err(inbox_client::local_daemon::DaemonError::Refused { code, .. }) => {
                assert_eq!(code, inbox_client::local_daemon::protocol::ErrorCode::TooManyClients);
            }
            other => panic!("one client too many is told so: {other:?}"),
        }
    }
    let timed_out = answer(&idle[0]);
    assert_eq!(timed_out["code"], "idle_timeout", "{timed_out}");
    assert!(timed_out["message"].as_str().unwrap().contains("no request within 10 s"), "{timed_out}");
    drop(idle);
    wait_until("the idle clients are gone", Duration::from_secs(20), || async {
        local.daemon().status().await.is_ok_and(|s| s.clients == 1)
    })
    .await;
    assert!(daemon.child.try_wait().unwrap().is_none(), "the daemon still runs:\n{}", daemon.log());
    assert!(local.live_status().await.identities[0].fresh);
}

/// `listen` on a login profile hears the daemon's hints instead of holding a stream of its
/// own: its events are handled while the service counts one stream, the daemon's. With the
/// daemon killed it opens its own stream at once and goes on handling events; with the daemon
/// back, it leaves its stream for the daemon's hints again (checked every --upgrade-after).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_hears_the_daemon_and_falls_back_to_its_own_stream() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let local = Local::log_in(&server, "daemon-listen").await;
    let mut daemon = local.start_daemon();
    local.live_status().await;
    let mut command = local.command(&["listen", "--log-json", "--exec", &append_handler(&local.home)]);
    command.args(QUICK).args(["--upgrade-after", "1s"]).env("AGENT_INBOX_LOG", "info,inbox_client=debug");
    let listen = Listen::spawn_command(command);
    let on = |kind: &str| [("transport", json!(kind)), ("connected", json!(true))];
    wait_until("listen hears the daemon", Duration::from_secs(20), || async {
        listen.logged("transport", &on("daemon"))
    })
    .await;
    let first = server.publish(&publisher, AGENT, "task", json!({"n": 1})).await;
    wait_until("the event is handled", Duration::from_secs(20), || async {
        local.home.lines("handled") == vec![first.clone()]
    })
    .await;
    assert_eq!(
        metric(&server, "agent_inbox_connected_streams{transport=\"sse\"}").await,
        1.0,
        "the daemon's only"
    );
    assert_eq!(
        local.daemon().status().await.unwrap().identities[0].watchers,
        1,
        "listen watches the daemon:\n{}",
        listen.dump()
    );

    daemon.kill();
    wait_until("listen holds its own stream", Duration::from_secs(20), || async {
        listen.logged("transport", &on("sse"))
    })
    .await;
    let second = server.publish(&publisher, AGENT, "task", json!({"n": 2})).await;
    wait_until("the next event is handled", Duration::from_secs(20), || async {
        local.home.lines("handled") == vec![first.clone(), second.clone()]
    })
    .await;

    let _daemon = local.start_daemon();
    local.live_status().await;
    wait_until("listen hears the restarted daemon", Duration::from_secs(20), || async {
        local.daemon().status().await.is_ok_and(|s| s.identities[0].watchers == 1)
    })
    .await;
    wait_until("listen's own stream is closed", Duration::from_secs(20), || async {
        metric(&server, "agent_inbox_connected_streams{transport=\"sse\"}").await == 1.0
    })
    .await;
    let third = server.publish(&publisher, AGENT, "task", json!({"n": 3})).await;
    wait_until("the event after the restart is handled", Duration::from_secs(20), || async {
        local.home.lines("handled").last() == Some(&third)
    })
    .await;
}

/// The exit code of a `wait` that found the service unreachable (EX_UNAVAILABLE).
const UNREACHABLE: i32 = 69;

/// Runs `agent-inbox wait ARGS` to its end; returns its exit code, stderr and how long it took.
fn run_wait(mut command: Command, within: Duration) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (exited, output) = Waiting::watch(child).finished(within);
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned(), exited - started)
}

/// A port nothing listens on: connections to it are refused.
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// With no server (a dead port), `wait` exits 69 within --unreachable-after, saying what did
/// not answer and since when, with or without --timeout; a --timeout shorter than the bound
/// still ends in 69, not "no work". An idle inbox exits 1; with the server gone, the profile's
/// wait names the missing daemon too; and a daemon that lost the service sends `wait` to it,
/// which then finds it unreachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_tells_an_unreachable_service_from_an_idle_inbox() {
    let dead = format!("http://127.0.0.1:{}", dead_port());
    let by_token = |args: &[&str]| {
        let mut command = Command::new(BIN);
        command.args(["wait", "--server", &dead, "--token", "not-needed"]).args(args);
        command.env_remove("AGENT_INBOX_TOKEN");
        command
    };
    let unreachable_line = |stderr: &str| {
        assert!(
            stderr.contains(&format!("the service at {dead} is unreachable: no answer since 20")),
            "{stderr}"
        );
        assert!(stderr.contains("connection failed"), "{stderr}");
        assert!(!stderr.contains("no work arrived"), "{stderr}");
    };

    // No --timeout: the bound alone ends it.
    let (code, stderr, took) = run_wait(by_token(&["--unreachable-after", "2s"]), Duration::from_secs(30));
    assert_eq!(code, Some(UNREACHABLE), "{stderr}");
    unreachable_line(&stderr);
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(5), "{took:?}");
    // A --timeout below the (default, 30 s) bound: unreachable at the deadline, not "no work".
    let (code, stderr, took) = run_wait(by_token(&["--timeout", "1s"]), Duration::from_secs(30));
    assert_eq!(code, Some(UNREACHABLE), "{stderr}");
    unreachable_line(&stderr);
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(4), "{took:?}");
    // A --timeout above the bound: the bound.
    let (code, stderr, took) =
        run_wait(by_token(&["--timeout", "60s", "--unreachable-after", "1s"]), Duration::from_secs(30));
    assert_eq!(code, Some(UNREACHABLE), "{stderr}");
    assert!(took < Duration::from_secs(4), "{took:?}");

    // A server that takes the connection and never answers: a --timeout of 1 s gives its
    // first look a moment's grace past the time, then says so.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let mut command = Command::new(BIN);
    command.args(["wait", "--server", &silent_url, "--token", "not-needed", "--timeout", "1s"]);
    let (code, stderr, took) = run_wait(command, Duration::from_secs(30));
    assert_eq!(code, Some(UNREACHABLE), "{stderr}");
    assert!(stderr.contains(&format!("the service at {silent_url} is unreachable")), "{stderr}");
    assert!(stderr.contains("last: no answer within 3 s"), "{stderr}");
    assert!(took >= Duration::from_secs(3) && took < Duration::from_secs(6), "{took:?}");
    drop(silent);

    // The same profile, its server running: an idle inbox is 1.
    let mut server = Server::start(&[]).await;
    let local = Local::log_in(&server, "wait-unreachable").await;
    let (code, stderr, _) = run_wait(local.command(&["wait", "--timeout", "1s"]), Duration::from_secs(30));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("no work arrived within 1s"), "{stderr}");

    // A daemon following it, then the server gone: the daemon turns stale and sends the wait
    // to the service, which does not answer.
    let _daemon = local.start_daemon();
    local.live_status().await;
    server.kill();
    let (code, stderr, took) =
        run_wait(local.command(&["wait", "--unreachable-after", "2s"]), Duration::from_secs(30));
    assert_eq!(code, Some(UNREACHABLE), "{stderr}");
    assert!(stderr.contains(&format!("the service at {} is unreachable", server.base)), "{stderr}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    drop(_daemon);

    // No daemon and no server: both named.
    let (code, stderr, took) =
        run_wait(local.command(&["wait", "--unreachable-after", "2s"]), Duration::from_secs(30));
    assert_eq!(code, Some(UNREACHABLE), "{stderr}");
    assert!(stderr.contains(&format!("the service at {} is unreachable", server.base)), "{stderr}");
    assert!(stderr.contains("no local daemon answers at"), "{stderr}");
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(5), "{took:?}");
}

/// A server killed under a waiting `wait` and started again a few seconds later: the wait,
/// with the default --unreachable-after, rides out the outage and reports the work published
/// after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_rides_out_a_short_outage() {
    let mut server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let local = Local::log_in(&server, "wait-outage").await;
    let waiting = Waiting::watch(local.spawn_wait_with(&["--timeout", "120s"]));
    wait_until("wait long-polls the service itself", Duration::from_secs(20), || async {
        metric(&server, "agent_inbox_connected_streams{transport=\"long-poll\"}").await == 1.0
    })
    .await;
    server.kill();
    let outage = Instant::now();
    // The outage itself, not a wait for a condition: a restart takes a few seconds.
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.start_again().await;
    let outage = outage.elapsed();
    server.publish(&publisher, AGENT, "task", json!({})).await;
    let (_, output) = waiting.finished(Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "after an outage of {outage:?}: {stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "1 event(s) waiting");
}
