//! A server inside the test's own runtime: bound on port 0, run by the caller's server function
//! (`run(listener, shutdown)`, as `inbox_server::run` takes them), stopped gracefully.

use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A server running in this process.
#[derive(Debug)]
pub struct InProcess {
    /// The address it listens on (127.0.0.1, the port the system chose).
    pub addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), String>>,
}

impl InProcess {
    /// Binds 127.0.0.1:0 and spawns `serve(listener, shutdown)` on the current runtime;
    /// `shutdown` completes when [`InProcess::stop`] is called (or this value is dropped).
    pub async fn start<F, Fut, E>(serve: F) -> InProcess
    where
        F: FnOnce(TcpListener, Shutdown) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
        let addr = listener.local_addr().expect("the bound address");
        let (stop, stopped) = oneshot::channel::<()>();
        let running = serve(listener, Shutdown(stopped));
        let task = tokio::spawn(async move { running.await.map_err(|err| err.to_string()) });
        InProcess { addr, stop, task }
    }

    /// `http://{addr}`.
    pub fn http_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Signals shutdown and waits for the server function to return: its error, or a panic's
    /// message, as `Err`.
    pub async fn stop(self) -> Result<(), String> {
        let _ = self.stop.send(());
        match self.task.await {
            Ok(result) => result,
            Err(join) => Err(format!("the server task failed: {join}")),
        }
    }
}

/// The shutdown future handed to the server function: completes once the server is stopped.
#[derive(Debug)]
pub struct Shutdown(oneshot::Receiver<()>);

impl Future for Shutdown {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        std::pin::Pin::new(&mut self.0).poll(cx).map(drop)
    }
}
