//! `service install | uninstall | status`: runs `listen` as a user service that starts at
//! login and restarts on failure: a systemd user unit on Linux (`systemctl --user`), a launchd
//! agent on macOS (`launchctl`). The service only makes outbound connections. The unit text
//! comes from pure functions (tested below); the commands around them write the file and ask
//! the service manager, and say clearly what to do when there is none (containers, CI).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use inbox_client::Home;

use crate::cli::{ServiceArgs, ServiceCommand, ServiceInstallArgs};
use crate::listen::SUPERSEDED_EXIT_CODE;

/// What a service runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    pub description: String,
    pub program: String,
    pub args: Vec<String>,
    pub environment: Vec<(String, String)>,
    /// Where the service runs: the directory `install` ran in, so paths relative to it inside
    /// the `--exec` command mean what they meant there.
    pub working_directory: Option<String>,
}

/// The `--exec` command with its program made absolute when it is a path (`./handle.sh`,
/// `bin/handle`), so the service runs what the installing shell would have, wherever the
/// service manager starts it. A path that does not exist, or is not executable, is refused
/// now rather than failing for every event later. Bare names (`python3`, shell builtins)
/// are left to `PATH`, which the unit copies.
pub fn resolve_exec(exec: &str, cwd: &Path) -> anyhow::Result<String> {
    let trimmed = exec.trim_start();
    let (program, rest) = match trimmed.chars().next() {
        Some(quote @ ('\'' | '"')) => match trimmed[1..].find(quote) {
            Some(end) => (&trimmed[1..=end], &trimmed[end + 2..]),
            None => return Ok(exec.to_owned()),
        },
        _ => trimmed.split_at(trimmed.find(char::is_whitespace).unwrap_or(trimmed.len())),
    };
    if !program.contains('/') {
        return Ok(exec.to_owned());
    }
    let path = cwd.join(program);
    let resolved = path.canonicalize().map_err(|_| {
        anyhow::anyhow!(
            "--exec: {program} does not exist (looked at {}); give the path of the handler to run",
            path.display()
        )
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&resolved).map(|m| m.permissions().mode()).unwrap_or(0);
        if resolved.is_dir() || mode & 0o111 == 0 {
            bail!(
                "--exec: {} is not an executable file; make it one (chmod +x {program}) or run it through its interpreter",
                resolved.display()
            );
        }
    }
    Ok(format!("{}{rest}", shell_quote(&resolved.display().to_string())))
}

/// A word for `sh -c`: quoted in single quotes unless it is plainly safe.
fn shell_quote(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+%".contains(c)) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// `spec`'s program and arguments as one `ExecStart=` value.
pub fn systemd_exec(spec: &ServiceSpec) -> String {
    let mut exec = systemd_quote(&spec.program);
    for arg in &spec.args {
        exec.push(' ');
        exec.push_str(&systemd_quote(arg));
    }
    exec
}

/// The systemd user unit for `spec`.
pub fn systemd_unit(spec: &ServiceSpec) -> String {
    let exec = systemd_exec(spec);
    let mut unit = format!(
        "# Written by `agent-inbox service install`; remove with `agent-inbox service uninstall`.\n\
         [Unit]\n\
         Description={}\n\
         StartLimitIntervalSec=0\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={exec}\n",
        spec.description.replace('%', "%%").replace('\n', " ")
    );
    if let Some(dir) = &spec.working_directory {
        unit.push_str(&format!("WorkingDirectory={}\n", systemd_quote(dir)));
    }
    for (key, value) in &spec.environment {
        unit.push_str(&format!("Environment={}\n", systemd_environment(key, value)));
    }
    unit.push_str(&format!(
        "Restart=on-failure\n\
         RestartSec=10\n\
         # Replaced by another process of this agent (single-active-session): stay stopped.\n\
         RestartPreventExitStatus={SUPERSEDED_EXIT_CODE}\n\
         # SIGTERM to `listen` only: it lets running commands finish, then exits.\n\
         KillMode=mixed\n\
         TimeoutStopSec=45\n\
         NoNewPrivileges=true\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
    ));
    unit
}

/// One `ExecStart=` word: specifiers (`%`) and variable expansion (`$`) escaped, and quoted
/// when it holds anything systemd would split on or unescape.
fn systemd_quote(arg: &str) -> String {
    let escaped = arg.replace('%', "%%").replace('$', "$$");
    let plain = !escaped.is_empty()
        && escaped.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+%$".contains(c))
        && escaped != ";";
    if plain {
        return escaped;
    }
    format!("\"{}\"", c_escape(&escaped))
}

/// One `Environment=` assignment, quoted; values are not `$`-expanded there.
pub fn systemd_environment(key: &str, value: &str) -> String {
    format!("\"{}\"", c_escape(&format!("{key}={value}").replace('%', "%%")))
}

fn c_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out
}

