//! The metrics server (`GET /metrics` on `METRICS_PORT`) and the health server (`/healthz`,
//! `/readyz` on `HEALTH_PROBE_PORT`).
//!
//! The Helm chart's Service, ServiceMonitor and probes point at these paths and ports, as
//! upstream's do. Both servers listen on all interfaces by default ([`DEFAULT_BIND_IP`]) because
//! the kubelet and Prometheus reach the pod by its IP; the caller binds the listener, so tests
//! use `127.0.0.1:0`.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::metrics;

/// Where the servers listen unless told otherwise: every interface, since probes and scrapes
/// come to the pod IP.
pub const DEFAULT_BIND_IP: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

/// How long shutdown waits for requests in flight (a scrape of a large cluster's metrics can take
/// a moment) before it drops them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Whether the controller is ready to work (caches synced, leader or standby). `/readyz`
/// answers 503 until it is set, so a rollout waits for the new pod.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks the controller ready or not ready.
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }

    /// Whether `/readyz` currently answers 200.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A response body: whole, or streamed piece by piece as the connection takes them.
type Body = UnsyncBoxBody<Bytes, Infallible>;

/// One endpoint's answer.
struct Reply {
    status: StatusCode,
    content_type: &'static str,
    body: Body,
}

impl Reply {
    fn text(status: StatusCode, body: &str) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            body: Full::new(Bytes::from(body.to_string())).boxed_unsync(),
        }
    }

    /// A body written as it is sent (chunked), so that a large one is never held whole.
    fn streamed(
        content_type: &'static str,
        pieces: impl Iterator<Item = String> + Send + 'static,
    ) -> Self {
        let frames = pieces
            .filter(|piece| !piece.is_empty())
            .map(|piece| Ok(Frame::data(Bytes::from(piece))));
        Self {
            status: StatusCode::OK,
            content_type,
            body: StreamBody::new(futures::stream::iter(frames)).boxed_unsync(),
        }
    }
}

type Handler = Arc<dyn Fn() -> Reply + Send + Sync>;

/// The paths one server answers, each with the function that computes its response.
#[derive(Clone)]
pub struct Routes {
    routes: Vec<(&'static str, Handler)>,
}

impl Routes {
    /// `GET /metrics`: every metric of [`metrics::METRICS`] in the text format, streamed (at
    /// 20,000 pods the text is tens of MB).
    pub fn metrics() -> Self {
        Self {
            routes: vec![(
                "/metrics",
                Arc::new(|| Reply::streamed(metrics::TEXT_CONTENT_TYPE, metrics::exposition())),
            )],
        }
    }

    /// `GET /healthz` (200 while the process serves at all: the liveness probe) and
    /// `GET /readyz` (200 once `readiness` is set, 503 before: the readiness probe).
    pub fn health(readiness: Readiness) -> Self {
        Self {
            routes: vec![
                ("/healthz", Arc::new(|| Reply::text(StatusCode::OK, "ok\n"))),
                (
                    "/readyz",
                    Arc::new(move || {
                        if readiness.is_ready() {
                            Reply::text(StatusCode::OK, "ok\n")
                        } else {
                            Reply::text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                        }
                    }),
                ),
            ],
        }
    }

