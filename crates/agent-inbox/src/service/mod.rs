//! `service install | uninstall | status`: runs `listen` as a user service that starts at
//! login and restarts on failure: a systemd user unit on Linux (`systemctl --user`), a launchd
//! agent on macOS (`launchctl`). The service only makes outbound connections. The unit text
//! comes from pure functions (tested below); the commands around them write the file and ask
//! the service manager, and say clearly what to do when there is none (containers, CI).

pub(crate) mod units;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use inbox_client::Home;

use crate::cli::{ServiceArgs, ServiceCommand, ServiceInstallArgs};
use units::{ServiceSpec, launchd_plist, resolve_exec, systemd_unit};

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

    #[test]
    fn each_profile_gets_its_own_service() {
        assert_eq!(unit_name("default"), "agent-inbox.service");
        assert_eq!(unit_name("work"), "agent-inbox-work.service");
        assert_eq!(launchd_label("default"), "net.agent-inbox.listen");
        assert_eq!(launchd_label("work"), "net.agent-inbox.listen.work");
    }
}