/// The launchd agent for `spec`: started at login, restarted unless it exits cleanly.
pub fn launchd_plist(spec: &ServiceSpec, label: &str, log_path: &Path) -> String {
    let mut plist = launchd_head(spec, label);
    let log = xml_escape(&log_path.display().to_string());
    plist.push_str(&format!(
        "  <key>RunAtLoad</key>\n  <true/>\n\
         \x20 <key>KeepAlive</key>\n  <dict>\n    <key>SuccessfulExit</key>\n    <false/>\n  </dict>\n\
         \x20 <key>ThrottleInterval</key>\n  <integer>10</integer>\n\
         \x20 <key>ProcessType</key>\n  <string>Background</string>\n\
         \x20 <key>StandardOutPath</key>\n  <string>{log}</string>\n\
         \x20 <key>StandardErrorPath</key>\n  <string>{log}</string>\n\
         </dict>\n</plist>\n"
    ));
    plist
}

/// A launchd agent's opening: the label, the program with its arguments, the working
/// directory and the environment; the caller adds the rest and closes it.
pub fn launchd_head(spec: &ServiceSpec, label: &str) -> String {
    let mut plist = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <plist version=\"1.0\">\n<dict>\n",
    );
    plist.push_str(&format!("  <key>Label</key>\n  <string>{}</string>\n", xml_escape(label)));
    plist.push_str("  <key>ProgramArguments</key>\n  <array>\n");
    for arg in std::iter::once(&spec.program).chain(&spec.args) {
        plist.push_str(&format!("    <string>{}</string>\n", xml_escape(arg)));
    }
    plist.push_str("  </array>\n");
    if let Some(dir) = &spec.working_directory {
        plist.push_str(&format!("  <key>WorkingDirectory</key>\n  <string>{}</string>\n", xml_escape(dir)));
    }
    if !spec.environment.is_empty() {
        plist.push_str("  <key>EnvironmentVariables</key>\n  <dict>\n");
        for (key, value) in &spec.environment {
            plist.push_str(&format!(
                "    <key>{}</key>\n    <string>{}</string>\n",
                xml_escape(key),
                xml_escape(value)
            ));
        }
        plist.push_str("  </dict>\n");
    }
    plist
}

pub fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The service's name: one per profile.
fn unit_name(profile: &str) -> String {
    if profile == "default" {
        "agent-inbox.service".to_owned()
    } else {
        format!("agent-inbox-{profile}.service")
    }
}

fn launchd_label(profile: &str) -> String {
    if profile == "default" {
        "net.agent-inbox.listen".to_owned()
    } else {
        format!("net.agent-inbox.listen.{profile}")
    }
}

/// The service managers this command knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Manager {
    Systemd,
    Launchd,
}

impl Manager {
    fn here() -> anyhow::Result<Manager> {
        if cfg!(target_os = "macos") {
            Ok(Manager::Launchd)
        } else if cfg!(target_os = "linux") {
            Ok(Manager::Systemd)
        } else {
            bail!(
                "user services are supported on Linux (systemd) and macOS (launchd); run `agent-inbox listen` under your system's supervisor"
            )
        }
    }

    /// Where the definition goes.
    fn path(self, profile: &str) -> anyhow::Result<PathBuf> {
        Ok(match self {
            Manager::Systemd => self.dir()?.join(unit_name(profile)),
            Manager::Launchd => self.dir()?.join(format!("{}.plist", launchd_label(profile))),
        })
    }

    /// The directory of user service definitions.
    fn dir(self) -> anyhow::Result<PathBuf> {
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        match self {
            Manager::Systemd => {
                let config = std::env::var_os("XDG_CONFIG_HOME")
                    .filter(|d| !d.is_empty())
                    .map(PathBuf::from)
                    .or_else(|| home.map(|h| h.join(".config")))
                    .context("set HOME or XDG_CONFIG_HOME to say where user units live")?;
                Ok(config.join("systemd").join("user"))
            }
            Manager::Launchd => {
                let home = home.context("set HOME to say where launch agents live")?;
                Ok(home.join("Library").join("LaunchAgents"))
            }
        }
    }

