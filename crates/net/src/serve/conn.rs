//! The connections of `blis serve`: the accept loop, per-connection timeouts
//! and the bounded graceful shutdown, on hyper's HTTP/1 server.
//!
//! Each connection is served in its own task next to a watchdog that closes
//! it when no request is being handled and
//! - a request head is still incomplete [`ServeTimeouts::header_read_ms`]
//!   after the connection was accepted, or after the first byte of a later
//!   request arrived (slow or half-sent heads: slowloris);
//! - no byte of a new request arrived [`ServeTimeouts::keep_alive_idle_ms`]
//!   after the previous response ended.
//!
//! A request is "being handled" from its parsed head until its response body
//! has been handed to the socket; its body read is bounded by the handler
//! ([`ServeTimeouts::body_read_ms`]) and its response by the simulation.
//!
//! Shutdown ([`serve`] once `stop` fires) goes through the [`Stage`]s: stop
//! accepting, close every connection between requests, and let requests in
//! flight finish for up to [`ServeTimeouts::shutdown_grace_ms`], their
//! connections closing after them ([`Stage::Draining`]); then tell the
//! handlers to end their responses ([`Stage::Ending`]: a stream gets an
//! error event and `data: [DONE]`, a whole response a 503) and give the
//! connections [`FLUSH_MS`] to write those last bytes before closing
//! whatever is left.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::service::Service;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::ServeTimeouts;

/// How long connections get, after the handlers were told to end their
/// responses, to write the last bytes before they are closed regardless.
pub const FLUSH_MS: u64 = 1_000;

/// Pause after an accept error that is not about one connection (out of
/// file descriptors or memory): the listener stays readable while the
/// connection waits in the backlog, so retrying at once would spin.
const ACCEPT_BACKOFF_MS: u64 = 50;

/// Where the server is in its life; only ever moves forward.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// Accepting connections and serving requests.
    Serving,
    /// Not accepting; connections close between requests.
    Draining,
    /// The grace period is over: handlers end their responses now.
    Ending,
}

/// `ms` after `t`; `None` when that is beyond what [`Instant`] holds (never).
fn after(t: Instant, ms: u64) -> Option<Instant> {
    t.checked_add(Duration::from_millis(ms))
}

/// Sleeps until `t`, or forever for `None`.
async fn until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Accepts connections on `listener` and serves `router` on them until `stop`
/// fires (or its sender is dropped), then shuts down as the module describes.
/// Returns once every connection is closed: at most `shutdown_grace_ms +`
/// [`FLUSH_MS`] after `stop`. Accept errors never end it.
pub(super) async fn serve(
    listener: TcpListener,
    router: Router,
    timeouts: ServeTimeouts,
    stage: watch::Sender<Stage>,
    stop: oneshot::Receiver<()>,
) {
    let mut conns = JoinSet::new();
    let mut stop = pin!(stop);
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, _)) => {
                // Tokens are small writes: without TCP_NODELAY, Nagle's algorithm and
                // delayed ACKs hold a chunk back ~40 ms.
                let _ = tcp.set_nodelay(true);
                conns.spawn(connection(tcp, router.clone(), timeouts, stage.subscribe()));
            }
            // That connection died in the backlog, or a signal interrupted the call: the next accept is unaffected.
            Err(e)
                if matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::Interrupted) => {}
            Err(_) => tokio::select! {
                _ = &mut stop => break,
                _ = tokio::time::sleep(Duration::from_millis(ACCEPT_BACKOFF_MS)) => {}
            },
        }
    }
    drop(listener);
    stage.send_replace(Stage::Draining);
    drain(&mut conns, after(Instant::now(), timeouts.shutdown_grace_ms)).await;
    stage.send_replace(Stage::Ending);
    drain(&mut conns, after(Instant::now(), FLUSH_MS)).await;
    // Aborting a connection's task drops its socket.
    conns.shutdown().await;
}

