//! The node's stop signal: background tasks, streams and long polls wait on it.

use tokio::sync::watch;

/// Signals background tasks and waiting requests that the server is stopping.
#[derive(Debug, Clone)]
pub(crate) struct Shutdown(watch::Sender<bool>);

impl Shutdown {
    pub(crate) fn new() -> Self {
        Shutdown(watch::channel(false).0)
    }

    pub(crate) fn cancel(&self) {
        self.0.send_replace(true);
    }

    pub(crate) async fn cancelled(&self) {
        let mut receiver = self.0.subscribe();
        let _ = receiver.wait_for(|stopped| *stopped).await;
    }
}