    fn definition(self, spec: &ServiceSpec, profile: &str) -> anyhow::Result<String> {
        Ok(match self {
            Manager::Systemd => systemd_unit(spec),
            Manager::Launchd => {
                let home = PathBuf::from(std::env::var_os("HOME").context("set HOME")?);
                let log_name = if profile == "default" {
                    "agent-inbox.log".to_owned()
                } else {
                    format!("agent-inbox-{profile}.log")
                };
                launchd_plist(
                    spec,
                    &launchd_label(profile),
                    &home.join("Library").join("Logs").join(log_name),
                )
            }
        })
    }
}

pub fn run(command: ServiceCommand) -> anyhow::Result<()> {
    match command {
        ServiceCommand::Install(args) if args.daemon => install_daemon(args.dry_run),
        ServiceCommand::Install(args) => install(args),
        ServiceCommand::Uninstall(args) if args.daemon => uninstall_daemon(),
        ServiceCommand::Uninstall(args) => uninstall(args),
        ServiceCommand::Status(args) if args.daemon => status_daemon(),
        ServiceCommand::Status(args) => status(args),
    }
}

fn install(args: ServiceInstallArgs) -> anyhow::Result<()> {
    let manager = Manager::here()?;
    let profile = args.profile.profile.clone();
    let home = Home::from_env()?;
    let logged_in = home.load_profile(&profile);
    let program = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("cannot tell where this agent-inbox binary is")?;
    let cwd = std::env::current_dir().context("cannot tell the current directory")?;
    let Some(mut listen) = args.listen.clone() else {
        bail!(
            "--exec is required: the command `listen` runs per event (or --daemon, for the local wake daemon)"
        )
    };
    listen.exec = resolve_exec(&listen.exec, &cwd)?;
    let mut service_args = vec!["listen".to_owned(), "--profile".to_owned(), profile.clone()];
    service_args.extend(listen.to_args());
    let mut environment = Vec::new();
    if let Some(dir) = std::env::var_os("AGENT_INBOX_HOME") {
        environment.push(("AGENT_INBOX_HOME".to_owned(), dir.to_string_lossy().into_owned()));
    }
    if let Some(path) = std::env::var_os("PATH") {
        // The command given to --exec finds its programs as it does in this shell.
        environment.push(("PATH".to_owned(), path.to_string_lossy().into_owned()));
    }
    let spec = ServiceSpec {
        description: format!("agent-inbox listener ({profile})"),
        program: program.display().to_string(),
        args: service_args,
        environment,
        working_directory: Some(cwd.display().to_string()),
    };
    let path = manager.path(&profile)?;
    let definition = manager.definition(&spec, &profile)?;
    if args.dry_run {
        if let Err(err) = &logged_in {
            eprintln!("note: {err}");
        }
        println!("# {}\n{definition}", path.display());
        return Ok(());
    }
    logged_in.context("the service runs `listen` with a stored login")?;
    match manager {
        Manager::Systemd => {
            systemd_available()?;
            write_definition(&path, &definition)?;
            systemctl(&["daemon-reload"])?;
            systemctl(&["enable", "--now", &unit_name(&profile)])?;
            println!(
                "installed and started {} ({})\nlogs: journalctl --user -u {}",
                unit_name(&profile),
                path.display(),
                unit_name(&profile)
            );
        }
        Manager::Launchd => {
            write_definition(&path, &definition)?;
            let path_text = path.display().to_string();
            run_tool("launchctl", &["load", "-w", &path_text])?;
            println!("installed and started {} ({})", launchd_label(&profile), path.display());
        }
    }
    Ok(())
}

fn uninstall(args: ServiceArgs) -> anyhow::Result<()> {
    let manager = Manager::here()?;
    let profile = &args.profile.profile;
    let path = manager.path(profile)?;
    match manager {
        Manager::Systemd => match systemd_available() {
            Ok(()) => {
                // Not loaded is fine: the point is that it no longer runs.
                let _ = systemctl(&["disable", "--now", &unit_name(profile)]);
                remove_definition(&path)?;
                systemctl(&["daemon-reload"])?;
            }
            Err(err) => {
                remove_definition(&path)?;
                eprintln!("note: {err:#}; removed the unit file only");
            }
        },
        Manager::Launchd => {
            let path_text = path.display().to_string();
            let _ = run_tool("launchctl", &["unload", "-w", &path_text]);
            remove_definition(&path)?;
        }
    }
    println!("uninstalled ({} removed)", path.display());
    Ok(())
}

