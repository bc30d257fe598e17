//! The daemon's service definitions, as pure functions (tested below): a systemd user
//! `.socket` + `.service` pair, so the user's service manager holds the socket and starts the
//! daemon on the first local connection (it exits after an idle period and is started again
//! on the next), and a launchd agent whose `Sockets` entry does the same on macOS.
//!
//! Windows is left out: there is no Unix domain socket listener in tokio there, the peer
//! check would be a token file under an ACL we cannot test here, and a Windows service needs
//! the service control manager's API — all code we could neither build nor run. The design
//! is in docs/design/wake-daemon.md; `wait` and `listen` on Windows ask the service directly.

use crate::service::units::{ServiceSpec, launchd_head, systemd_environment, systemd_exec, xml_escape};

/// The systemd units' base name.
pub const SYSTEMD_NAME: &str = "agent-inbox-daemon";

/// The launchd agent's label.
pub const LAUNCHD_LABEL: &str = "net.agent-inbox.daemon";

/// The systemd user socket unit listening at `socket_path` (`%t` is the user's runtime
/// directory, which systemd creates; the socket is 0600 in a 0700 directory).
pub fn systemd_socket(socket_path: &str) -> String {
    format!(
        "# Written by `agent-inbox service install --daemon`; remove with `agent-inbox service uninstall --daemon`.\n\
         [Unit]\n\
         Description=agent-inbox local wake daemon (socket)\n\
         \n\
         [Socket]\n\
         ListenStream={socket_path}\n\
         SocketMode=0600\n\
         DirectoryMode=0700\n\
         RemoveOnStop=true\n\
         \n\
         [Install]\n\
         WantedBy=sockets.target\n"
    )
}

/// The systemd user service the socket starts.
pub fn systemd_service(spec: &ServiceSpec) -> String {
    let mut unit = format!(
        "# Written by `agent-inbox service install --daemon`; remove with `agent-inbox service uninstall --daemon`.\n\
         [Unit]\n\
         Description={}\n\
         Requires={SYSTEMD_NAME}.socket\n\
         After={SYSTEMD_NAME}.socket\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={}\n",
        spec.description.replace('%', "%%").replace('\n', " "),
        systemd_exec(spec)
    );
    for (key, value) in &spec.environment {
        unit.push_str(&format!("Environment={}\n", systemd_environment(key, value)));
    }
    unit.push_str(
        "Restart=on-failure\n\
         RestartSec=5\n\
         NoNewPrivileges=true\n\
         # Started by its socket; nothing to enable on its own.\n",
    );
    unit
}

/// The launchd agent: launchd holds the socket (`Sockets`, named `Listeners`) and starts the
/// daemon on the first connection; no `RunAtLoad`, no `KeepAlive`, since it exits when idle.
pub fn launchd_plist(spec: &ServiceSpec, socket_path: &str, log_path: &str) -> String {
    let mut plist = launchd_head(spec, LAUNCHD_LABEL);
    let socket = xml_escape(socket_path);
    let log = xml_escape(log_path);
    plist.push_str(&format!(
        "  <key>Sockets</key>\n  <dict>\n\
         \x20   <key>Listeners</key>\n    <dict>\n\
         \x20     <key>SockPathName</key>\n      <string>{socket}</string>\n\
         \x20     <key>SockPathMode</key>\n      <integer>384</integer>\n\
         \x20     <key>SockType</key>\n      <string>stream</string>\n\
         \x20   </dict>\n  </dict>\n\
         \x20 <key>ProcessType</key>\n  <string>Background</string>\n\
         \x20 <key>StandardOutPath</key>\n  <string>{log}</string>\n\
         \x20 <key>StandardErrorPath</key>\n  <string>{log}</string>\n\
         </dict>\n</plist>\n"
    ));
    plist
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ServiceSpec {
        ServiceSpec {
            description: "agent-inbox local wake daemon".into(),
            program: "/home/me/.cargo/bin/agent-inbox".into(),
            args: vec!["daemon".into(), "--idle-exit".into(), "10m".into()],
            environment: vec![("AGENT_INBOX_HOME".into(), "/home/me/agent & inbox".into())],
            working_directory: None,
        }
    }

    #[test]
    fn the_systemd_pair_is_a_private_socket_that_starts_the_daemon() {
        let socket = systemd_socket("%t/agent-inbox/daemon.sock");
        assert!(socket.contains(
            "[Socket]\nListenStream=%t/agent-inbox/daemon.sock\nSocketMode=0600\nDirectoryMode=0700\n"
        ));
        assert!(socket.contains("[Install]\nWantedBy=sockets.target\n"));
        let service = systemd_service(&spec());
        assert!(service.contains("Requires=agent-inbox-daemon.socket\nAfter=agent-inbox-daemon.socket\n"));
        assert!(
            service.contains("ExecStart=/home/me/.cargo/bin/agent-inbox daemon --idle-exit 10m\n"),
            "{service}"
        );
        assert!(service.contains("Environment=\"AGENT_INBOX_HOME=/home/me/agent & inbox\"\n"));
        assert!(!service.contains("[Install]"), "the socket starts it");
    }

    /// The plist launchd reads: every tag closed in order, the `Sockets` entry the daemon
    /// asks launchd for by name, a 0600 socket (384), and no keep-alive for a daemon that
    /// exits when idle.
    #[test]
    fn the_launchd_plist_holds_the_socket_and_starts_the_daemon_on_demand() {
        let plist = launchd_plist(
            &spec(),
            "/Users/me/.config/agent-inbox/daemon.sock",
            "/Users/me/Library/Logs/agent-inbox-daemon.log",
        );
        assert!(plist.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE plist"));
        assert!(plist.contains("<key>Label</key>\n  <string>net.agent-inbox.daemon</string>\n"));
        assert!(plist.contains(
            "  <key>Sockets</key>\n  <dict>\n    <key>Listeners</key>\n    <dict>\n      <key>SockPathName</key>\n      <string>/Users/me/.config/agent-inbox/daemon.sock</string>\n      <key>SockPathMode</key>\n      <integer>384</integer>\n"
        ), "{plist}");
        assert_eq!(0o600, 384);
        assert!(plist.contains(
            "    <string>/home/me/.cargo/bin/agent-inbox</string>\n    <string>daemon</string>\n    <string>--idle-exit</string>\n    <string>10m</string>\n"
        ));
        assert!(plist.contains("<string>/home/me/agent &amp; inbox</string>"), "escaped");
        assert!(!plist.contains("KeepAlive") && !plist.contains("RunAtLoad"), "on demand only");
        #[cfg(target_os = "macos")]
        assert!(plist.contains(&format!("<key>{}</key>", crate::daemon::LAUNCHD_SOCKET_NAME)));
        assert_well_formed(&plist);
    }

    /// Every element closed in the order opened, and only plist's own elements used.
    fn assert_well_formed(plist: &str) {
        let body = plist.split_once("<plist version=\"1.0\">").expect("a plist element").1;
        let mut open = vec!["plist"];
        let mut rest = body;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("a tag ends") + start;
            let tag = &rest[start + 1..end];
            rest = &rest[end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop(), Some(name), "</{name}> closes what was opened last");
            } else if let Some(name) = tag.strip_suffix('/') {
                assert!(["true", "false"].contains(&name), "<{tag}>");
            } else {
                assert!(["dict", "key", "string", "array", "integer"].contains(&tag), "<{tag}>");
                open.push(tag);
            }
        }
        assert!(open.is_empty(), "unclosed: {open:?}");
    }
}