/// Waits until every connection task has ended, or until `deadline`.
async fn drain(conns: &mut JoinSet<()>, deadline: Option<Instant>) {
    tokio::select! {
        _ = async { while conns.join_next().await.is_some() {} } => {}
        _ = until(deadline) => {}
    }
}

/// Serves one connection until it ends, a timeout closes it, or shutdown does.
async fn connection(tcp: TcpStream, router: Router, timeouts: ServeTimeouts, mut stage: watch::Receiver<Stage>) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched { tcp, activity: activity.clone() });
    let service = Tracked { inner: TowerToHyperService::new(router), activity: activity.clone() };
    let mut conn = pin!(hyper::server::conn::http1::Builder::new().serve_connection(io, service));
    // Re-check at least this often, so a deadline that moved earlier (a
    // request ended, a head began) is never noticed late.
    let recheck_ms = timeouts.header_read_ms.min(timeouts.keep_alive_idle_ms);
    let mut draining = false;
    loop {
        let now = Instant::now();
        let deadline = activity.deadline(&timeouts);
        if deadline.is_some_and(|d| d <= now) {
            return;
        }
        let wake = [deadline, after(now, recheck_ms)].into_iter().flatten().min();
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = until(wake) => {}
            _ = stage.changed(), if !draining => {
                draining = true;
                // Nothing was ever answered here, so nothing is left to write.
                if activity.never_used() {
                    return;
                }
                // Closes at once between requests (after flushing the last
                // response), else after answering the request in flight.
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// What one connection is doing, for its watchdog.
struct Activity(Mutex<ActivityState>);

struct ActivityState {
    /// Whether a request head was ever parsed here.
    used: bool,
    /// Requests whose head is parsed and whose response is not yet written.
    in_flight: u32,
    /// With none in flight: whether a request head has begun (or the
    /// connection is new), so the header timeout applies rather than the idle one.
    head_begun: bool,
    /// With none in flight: when the head began, or the last response ended.
    since: Instant,
}

impl Activity {
    /// A just-accepted connection: its first head is due within the header timeout.
    fn new() -> Activity {
        Activity(Mutex::new(ActivityState { used: false, in_flight: 0, head_begun: true, since: Instant::now() }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes arrived from the client.
    fn on_read(&self) {
        let mut s = self.lock();
        if s.in_flight == 0 && !s.head_begun {
            s.head_begun = true;
            s.since = Instant::now();
        }
    }

    /// Whether no request was ever handled here (none is in flight, none was answered).
    fn never_used(&self) -> bool {
        !self.lock().used
    }

    /// When the connection is to be closed if nothing changes; `None` while a
    /// request is being handled (or beyond what [`Instant`] holds).
    fn deadline(&self, t: &ServeTimeouts) -> Option<Instant> {
        let s = self.lock();
        match (s.in_flight, s.head_begun) {
            (0, true) => after(s.since, t.header_read_ms),
            (0, false) => after(s.since, t.keep_alive_idle_ms),
            _ => None,
        }
    }
}

/// One request being handled, from its parsed head until its response body
/// is done (or dropped, when the client goes away).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: Arc<Activity>) -> InFlight {
        let mut s = activity.lock();
        s.used = true;
        s.in_flight += 1;
        drop(s);
        InFlight(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.in_flight -= 1;
        if s.in_flight == 0 {
            s.head_begun = false;
            s.since = Instant::now();
        }
    }
}

/// The socket, reporting reads to the connection's [`Activity`].
struct Watched {
    tcp: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.on_read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// The router, marking each request in flight until its response body is done.
struct Tracked {
    inner: TowerToHyperService<Router>,
    activity: Arc<Activity>,
}

impl Service<hyper::Request<Incoming>> for Tracked {
    type Response = hyper::Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::start(self.activity.clone());
        let response = self.inner.call(request);
        Box::pin(async move { Ok(response.await?.map(|body| TrackedBody { body, _in_flight: in_flight })) })
    }
}

/// A response body that keeps its request in flight until hyper drops it.
struct TrackedBody {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