fn status(args: ServiceArgs) -> anyhow::Result<()> {
    let manager = Manager::here()?;
    let profile = &args.profile.profile;
    let path = manager.path(profile)?;
    if !path.exists() {
        println!("not installed ({} does not exist)", path.display());
        return Ok(());
    }
    println!("installed: {}", path.display());
    match manager {
        Manager::Systemd => match systemd_available() {
            Ok(()) => {
                let unit = unit_name(profile);
                let active = Command::new("systemctl").args(["--user", "is-active", &unit]).output()?;
                let enabled = Command::new("systemctl").args(["--user", "is-enabled", &unit]).output()?;
                println!(
                    "{}, {}",
                    String::from_utf8_lossy(&active.stdout).trim(),
                    String::from_utf8_lossy(&enabled.stdout).trim()
                );
            }
            Err(err) => println!("state unknown: {err:#}"),
        },
        Manager::Launchd => {
            let listed = Command::new("launchctl").args(["list", &launchd_label(profile)]).output()?;
            println!("{}", if listed.status.success() { "loaded" } else { "not loaded" });
        }
    }
    Ok(())
}

/// The local wake daemon's definitions: each file's path and text.
fn daemon_definitions(manager: Manager) -> anyhow::Result<Vec<(PathBuf, String)>> {
    use crate::daemon::units;
    let program = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("cannot tell where this agent-inbox binary is")?;
    let mut environment = Vec::new();
    for name in ["AGENT_INBOX_HOME", "AGENT_INBOX_DAEMON_SOCKET"] {
        if let Some(value) = std::env::var_os(name).filter(|v| !v.is_empty()) {
            environment.push((name.to_owned(), value.to_string_lossy().into_owned()));
        }
    }
    let spec = ServiceSpec {
        description: "agent-inbox local wake daemon".to_owned(),
        program: program.display().to_string(),
        args: ["daemon", "--idle-exit", "10m"].map(str::to_owned).to_vec(),
        environment,
        working_directory: None,
    };
    let dir = manager.dir()?;
    Ok(match manager {
        Manager::Systemd => {
            // `%t` is the user's runtime directory, which clients find as $XDG_RUNTIME_DIR.
            let socket = match std::env::var_os("AGENT_INBOX_DAEMON_SOCKET").filter(|v| !v.is_empty()) {
                Some(path) => path.to_string_lossy().replace('%', "%%"),
                None => format!("%t/agent-inbox/{}", inbox_client::local_daemon::SOCKET_FILE),
            };
            vec![
                (dir.join(format!("{}.socket", units::SYSTEMD_NAME)), units::systemd_socket(&socket)),
                (dir.join(format!("{}.service", units::SYSTEMD_NAME)), units::systemd_service(&spec)),
            ]
        }
        Manager::Launchd => {
            let socket = inbox_client::local_daemon::socket_path(&Home::from_env()?);
            let home = PathBuf::from(std::env::var_os("HOME").context("set HOME")?);
            let log = home.join("Library").join("Logs").join("agent-inbox-daemon.log");
            vec![(
                dir.join(format!("{}.plist", units::LAUNCHD_LABEL)),
                units::launchd_plist(&spec, &socket.display().to_string(), &log.display().to_string()),
            )]
        }
    })
}

fn install_daemon(dry_run: bool) -> anyhow::Result<()> {
    use crate::daemon::units;
    let manager = Manager::here()?;
    let definitions = daemon_definitions(manager)?;
    if dry_run {
        for (path, text) in &definitions {
            println!("# {}\n{text}", path.display());
        }
        return Ok(());
    }
    match manager {
        Manager::Systemd => {
            systemd_available()?;
            for (path, text) in &definitions {
                write_definition(path, text)?;
            }
            systemctl(&["daemon-reload"])?;
            let socket = format!("{}.socket", units::SYSTEMD_NAME);
            systemctl(&["enable", "--now", &socket])?;
            println!(
                "installed and started {socket}: the daemon starts on the first local connection\nlogs: journalctl --user -u {}.service",
                units::SYSTEMD_NAME
            );
        }
        Manager::Launchd => {
            for (path, text) in &definitions {
                write_definition(path, text)?;
                run_tool("launchctl", &["load", "-w", &path.display().to_string()])?;
            }
            println!("installed {}: the daemon starts on the first local connection", units::LAUNCHD_LABEL);
        }
    }
    Ok(())
}

