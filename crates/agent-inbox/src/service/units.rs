//! The unit files a user service is written as, from pure functions: a systemd user unit, a
//! launchd agent's plist, and the quoting each needs. `service install` writes `listen`'s; the
//! wake daemon's (`daemon/units.rs`) are built from the same pieces.

use std::path::Path;

use anyhow::bail;

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
}
