//! `service install | status | uninstall` with a stand-in `systemctl` on PATH: the unit is
//! printed by --dry-run, refused clearly when there is no user service manager, and written,
//! enabled and removed through `systemctl --user` when there is one.

use std::path::Path;
use std::process::Command;

use inbox_client::{Home, Profile, SecretStoreKind};

use crate::support::{BIN, TempDir};

/// A fake `systemctl` that logs its arguments and exits with `code`.
fn fake_systemctl(bin: &Path, log: &Path, code: i32) {
    std::fs::create_dir_all(bin).unwrap();
    let script = format!(
        "#!/bin/sh\necho \"$*\" >> '{}'\n[ {code} -ne 0 ] && echo 'Failed to connect to bus: No medium found' >&2\nexit {code}\n",
        log.display()
    );
    let path = bin.join("systemctl");
    std::fs::write(&path, script).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

fn service(dir: &TempDir, path_env: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("service")
        .args(args)
        .env("HOME", dir.path("home"))
        .env("XDG_CONFIG_HOME", dir.path("config"))
        .env("AGENT_INBOX_HOME", dir.path("agent-home"))
        .env("PATH", path_env)
        .output()
        .unwrap()
}

fn log_in(dir: &TempDir) {
    Home::at(dir.path("agent-home"))
        .save_profile(
            "default",
            &Profile {
                server_url: "http://127.0.0.1:9".into(),
                secret_store: SecretStoreKind::File,
                tenant_id: "t1".into(),
                agent_id: "agent_alpha".into(),
            },
        )
        .unwrap();
}

#[test]
#[cfg(target_os = "linux")]
fn dry_run_prints_the_unit_without_touching_anything() {
    let dir = TempDir::new("service-dry-run");
    let out = service(
        &dir,
        &dir.path("empty-bin"),
        &["install", "--dry-run", "--exec", "handle-task --fast", "--concurrency", "2"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let unit_path = dir.path("config/systemd/user/agent-inbox.service");
    assert!(stdout.starts_with(&format!("# {}\n", unit_path.display())), "{stdout}");
    let exec = stdout.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
    assert!(exec.ends_with(
        "agent-inbox listen --profile default --exec \"handle-task --fast\" --concurrency 2 --retry-exit-code 75 --quarantine-exit-code 65 --retry-after 30s --transport sse"
    ), "{exec}");
    assert!(
        stdout.contains(&format!("Environment=\"AGENT_INBOX_HOME={}\"", dir.path("agent-home").display()))
    );
    assert!(stdout.contains("WantedBy=default.target"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("agent-inbox login"),
        "warns that no login exists yet"
    );
    assert!(!unit_path.exists());
}

#[test]
#[cfg(target_os = "linux")]
fn install_says_what_to_do_when_systemctl_user_is_unavailable() {
    let dir = TempDir::new("service-unavailable");
    log_in(&dir);
    // No systemctl at all.
    let out = service(&dir, &dir.path("empty-bin"), &["install", "--exec", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("systemctl --user is not available here (systemctl is not installed)"),
        "{stderr}"
    );
    assert!(stderr.contains("--dry-run"), "{stderr}");
    // A systemctl without a user manager (a container, CI).
    fake_systemctl(&dir.path("bin"), &dir.path("systemctl.log"), 1);
    let out = service(&dir, &dir.path("bin"), &["install", "--exec", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("systemctl --user is not available here (Failed to connect to bus"), "{stderr}");
    assert!(!dir.path("config/systemd/user/agent-inbox.service").exists(), "nothing half-installed");
    // Without a login there is nothing to run.
    let dir = TempDir::new("service-no-login");
    fake_systemctl(&dir.path("bin"), &dir.path("systemctl.log"), 0);
    let out = service(&dir, &dir.path("bin"), &["install", "--exec", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run: agent-inbox login"));
}

#[test]
#[cfg(target_os = "linux")]
fn install_status_and_uninstall_go_through_systemctl_user() {
    let dir = TempDir::new("service-install");
    log_in(&dir);
    fake_systemctl(&dir.path("bin"), &dir.path("systemctl.log"), 0);
    let out = service(&dir, &dir.path("bin"), &["install", "--exec", "python3 handle.py"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let unit_path = dir.path("config/systemd/user/agent-inbox.service");
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    assert!(unit.contains("--exec \"python3 handle.py\""), "{unit}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("journalctl --user -u agent-inbox.service"));
    let calls = std::fs::read_to_string(dir.path("systemctl.log")).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        ["--user show-environment", "--user daemon-reload", "--user enable --now agent-inbox.service"]
    );

    let out = service(&dir, &dir.path("bin"), &["status"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("installed: {}", unit_path.display())));

    let out = service(&dir, &dir.path("bin"), &["uninstall"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!unit_path.exists());
    let calls = std::fs::read_to_string(dir.path("systemctl.log")).unwrap();
    assert!(calls.contains("--user disable --now agent-inbox.service\n"), "{calls}");
    let out = service(&dir, &dir.path("bin"), &["status"]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("not installed"));
}

/// `--exec ./handler.sh` is written with its absolute path and the directory `install` ran
/// in; a handler that does not exist is refused before anything is written.
#[test]
#[cfg(target_os = "linux")]
fn install_resolves_the_exec_path_and_refuses_a_missing_one() {
    let dir = TempDir::new("service-exec-path");
    let work = dir.path("work");
    std::fs::create_dir_all(&work).unwrap();
    let handler = work.join("handle-event.sh");
    std::fs::write(&handler, "#!/bin/sh\nexit 0\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&handler, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let run = |exec: &str| {
        Command::new(BIN)
            .args(["service", "install", "--dry-run", "--exec", exec])
            .current_dir(&work)
            .env("HOME", dir.path("home"))
            .env("XDG_CONFIG_HOME", dir.path("config"))
            .env("AGENT_INBOX_HOME", dir.path("agent-home"))
            .output()
            .unwrap()
    };
    let out = run("./handle-event.sh --fast");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let unit = String::from_utf8_lossy(&out.stdout);
    let work = work.canonicalize().unwrap();
    let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
    assert!(exec.contains(&format!("--exec \"{}/handle-event.sh --fast\"", work.display())), "{exec}");
    assert!(unit.contains(&format!("WorkingDirectory={}\n", work.display())), "{unit}");
    let out = run("./missing.sh");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("./missing.sh does not exist"), "{stderr}");
}

/// `service install --daemon`: a systemd user socket and service (socket activation) that pass
/// `systemd-analyze verify` without a word, enabled through the socket, and removed again.
#[test]
#[cfg(target_os = "linux")]
fn the_daemon_is_installed_as_a_socket_and_a_service_that_verify_cleanly() {
    let dir = TempDir::new("service-daemon");
    let out = service(&dir, &dir.path("empty-bin"), &["install", "--daemon", "--dry-run"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8(out.stdout).unwrap();
    // Each file is printed after a `# PATH` line.
    let mut files: Vec<(String, String)> = Vec::new();
    for line in printed.lines() {
        match line.strip_prefix("# /") {
            Some(path) => files.push((format!("/{path}"), String::new())),
            None => files.last_mut().expect("a path first").1.push_str(&format!("{line}\n")),
        }
    }
    let units = dir.path("config/systemd/user");
    let names: Vec<&str> = files.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(
        names,
        [
            units.join("agent-inbox-daemon.socket").display().to_string(),
            units.join("agent-inbox-daemon.service").display().to_string()
        ]
    );
    assert!(
        files[0].1.contains("ListenStream=%t/agent-inbox/daemon.sock\nSocketMode=0600\n"),
        "{}",
        files[0].1
    );
    assert!(files[1].1.contains(&format!("ExecStart={BIN} daemon --idle-exit 10m\n")), "{}", files[1].1);
    assert!(!units.exists(), "a dry run writes nothing");

    let check = dir.path("verify");
    std::fs::create_dir_all(&check).unwrap();
    let paths: Vec<std::path::PathBuf> = files
        .iter()
        .map(|(path, text)| {
            let file = check.join(Path::new(path).file_name().unwrap());
            std::fs::write(&file, text).unwrap();
            file
        })
        .collect();
    let verified = Command::new("systemd-analyze")
        .arg("verify")
        .args(&paths)
        .output()
        .expect("systemd-analyze runs (scripts/test.sh installs the systemd package when it is missing)");
    let complaints =
        String::from_utf8_lossy(&verified.stderr).into_owned() + &String::from_utf8_lossy(&verified.stdout);
    assert!(
        verified.status.success() && complaints.trim().is_empty(),
        "systemd-analyze verify: {complaints}"
    );

    fake_systemctl(&dir.path("bin"), &dir.path("systemctl.log"), 0);
    let out = service(&dir, &dir.path("bin"), &["install", "--daemon"]);
    assert!(out.status.success(), "no login needed: {}", String::from_utf8_lossy(&out.stderr));
    let written = std::fs::read_to_string(units.join("agent-inbox-daemon.service")).unwrap();
    assert_eq!(written.trim_end(), files[1].1.trim_end(), "what the dry run printed");
    let calls = std::fs::read_to_string(dir.path("systemctl.log")).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        ["--user show-environment", "--user daemon-reload", "--user enable --now agent-inbox-daemon.socket"]
    );
    let out = service(&dir, &dir.path("bin"), &["status", "--daemon"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("agent-inbox-daemon.socket: "), "{out:?}");
    let out = service(&dir, &dir.path("bin"), &["uninstall", "--daemon"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        !units.join("agent-inbox-daemon.socket").exists()
            && !units.join("agent-inbox-daemon.service").exists()
    );
    let calls = std::fs::read_to_string(dir.path("systemctl.log")).unwrap();
    assert!(calls.contains("--user disable --now agent-inbox-daemon.socket\n"), "{calls}");
}