fn uninstall_daemon() -> anyhow::Result<()> {
    use crate::daemon::units;
    let manager = Manager::here()?;
    let definitions = daemon_definitions(manager)?;
    match manager {
        Manager::Systemd => {
            let available = systemd_available();
            if available.is_ok() {
                // Not loaded is fine: the point is that it no longer runs.
                let _ = systemctl(&["disable", "--now", &format!("{}.socket", units::SYSTEMD_NAME)]);
                let _ = systemctl(&["stop", &format!("{}.service", units::SYSTEMD_NAME)]);
            }
            for (path, _) in &definitions {
                remove_definition(path)?;
            }
            match available {
                Ok(()) => systemctl(&["daemon-reload"])?,
                Err(err) => eprintln!("note: {err:#}; removed the unit files only"),
            }
        }
        Manager::Launchd => {
            for (path, _) in &definitions {
                let _ = run_tool("launchctl", &["unload", "-w", &path.display().to_string()]);
                remove_definition(path)?;
            }
        }
    }
    let paths: Vec<String> = definitions.iter().map(|(path, _)| path.display().to_string()).collect();
    println!("uninstalled ({} removed)", paths.join(", "));
    Ok(())
}

fn status_daemon() -> anyhow::Result<()> {
    use crate::daemon::units;
    let manager = Manager::here()?;
    let definitions = daemon_definitions(manager)?;
    if let Some((missing, _)) = definitions.iter().find(|(path, _)| !path.exists()) {
        println!("not installed ({} does not exist)", missing.display());
        return Ok(());
    }
    for (path, _) in &definitions {
        println!("installed: {}", path.display());
    }
    match manager {
        Manager::Systemd => match systemd_available() {
            Ok(()) => {
                for unit in
                    [format!("{}.socket", units::SYSTEMD_NAME), format!("{}.service", units::SYSTEMD_NAME)]
                {
                    let active = Command::new("systemctl").args(["--user", "is-active", &unit]).output()?;
                    println!("{unit}: {}", String::from_utf8_lossy(&active.stdout).trim());
                }
            }
            Err(err) => println!("state unknown: {err:#}"),
        },
        Manager::Launchd => {
            let listed = Command::new("launchctl").args(["list", units::LAUNCHD_LABEL]).output()?;
            println!("{}", if listed.status.success() { "loaded" } else { "not loaded" });
        }
    }
    Ok(())
}

/// Checks that `systemctl --user` can reach a user service manager.
fn systemd_available() -> anyhow::Result<()> {
    let advice = "print the unit with `agent-inbox service install --dry-run ...` and run `agent-inbox listen` \
                  under another supervisor (on a server, `loginctl enable-linger $USER` gives your user a service manager)";
    let output = match Command::new("systemctl").args(["--user", "show-environment"]).output() {
        Ok(output) => output,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            bail!("systemctl --user is not available here (systemctl is not installed); {advice}")
        }
        Err(err) => bail!("systemctl --user is not available here ({err}); {advice}"),
    };
    if !output.status.success() {
        let why = String::from_utf8_lossy(&output.stderr);
        let why = why.lines().next().unwrap_or("no user service manager is running").trim().to_owned();
        bail!("systemctl --user is not available here ({why}); {advice}");
    }
    Ok(())
}

fn systemctl(args: &[&str]) -> anyhow::Result<()> {
    let mut full = vec!["--user"];
    full.extend_from_slice(args);
    run_tool("systemctl", &full)
}

