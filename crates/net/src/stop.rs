//! The signals that ask a server or a load generator to stop: Ctrl-C
//! (SIGINT), and on Unix SIGTERM (what Docker, Kubernetes and systemd send)
//! and SIGHUP (the terminal went away). All three mean the same here: shut
//! down gracefully, as `docs/serve-and-calibrate.md` describes.

/// Resolves at the first SIGINT, SIGTERM or SIGHUP after it is first polled
/// (its handlers are installed then, inside a tokio runtime). A signal whose
/// handler cannot be installed is not waited for.
pub async fn requested() {
    async fn ctrl_c() {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await
        }
    }
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        async fn first(kind: SignalKind) {
            match signal(kind) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            _ = ctrl_c() => {}
            _ = first(SignalKind::terminate()) => {}
            _ = first(SignalKind::hangup()) => {}
        }
    }
    #[cfg(not(unix))]
    ctrl_c().await
}
