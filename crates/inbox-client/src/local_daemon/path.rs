//! Where the local wake daemon's socket lives, decided in one place for the daemon, its
//! service definitions and every client: `AGENT_INBOX_DAEMON_SOCKET` when set, else
//! `$XDG_RUNTIME_DIR/agent-inbox/daemon.sock` (the user's runtime directory: per user, 0700,
//! emptied at logout), else `daemon.sock` in the agent-inbox configuration directory (0700,
//! created by `login`), for systems without a runtime directory such as macOS.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::profile::Home;

/// The file name of the socket inside its directory.
pub const SOCKET_FILE: &str = "daemon.sock";

/// The socket path for this process's environment.
pub fn socket_path(home: &Home) -> PathBuf {
    socket_path_from(|name| std::env::var_os(name), home)
}

/// [`socket_path`] with the environment passed in, for tests.
pub fn socket_path_from(env: impl Fn(&str) -> Option<OsString>, home: &Home) -> PathBuf {
    let set = |name: &str| env(name).filter(|value| !value.is_empty());
    if let Some(path) = set("AGENT_INBOX_DAEMON_SOCKET") {
        return PathBuf::from(path);
    }
    if let Some(runtime) = set("XDG_RUNTIME_DIR") {
        return PathBuf::from(runtime).join("agent-inbox").join(SOCKET_FILE);
    }
    home.dir().join(SOCKET_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_override_then_the_runtime_directory_then_the_config_directory() {
        let home = Home::at("/home/me/.config/agent-inbox");
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v))
        };
        assert_eq!(
            socket_path_from(
                env(&[("AGENT_INBOX_DAEMON_SOCKET", "/tmp/d.sock"), ("XDG_RUNTIME_DIR", "/run/user/1000")]),
                &home
            ),
            PathBuf::from("/tmp/d.sock")
        );
        assert_eq!(
            socket_path_from(env(&[("XDG_RUNTIME_DIR", "/run/user/1000")]), &home),
            PathBuf::from("/run/user/1000/agent-inbox/daemon.sock")
        );
        assert_eq!(
            socket_path_from(env(&[("XDG_RUNTIME_DIR", ""), ("AGENT_INBOX_DAEMON_SOCKET", "")]), &home),
            PathBuf::from("/home/me/.config/agent-inbox/daemon.sock"),
            "empty variables count as unset"
        );
    }
}