fn run_tool(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let output =
        Command::new(program).args(args).output().with_context(|| format!("cannot run {program}"))?;
    if !output.status.success() {
        bail!("`{program} {}` failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(())
}

fn write_definition(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

fn remove_definition(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            Err(err).with_context(|| format!("cannot remove {}", path.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ServiceSpec {
        ServiceSpec {
            description: "agent-inbox listener (default)".into(),
            program: "/home/me/.cargo/bin/agent-inbox".into(),
            args: vec![
                "listen".into(),
                "--profile".into(),
                "default".into(),
                "--exec".into(),
                "python3 handle.py --name \"x y\" 100% $HOME \\n".into(),
            ],
            environment: vec![("AGENT_INBOX_HOME".into(), "/home/me/agent inbox".into())],
            working_directory: Some("/home/me/my agent".into()),
        }
    }

    #[test]
    fn exec_paths_are_resolved_and_checked() {
        let dir = std::env::temp_dir().join(format!("agent-inbox-resolve-exec-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let script = dir.join("handle event.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::write(dir.join("bin/plain"), "").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let dir = dir.canonicalize().unwrap();
        let quoted = format!("'{}/handle event.sh' --fast", dir.display());
        assert_eq!(resolve_exec("'./handle event.sh' --fast", &dir).unwrap(), quoted);
        assert_eq!(resolve_exec("\"handle event.sh\"", &dir).unwrap(), "\"handle event.sh\"", "a bare name");
        assert_eq!(resolve_exec("python3 handle.py", &dir).unwrap(), "python3 handle.py");
        let missing = resolve_exec("./handle-event.sh", &dir).unwrap_err().to_string();
        assert!(
            missing.contains("does not exist")
                && missing.contains(&dir.join("./handle-event.sh").display().to_string()),
            "{missing}"
        );
        #[cfg(unix)]
        assert!(resolve_exec("bin/plain x", &dir).unwrap_err().to_string().contains("chmod +x"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_systemd_unit_runs_listen_with_every_argument_quoted() {
        let unit = systemd_unit(&spec());
        let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
        assert_eq!(
            exec,
            r#"ExecStart=/home/me/.cargo/bin/agent-inbox listen --profile default --exec "python3 handle.py --name \"x y\" 100%% $$HOME \\n""#
        );
        assert!(unit.contains("Environment=\"AGENT_INBOX_HOME=/home/me/agent inbox\"\n"));
        assert!(unit.contains("WorkingDirectory=\"/home/me/my agent\"\n"), "{unit}");
        assert!(unit.contains("Restart=on-failure\n"));
        assert!(unit.contains("RestartPreventExitStatus=3\n"), "a replaced listener stays stopped");
        assert!(unit.contains("[Install]\nWantedBy=default.target\n"));
        assert!(unit.contains("Description=agent-inbox listener (default)\n"));
        assert!(!unit.contains("ListenStream"), "outbound only: no sockets");
    }

    #[test]
    fn systemd_quoting_leaves_plain_words_alone() {
        assert_eq!(systemd_quote("--concurrency"), "--concurrency");
        assert_eq!(systemd_quote("/usr/bin/agent-inbox"), "/usr/bin/agent-inbox");
        assert_eq!(systemd_quote(""), "\"\"");
        assert_eq!(systemd_quote(";"), "\";\"");
        assert_eq!(systemd_quote("a'b"), "\"a'b\"");
        assert_eq!(systemd_quote("tab\there"), "\"tab\\there\"");
        assert_eq!(systemd_quote("50%"), "50%%");
    }

    #[test]
    fn the_launchd_plist_lists_arguments_as_escaped_strings() {
        let plist = launchd_plist(
            &spec(),
            "net.agent-inbox.listen",
            Path::new("/Users/me/Library/Logs/agent-inbox.log"),
        );
        assert!(plist.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE plist"));
        assert!(plist.contains("<key>Label</key>\n  <string>net.agent-inbox.listen</string>\n"));
        assert!(plist.contains("<key>WorkingDirectory</key>\n  <string>/home/me/my agent</string>\n"));
        assert!(
            plist.contains("    <string>python3 handle.py --name &quot;x y&quot; 100% $HOME \\n</string>\n")
        );
        assert!(
            plist.contains(
                "    <string>/home/me/.cargo/bin/agent-inbox</string>\n    <string>listen</string>\n"
            )
        );
        assert!(plist.contains("<key>AGENT_INBOX_HOME</key>\n    <string>/home/me/agent inbox</string>"));
        assert!(
            plist.contains("<key>KeepAlive</key>\n  <dict>\n    <key>SuccessfulExit</key>\n    <false/>")
        );
        assert!(plist.contains(
            "<key>StandardErrorPath</key>\n  <string>/Users/me/Library/Logs/agent-inbox.log</string>"
        ));
        assert!(plist.ends_with("</dict>\n</plist>\n"));
        assert_eq!(plist.matches("<dict>").count(), plist.matches("</dict>").count());
    }

    #[test]
    fn each_profile_gets_its_own_service() {
        assert_eq!(unit_name("default"), "agent-inbox.service");
        assert_eq!(unit_name("work"), "agent-inbox-work.service");
        assert_eq!(launchd_label("default"), "net.agent-inbox.listen");
        assert_eq!(launchd_label("work"), "net.agent-inbox.listen.work");
    }
}
