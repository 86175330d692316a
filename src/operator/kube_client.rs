//! The controller's Kubernetes clients, throttled by `KUBE_CLIENT_QPS` and `KUBE_CLIENT_BURST`.
//!
//! Upstream's client-go client takes a token bucket: `burst` requests may go at once, then
//! `qps` per second on average. Operators size these to protect a busy API server (and EKS's
//! API priority and fairness limits), so the settings must throttle here too. kube-rs has no
//! such limiter, so [`RateLimitLayer`] adds one ([`TokenBucket`]) to the client's tower stack;
//! every client the controller builds shares one bucket, as upstream's one client does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::time::{Instant, Sleep};

use crate::pacing::TokenBucket;
use tower_layer::Layer;
use tower_service::Service;

/// A tower layer that makes each request wait for a token of a shared [`TokenBucket`].
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Arc<TokenBucket>,
}

impl RateLimitLayer {
    /// A layer allowing `burst` requests at once and `qps` per second on average.
    pub fn new(qps: u32, burst: u32) -> Self {
        Self {
            bucket: Arc::new(TokenBucket::new(qps, burst, Instant::now())),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            permitted: false,
        }
    }
}

/// A service that is ready only once its next request holds a token. kube's client drives its
/// service from one task behind a buffer (poll_ready, then call), so waiting in `poll_ready`
/// delays requests in order without cloning the inner service.
pub struct RateLimited<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    wait: Option<Pin<Box<Sleep>>>,
    permitted: bool,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.permitted {
            if self.wait.is_none() {
                let wait = self.bucket.reserve(Instant::now());
                if !wait.is_zero() {
                    self.wait = Some(Box::pin(tokio::time::sleep(wait)));
                }
            }
            if let Some(wait) = self.wait.as_mut() {
                ready!(wait.as_mut().poll(cx));
                self.wait = None;
            }
            self.permitted = true;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.permitted = false;
        self.inner.call(request)
    }
}

/// A tower layer that counts and times every Kubernetes API request under client-go's metric
/// names (`rest_client_requests_total`, `rest_client_request_duration_seconds`), which is how
/// operators see an API request storm or a throttling API server.
///
/// Requests pass this layer before kube's client sets the cluster URL on them (their URIs are
/// still relative), so the `host` label, client-go's `host:port` of the API server, comes from
/// the configuration the client is built from.
#[derive(Clone, Debug)]
pub struct RequestMetricsLayer {
    host: Arc<str>,
}

impl RequestMetricsLayer {
    /// Requests to the API server at `cluster_url` (its `host:port` labels them).
    pub fn new(cluster_url: &hyper::Uri) -> Self {
        Self {
            host: cluster_url
                .authority()
                .map(|a| a.as_str())
                .unwrap_or_default()
                .into(),
        }
    }
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestMetrics {
            inner,
            host: self.host.clone(),
        }
    }
}

/// See [`RequestMetricsLayer`].
#[derive(Clone, Debug)]
pub struct RequestMetrics<S> {
    inner: S,
    host: Arc<str>,
}

impl<S, B, R> Service<hyper::Request<B>> for RequestMetrics<S>
where
    S: Service<hyper::Request<B>, Response = hyper::Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    R: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: hyper::Request<B>) -> Self::Future {
        let method = request.method().to_string();
        // An absolute URI (a request built outside kube's client) names its own host.
        let host = request
            .uri()
            .authority()
            .map_or_else(|| self.host.clone(), |a| a.as_str().into());
        let start = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(r) => r.status().as_u16().to_string(),
                Err(_) => "<error>".to_string(),
            };
            let m = &crate::metrics::METRICS;
            m.rest_client_requests_total
                .with_label_values(&[code.as_str(), &host, method.as_str()])
                .inc();
            m.client_go_request_total
                .with_label_values(&[code.as_str(), method.as_str()])
                .inc();
            m.rest_client_request_duration_seconds
                .with_label_values(&[method.as_str(), &host])
                .observe(start.elapsed().as_secs_f64());
            result
        })
    }
}