    fn respond(&self, method: &Method, path: &str) -> Response<Body> {
        let reply = match self.routes.iter().find(|(route, _)| *route == path) {
            None => Reply::text(StatusCode::NOT_FOUND, "not found\n"),
            Some(_) if method != Method::GET && method != Method::HEAD => {
                let mut response =
                    to_response(Reply::text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n"));
                response
                    .headers_mut()
                    .insert(ALLOW, hyper::header::HeaderValue::from_static("GET, HEAD"));
                return response;
            }
            Some((_, handler)) => handler(),
        };
        to_response(reply)
    }
}

fn to_response(reply: Reply) -> Response<Body> {
    let mut response = Response::new(reply.body);
    *response.status_mut() = reply.status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(reply.content_type),
    );
    response
}

/// Serves `routes` on `listener` (HTTP/1.1) until `shutdown` completes, then stops accepting
/// and gives requests in flight a few seconds to finish.
pub async fn serve(listener: TcpListener, routes: Routes, shutdown: impl Future<Output = ()>) {
    let routes = Arc::new(routes);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(error) => {
                        tracing::warn!(%error, "accepting a connection failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                };
                let routes = Arc::clone(&routes);
                let service = service_fn(move |request: Request<Incoming>| {
                    let response = routes.respond(request.method(), request.uri().path());
                    async move { Ok::<_, Infallible>(response) }
                });
                let connection = graceful.watch(
                    http1::Builder::new().serve_connection(TokioIo::new(stream), service),
                );
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "HTTP connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("HTTP requests still in flight at shutdown were dropped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::oneshot;

    /// Status code, headers (lower-cased) and body of one HTTP/1.0 request (whose response
    /// body runs to the end of the connection, never chunked).
    async fn fetch(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
        fetch_as(addr, "HTTP/1.0", method, path).await
    }

    /// Status code, headers (lower-cased) and raw body of one request in `version`.
    async fn fetch_as(
        addr: SocketAddr,
        version: &str,
        method: &str,
        path: &str,
    ) -> (u16, String, String) {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        let request =
            format!("{method} {path} {version}\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("request sent");
        let mut raw = String::new();
        stream
            .read_to_string(&mut raw)
            .await
            .expect("response read");
        let (head, body) = raw.split_once("\r\n\r\n").expect("a complete response");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status code");
        (status, head.to_lowercase(), body.to_string())
    }

    /// The body of a chunked HTTP/1.1 response: the chunks' data joined.
    fn dechunk(mut raw: &str) -> String {
        let mut body = String::new();
        loop {
            let (size, rest) = raw.split_once("\r\n").expect("a chunk size line");
            let size = usize::from_str_radix(size, 16).expect("a hexadecimal chunk size");
            if size == 0 {
                return body;
            }
            body.push_str(&rest[..size]);
            raw = rest[size..]
                .strip_prefix("\r\n")
                .expect("a chunk ends its line");
        }
    }

    /// Starts `routes` on an ephemeral loopback port; the sender stops the server.
    async fn start(
        routes: Routes,
    ) -> (SocketAddr, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("bound address");
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, routes, async {
            let _ = stopped.await;
        }));
        (addr, stop, server)
    }

    #[tokio::test]
    async fn readyz_follows_the_readiness_flag_and_healthz_is_always_ok() {
        let readiness = Readiness::default();
        let (addr, stop, server) = start(Routes::health(readiness.clone())).await;

        let (status, _, body) = fetch(addr, "GET", "/healthz").await;
        assert_eq!((status, body.as_str()), (200, "ok\n"));
        let (status, _, body) = fetch(addr, "GET", "/readyz").await;
        assert_eq!((status, body.as_str()), (503, "not ready\n"));

        readiness.set(true);
        let (status, _, _) = fetch(addr, "GET", "/readyz").await;
        assert_eq!(status, 200);
        readiness.set(false);
        let (status, _, _) = fetch(addr, "GET", "/readyz").await;
        assert_eq!(status, 503);

        let (status, _, _) = fetch(addr, "GET", "/metrics").await;
        assert_eq!(status, 404, "metrics are on the other port");
        let (status, head, _) = fetch(addr, "POST", "/healthz").await;
        assert_eq!(status, 405);
        assert!(head.contains("\r\nallow: get, head"), "{head}");

        stop.send(()).expect("server running");
        server.await.expect("server stops cleanly");
    }

    #[tokio::test]
    async fn metrics_are_served_in_the_text_format() {
        let (addr, stop, server) = start(Routes::metrics()).await;
        let (status, head, body) = fetch(addr, "GET", "/metrics").await;
        assert_eq!(status, 200);
        assert!(
            head.contains("\r\ncontent-type: text/plain; version=0.0.4"),
            "{head}"
        );
        assert!(body.contains("# TYPE karpenter_build_info gauge"), "{body}");
        let (status, _, body) = fetch(addr, "HEAD", "/metrics").await;
        assert_eq!((status, body.as_str()), (200, ""));

        let (status, head, chunked) = fetch_as(addr, "HTTP/1.1", "GET", "/metrics").await;
        assert_eq!(status, 200);
        assert!(head.contains("\r\ntransfer-encoding: chunked"), "{head}");
        let body = dechunk(&chunked);
        assert!(body.contains("# TYPE karpenter_build_info gauge"), "{body}");
        assert!(body.ends_with('\n') && !body.contains("\n\n"), "{body}");
        stop.send(()).expect("server running");
        server.await.expect("server stops cleanly");
    }

    #[tokio::test]
    async fn shutdown_stops_accepting_connections() {
        let (addr, stop, server) = start(Routes::health(Readiness::default())).await;
        stop.send(()).expect("server running");
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serve returns after shutdown")
            .expect("no panic");
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }
}
