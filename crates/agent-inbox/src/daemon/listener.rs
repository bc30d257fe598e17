//! The daemon's socket: the one a service manager hands over (systemd's `LISTEN_FDS`, launchd's
//! `Sockets` entry), else one it binds itself at the path every client computes
//! (`inbox_client::local_daemon::socket_path`): in a directory created 0700, the socket made
//! 0600, a stale file of a dead daemon replaced, a live daemon's never.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use tokio::net::UnixListener;

/// Where the listening socket came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Handed over by systemd or launchd (socket activation).
    Inherited,
    /// Bound by the daemon itself.
    Bound,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Inherited => "inherited",
            Origin::Bound => "bound",
        }
    }
}

/// The socket the daemon serves.
#[derive(Debug)]
pub struct Listening {
    pub listener: UnixListener,
    pub origin: Origin,
    /// Where clients find it (for an inherited socket, the path it is bound at, if it has one).
    pub path: PathBuf,
    /// The socket file this daemon made, removed when it exits if it is still the same file.
    bound: Option<BoundFile>,
}

#[derive(Debug)]
struct BoundFile {
    path: PathBuf,
    identity: (u64, u64),
}

impl Listening {
    /// Whether the socket file this daemon bound is still at its path (removed or replaced,
    /// no client can reach this daemon any more). Always true for an inherited socket.
    pub fn still_reachable(&self) -> bool {
        self.bound.as_ref().is_none_or(|file| file_identity(&file.path).ok() == Some(file.identity))
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Some(file) = &self.bound
            && file_identity(&file.path).ok() == Some(file.identity)
        {
            let _ = std::fs::remove_file(&file.path);
        }
    }
}

/// The inherited socket if there is one, else a socket bound at `path`.
pub fn listen(path: &Path) -> anyhow::Result<Listening> {
    if let Some(listener) = inherited()? {
        listener.set_nonblocking(true)?;
        let bound_at = listener.local_addr().ok().and_then(|a| a.as_pathname().map(Path::to_owned));
        return Ok(Listening {
            listener: UnixListener::from_std(listener)?,
            origin: Origin::Inherited,
            path: bound_at.unwrap_or_else(|| path.to_owned()),
            bound: None,
        });
    }
    bind(path)
}

fn inherited() -> anyhow::Result<Option<std::os::unix::net::UnixListener>> {
    #[cfg(target_os = "macos")]
    if let Some(listener) = launchd_socket()? {
        return Ok(Some(listener));
    }
    let mut fds = listenfd::ListenFd::from_env();
    if fds.len() == 0 {
        return Ok(None);
    }
    match fds.take_unix_listener(0) {
        Ok(Some(listener)) => Ok(Some(listener)),
        Ok(None) => bail!("LISTEN_FDS names no socket at its first descriptor"),
        Err(err) => {
            Err(err).context("the socket handed over (LISTEN_FDS) is not a listening Unix stream socket")
        }
    }
}

/// The name of the socket in the launchd agent's `Sockets` dictionary.
#[cfg(target_os = "macos")]
pub const LAUNCHD_SOCKET_NAME: &str = "Listeners";

/// The socket launchd holds for this job, if launchd started us with one. launchd hands out
/// descriptors; opening `/dev/fd/N` duplicates one into an owned file (macOS's fdesc file
/// system), so no `unsafe` is needed to adopt it.
#[cfg(target_os = "macos")]
fn launchd_socket() -> anyhow::Result<Option<std::os::unix::net::UnixListener>> {
    match raunch::activate_socket(LAUNCHD_SOCKET_NAME) {
        Ok(fds) => {
            let Some(fd) = fds.first() else { return Ok(None) };
            let file = std::fs::File::open(format!("/dev/fd/{fd}"))
                .context("cannot take over the socket launchd holds")?;
            Ok(Some(std::os::unix::net::UnixListener::from(std::os::fd::OwnedFd::from(file))))
        }
        Err(raunch::Error::NotManaged | raunch::Error::NotInPlist) => Ok(None),
        Err(err) => bail!("cannot take over the socket launchd holds: {err}"),
    }
}

fn bind(path: &Path) -> anyhow::Result<Listening> {
    use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, PermissionsExt as _};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => {
            bail!("{} exists and is not a socket; remove it or choose another path", path.display())
        }
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => bail!(
                "a daemon already listens at {}; `agent-inbox daemon status` shows it (set AGENT_INBOX_DAEMON_SOCKET to run a second one elsewhere)",
                path.display()
            ),
            // A dead daemon's socket: nothing answers it, so it is ours to replace.
            Err(_) => std::fs::remove_file(path)
                .with_context(|| format!("cannot remove the stale socket {}", path.display()))?,
        },
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err).with_context(|| format!("cannot inspect {}", path.display())),
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("cannot listen at {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot make {} private", path.display()))?;
    let identity = file_identity(path)?;
    Ok(Listening {
        listener,
        origin: Origin::Bound,
        path: path.to_owned(),
        bound: Some(BoundFile { path: path.to_owned(), identity }),
    })
}

/// Device and inode: the same path may later name another daemon's socket.
fn file_identity(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::symlink_metadata(path)?;
    Ok((meta.dev(), meta.ino()))
}
