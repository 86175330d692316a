//! What the `run` command needs around the controllers: settings read the way upstream Karpenter
//! reads them, logs in upstream's JSON shape, and the metrics and health endpoints that the Helm
//! chart's Service, probes and ServiceMonitor point at, and Kubernetes clients throttled as
//! `KUBE_CLIENT_QPS` / `KUBE_CLIENT_BURST` say. Keeping these identical to upstream is
//! what lets an existing install switch controllers without touching its values, dashboards or
//! log queries. Also glibc's allocator set up for a long-running process ([`allocator`]).

pub mod allocator;
pub mod http;
pub mod kube_client;
pub mod logging;
pub mod settings;

pub use settings::Settings;
