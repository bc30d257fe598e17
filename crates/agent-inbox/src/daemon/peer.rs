//! Who may talk to the daemon: processes of the user it runs as, told apart by the kernel's
//! account of the peer (`SO_PEERCRED` on Linux, `getpeereid` on macOS and the BSDs, through
//! tokio's safe `peer_cred`). The socket's 0600 mode in a 0700 directory already keeps other
//! users out; this check holds when a socket path was put somewhere looser.

use tokio::net::UnixStream;

/// The effective user id of this process, as the kernel reports it for one end of a socket
/// pair: no `unsafe` call to `geteuid` needed.
pub fn own_uid() -> std::io::Result<u32> {
    let (one, _other) = UnixStream::pair()?;
    Ok(one.peer_cred()?.uid())
}

/// `Ok` when the peer runs as `uid`; otherwise a sentence for the refused peer.
pub fn check(stream: &UnixStream, uid: u32) -> Result<(), String> {
    match stream.peer_cred() {
        Ok(peer) if peer.uid() == uid => Ok(()),
        Ok(peer) => Err(format!(
            "this daemon serves user id {uid} only, and this process runs as user id {}; start a daemon as that user",
            peer.uid()
        )),
        Err(err) => Err(format!("cannot tell which user this process runs as ({err}); refused")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_peer_of_the_same_user_passes_and_another_uid_is_refused() {
        let uid = own_uid().unwrap();
        let (one, _other) = UnixStream::pair().unwrap();
        assert!(check(&one, uid).is_ok());
        let refused = check(&one, uid.wrapping_add(1)).unwrap_err();
        assert!(refused.contains(&format!("runs as user id {uid}")), "{refused}");
    }
}