/// A client for `config` whose requests go through `limiter` and are counted.
pub fn client(config: kube::Config, limiter: &RateLimitLayer) -> Result<kube::Client, kube::Error> {
    let metrics = RequestMetricsLayer::new(&config.cluster_url);
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(limiter)
        .with_layer(&metrics)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::future::{Ready, poll_fn, ready};
    use std::sync::Mutex;
    use std::time::Duration;

    /// Records when each request reached it.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<Instant>>>);

    impl Service<u32> for Recorder {
        type Response = u32;
        type Error = Infallible;
        type Future = Ready<Result<u32, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: u32) -> Self::Future {
            self.0.lock().expect("lock").push(Instant::now());
            ready(Ok(request))
        }
    }

    /// Real time, so only lower bounds are asserted: the limiter may never let a request
    /// through early, however loaded the machine.
    #[tokio::test]
    async fn requests_through_the_layer_are_paced() {
        let recorder = Recorder::default();
        let layer = RateLimitLayer::new(20, 2);
        let mut service = layer.layer(recorder.clone());
        // A second service from the same layer shares the bucket.
        let mut other = layer.layer(recorder.clone());
        let start = Instant::now();
        for i in 0..6 {
            let svc = if i % 2 == 0 { &mut service } else { &mut other };
            poll_fn(|cx| svc.poll_ready(cx)).await.expect("ready");
            assert_eq!(svc.call(i).await.expect("called"), i);
        }
        let offsets: Vec<Duration> = recorder
            .0
            .lock()
            .expect("lock")
            .iter()
            .map(|t| *t - start)
            .collect();
        assert_eq!(offsets.len(), 6);
        // Two at once (the burst), then one every 50 ms (20 per second).
        for (i, earliest_ms) in [0, 0, 50, 100, 150, 200].into_iter().enumerate() {
            assert!(
                offsets[i] >= Duration::from_millis(earliest_ms),
                "request {i} went at {:?}, before {earliest_ms} ms",
                offsets[i]
            );
        }
    }

    /// Answers every request with 200.
    #[derive(Clone)]
    struct Ok200;

    impl Service<hyper::Request<()>> for Ok200 {
        type Response = hyper::Response<()>;
        type Error = Infallible;
        type Future = Ready<Result<hyper::Response<()>, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: hyper::Request<()>) -> Self::Future {
            ready(Ok(hyper::Response::new(())))
        }
    }

    /// kube's client hands the layer relative URIs: the API server's `host:port` comes from the
    /// cluster URL, as client-go's `host` label does. Each request counts once in both request
    /// counters and is timed once.
    #[tokio::test]
    async fn requests_are_counted_by_the_api_servers_host() {
        let cluster: hyper::Uri = "https://127.0.0.1:46999".parse().expect("uri");
        let mut service = RequestMetricsLayer::new(&cluster).layer(Ok200);
        let series = ["200", "127.0.0.1:46999", "DELETE"];
        let m = &crate::metrics::METRICS;
        let before = m
            .rest_client_requests_total
            .with_label_values(&series)
            .get();
        let before_by_code = m
            .client_go_request_total
            .with_label_values(&["200", "DELETE"])
            .get();
        let timed = m
            .rest_client_request_duration_seconds
            .with_label_values(&["DELETE", "127.0.0.1:46999"]);
        let timed_before = timed.get_sample_count();
        let request = hyper::Request::delete("/api/v1/namespaces/a/pods/b")
            .body(())
            .expect("request");
        service.call(request).await.expect("called");
        let after = m
            .rest_client_requests_total
            .with_label_values(&series)
            .get();
        assert_eq!(after - before, 1.0);
        let after_by_code = m
            .client_go_request_total
            .with_label_values(&["200", "DELETE"])
            .get();
        assert_eq!(after_by_code - before_by_code, 1.0);
        assert_eq!(timed.get_sample_count() - timed_before, 1);
    }
}
