//! Prometheus metrics with upstream Karpenter's names, types and labels.
//!
//! Dashboards, alerts and autoscaling rules written for upstream Karpenter query these exact
//! names, so switching controllers must not break them. Every family lives in one registry
//! ([`METRICS`]), created and registered once; controllers update the metric where the event
//! happens (`METRICS.nodeclaims_created_total.with_label_values(&[..]).inc()`), and the metrics
//! server serves [`encode`].

use std::sync::LazyLock;

use prometheus::core::Collector;
use prometheus::{
    Counter, CounterVec, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, Opts, Registry,
    TextEncoder, exponential_buckets,
};

use crate::apis::labels;
pub use published::PublishedGauges;

pub mod cluster_state;
pub mod instance_types;
pub mod nodes;
pub mod pod_scheduling;
pub mod pods;
pub mod published;
pub mod status;
mod summary;
pub mod workqueue;

pub use summary::SummaryVec;

tokio::task_local! {
    /// The controller the current task works for (see [`in_controller`]).
    static CONTROLLER: &'static str;
}

/// Runs `work` as controller `name`: metrics recorded inside it (such as the cloud-provider
/// call metrics) carry `controller="<name>"`, as upstream's injected controller name does.
/// The controller's reconcile and work-queue families have their series from then on, at 0
/// until something happens, as controller-runtime creates them when a controller starts:
/// `rate()` of its errors and an alert on its panics see a healthy controller, not a missing
/// one.
pub async fn in_controller<F: std::future::Future>(name: &'static str, work: F) -> F::Output {
    METRICS.start_controller(name);
    CONTROLLER.scope(name, work).await
}

/// The `result` values `runtime::panics` records in `controller_runtime_reconcile_total`.
pub const RECONCILE_RESULTS: [&str; 3] = ["success", "error", "requeue_after"];

/// The controller the current task runs as, or `unknown` outside [`in_controller`].
pub fn current_controller() -> &'static str {
    CONTROLLER.try_with(|name| *name).unwrap_or("unknown")
}

/// Counts a NodeClaim the API server just created in `karpenter_nodeclaims_created_total`.
/// `reason` is upstream's: `provisioned` for the provisioner, the lower-cased disruption reason
/// (`underutilized`, `empty`, `drifted`, ...) for a disruption replacement.
pub fn count_nodeclaim_created(reason: &str, claim: &crate::apis::NodeClaim) {
    let meta = &claim.metadata;
    let nodepool = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODEPOOL))
        .map(String::as_str)
        .unwrap_or_default();
    let relaxed = meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(labels::NODECLAIM_MIN_VALUES_RELAXED));
    METRICS
        .nodeclaims_created_total
        .with_label_values(&[reason, nodepool, if relaxed { "true" } else { "false" }])
        .inc();
}

/// The registry and every metric family; see [`METRICS`].
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The metrics in Prometheus' text exposition format, in pieces the `/metrics` endpoint
/// streams as it takes them (see [`PublishedGauges::text_chunks`]); empty pieces may occur.
pub fn exposition() -> impl Iterator<Item = String> + Send + 'static {
    workqueue::WORKQUEUES.refresh();
    METRICS.exposition()
}

/// The whole [`exposition`] as one text.
pub fn encode() -> String {
    exposition().collect()
}

/// The name of every registered family, including those with no series yet (which [`encode`]
/// leaves out): what dashboards, alerts and documentation may refer to.
pub fn family_names() -> &'static [String] {
    &METRICS.families
}

/// One registered family as the exposition declares it: name, `# TYPE` and label names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    pub name: String,
    /// `counter`, `gauge`, `histogram` or `summary`.
    pub kind: &'static str,
    pub labels: Vec<String>,
}

/// Every registered family with its type and labels, including those with no series yet: what
/// the audit against upstream's documented families compares (`tests/metrics_upstream.rs`).
pub fn families() -> &'static [Family] {
    &METRICS.described
}

/// The content type of [`encode`]'s output, which scrapers use to pick a parser.
pub const TEXT_CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// client-go's request latency buckets, so that dashboards built for it read ours alike.
pub const REST_CLIENT_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// Upstream's duration buckets (controller-runtime's reconcile buckets extended to 10 minutes),
/// so that histogram quantiles are comparable with upstream's.
pub const DURATION_BUCKETS: [f64; 45] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];

/// Buckets of batch sizes (items per EC2 API call), as upstream's batcher reports them.
const BATCH_SIZE_BUCKETS: [f64; 34] = [
    1.0, 2.0, 4.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0,
    125.0, 150.0, 175.0, 200.0, 225.0, 250.0, 275.0, 300.0, 350.0, 400.0, 450.0, 500.0, 550.0,
    600.0, 700.0, 800.0, 900.0, 1000.0,
];

/// Node lifetimes from 15 minutes to 30 days.
const LIFETIME_BUCKETS: [f64; 21] = [
    900.0, 1800.0, 2700.0, 3600.0, 7200.0, 14400.0, 21600.0, 28800.0, 36000.0, 43200.0, 57600.0,
    72000.0, 86400.0, 172800.0, 259200.0, 432000.0, 864000.0, 1296000.0, 1728000.0, 2160000.0,
    2592000.0,
];

/// controller-runtime's `controller_runtime_reconcile_time_seconds` buckets (5 ms to 60 s).
const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// Scores of Balanced consolidation moves; 0.5 is the acceptance threshold.
const CONSOLIDATION_SCORE_BUCKETS: [f64; 8] = [0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0];

/// The kinds whose status conditions get per-kind `operator_<kind>_*` families.
const STATUS_KINDS: [&str; 4] = ["nodeclaim", "nodepool", "node", "ec2nodeclass"];

/// Label keys of the node metrics (`karpenter_nodes_*`), each with the metric label it becomes:
/// the key's last segment, lower-cased, `-` → `_` (`karpenter.k8s.aws/instance-cpu` →
/// `instance_cpu`), as upstream names them. The node families read each key from the Node and
/// write the value under that label name. Made once: a scrape of the node families reads the
/// keys for every label of every series it sorts and writes.
pub fn node_metric_labels() -> &'static [(&'static str, String)] {
    static LABELS: LazyLock<Vec<(&'static str, String)>> = LazyLock::new(|| {
        let mut out: Vec<(&'static str, String)> = Vec::new();
        for key in labels::WELL_KNOWN_LABELS
            .iter()
            .chain(labels::AWS_WELL_KNOWN_LABELS)
        {
            let name = key
                .rsplit('/')
                .next()
                .unwrap_or(key)
                .to_lowercase()
                .replace(['-', '.'], "_");
            if !out.iter().any(|(_, existing)| *existing == name) {
                out.push((key, name));
            }
        }
        out
    });
    &LABELS
}

/// A Prometheus label name for a Kubernetes label key (`karpenter.sh/nodepool` →
/// `karpenter_sh_nodepool`), for the extra labels of the status-condition families.
fn label_key_to_metric_label(key: &str) -> String {
    key.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The `operator_<kind>_*` families of one kind (or, for the deprecated aggregate families, of
/// all kinds with a `kind` label), which upstream's status controller reports for alerting on
/// stuck conditions and slow terminations.
pub struct StatusMetrics {
    /// Gauge, 1 per object × condition type × status × reason currently set.
    pub status_condition_count: PublishedGauges,
    /// Gauge: seconds each current condition has had its status.
    pub status_condition_current_status_seconds: PublishedGauges,
    /// Counter: condition status changes.
    pub status_condition_transitions_total: CounterVec,
    /// Histogram: how long a condition kept a status before it changed.
    pub status_condition_transition_seconds: HistogramVec,
    /// Gauge: seconds an object has been terminating.
    pub termination_current_time_seconds: PublishedGauges,
    /// Histogram: how long objects took to terminate.
    pub termination_duration_seconds: HistogramVec,
}

/// Every metric family of upstream Karpenter v1 (core, AWS provider, and the operator status
/// families), one field per family named after the metric without its `karpenter_` prefix.
pub struct Metrics {
    registry: Registry,
    /// The families whose series are replaced whole (published by a pass, or served from the
    /// node and pod caches when scraped), by name; written to the exposition straight from
    /// their series (see [`PublishedGauges::text_chunks`]), not through the registry.
    published: Vec<PublishedGauges>,
    /// Every family's name, whether or not it has series yet (see [`family_names`]).
    families: Vec<String>,
    /// The same families with their types and labels (see [`families`]).
    described: Vec<Family>,

    // Core.
    /// `karpenter_build_info`: version, goversion, goarch, commit (always 1).
    pub build_info: GaugeVec,

    // Library families, under client-go's names, which operators' alerts query.
    /// `rest_client_requests_total`: Kubernetes API requests by status code (`<error>` when no
    /// response came back), host and method.
    pub rest_client_requests_total: CounterVec,
    /// `client_go_request_total`: the same requests by status code and method only, under the
    /// name upstream Karpenter's documentation lists.
    pub client_go_request_total: CounterVec,
    /// `rest_client_request_duration_seconds`: Kubernetes API request latency by verb and host.
    pub rest_client_request_duration_seconds: HistogramVec,
    /// `leader_election_master_status`: 1 while this replica holds the named lease, else 0.
    pub leader_election_master_status: GaugeVec,
    /// `karpenter_nodeclaims_created_total`: reason, nodepool, min_values_relaxed.
    pub nodeclaims_created_total: CounterVec,
    /// `karpenter_nodeclaims_terminated_total`: nodepool, capacity_type, zone.
    pub nodeclaims_terminated_total: CounterVec,
    /// `karpenter_nodeclaims_disrupted_total`: reason, nodepool, capacity_type,
    /// consolidation_policy, termination_mode.
    pub nodeclaims_disrupted_total: CounterVec,
    /// `karpenter_pods_disruption_initiated_total`: same labels as nodeclaims_disrupted_total.
    pub pods_disruption_initiated_total: CounterVec,
    /// `karpenter_nodes_created_total`: nodepool, zone.
    pub nodes_created_total: CounterVec,
    /// `karpenter_nodes_terminated_total`: nodepool, zone.
    pub nodes_terminated_total: CounterVec,
    /// `karpenter_nodeclaims_termination_duration_seconds`: nodepool.
    pub nodeclaims_termination_duration_seconds: HistogramVec,
    /// `karpenter_nodeclaims_instance_termination_duration_seconds`: nodepool.
    pub nodeclaims_instance_termination_duration_seconds: HistogramVec,
    /// `karpenter_nodeclaims_unhealthy_disrupted_total`: condition, nodepool, capacity_type,
    /// image_id.
    pub nodeclaims_unhealthy_disrupted_total: CounterVec,
    /// `karpenter_nodes_termination_duration_seconds` (summary): nodepool.
    pub nodes_termination_duration_seconds: SummaryVec,
    /// `karpenter_nodes_drained_total`: nodepool.
    pub nodes_drained_total: CounterVec,
    /// `karpenter_nodes_lifetime_duration_seconds`: nodepool.
    pub nodes_lifetime_duration_seconds: HistogramVec,
    /// `karpenter_pods_eviction_requests_total`: code.
    pub pods_eviction_requests_total: CounterVec,
    /// `karpenter_pods_drained_total`: reason.
    pub pods_drained_total: CounterVec,
    /// `karpenter_nodes_allocatable`: node labels ([`node_metric_labels`]), node_name, phase,
    /// managed, resource_type. Like the other node families, written from the node and pod
    /// caches when scraped ([`nodes`]).
    pub nodes_allocatable: PublishedGauges,
    /// `karpenter_nodes_total_pod_requests`: as nodes_allocatable.
    pub nodes_total_pod_requests: PublishedGauges,
    /// `karpenter_nodes_total_pod_limits`: as nodes_allocatable.
    pub nodes_total_pod_limits: PublishedGauges,
    /// `karpenter_nodes_total_daemon_requests`: as nodes_allocatable.
    pub nodes_total_daemon_requests: PublishedGauges,
    /// `karpenter_nodes_total_daemon_limits`: as nodes_allocatable.
    pub nodes_total_daemon_limits: PublishedGauges,
    /// `karpenter_nodes_system_overhead`: as nodes_allocatable.
    pub nodes_system_overhead: PublishedGauges,
    /// `karpenter_nodes_current_lifetime_seconds`: node labels, node_name, phase, managed.
    pub nodes_current_lifetime_seconds: PublishedGauges,
    /// `karpenter_cluster_utilization_percent`: resource_type.
    pub cluster_utilization_percent: PublishedGauges,
    /// `karpenter_nodepools_limit`: resource_type, nodepool.
    pub nodepools_limit: GaugeVec,
    /// `karpenter_nodepools_usage`: resource_type, nodepool.
    pub nodepools_usage: GaugeVec,
    /// `karpenter_nodepools_cost_total`: nodepool.
    pub nodepools_cost_total: PublishedGauges,
    /// `karpenter_nodepools_cost_tracker_errors_total`: nodepool.
    pub nodepools_cost_tracker_errors_total: CounterVec,
    /// `karpenter_nodepools_allowed_disruptions`: nodepool, reason.
    pub nodepools_allowed_disruptions: GaugeVec,
    /// `karpenter_nodepools_nodes_consuming_budgets`: nodepool, reason.
    pub nodepools_nodes_consuming_budgets: GaugeVec,
    /// `karpenter_voluntary_disruption_decision_evaluation_duration_seconds`: reason,
    /// consolidation_type.
    pub voluntary_disruption_decision_evaluation_duration_seconds: HistogramVec,
    /// `karpenter_voluntary_disruption_decisions_total`: decision, reason, consolidation_type.
    pub voluntary_disruption_decisions_total: CounterVec,
    /// `karpenter_voluntary_disruption_decisions_by_nodepool_total`: nodepool, decision, reason,
    /// consolidation_type.
    pub voluntary_disruption_decisions_by_nodepool_total: CounterVec,
    /// `karpenter_voluntary_disruption_eligible_nodes`: reason.
    pub voluntary_disruption_eligible_nodes: GaugeVec,
    /// `karpenter_voluntary_disruption_failed_validations_total`: consolidation_type.
    pub voluntary_disruption_failed_validations_total: CounterVec,
    /// `karpenter_voluntary_disruption_queue_failures_total`: decision, reason,
    /// consolidation_type.
    pub voluntary_disruption_queue_failures_total: CounterVec,
    /// `karpenter_consolidation_score`: decision, nodepool, policy.
    pub consolidation_score: HistogramVec,
    /// `karpenter_consolidation_moves_total`: decision, nodepool, policy.
    pub consolidation_moves_total: CounterVec,
    /// `karpenter_pods_state`: name, namespace, owner, node, scheduled, nodepool, zone, arch,
    /// capacity_type, instance_type, phase, ready, managed.
    pub pods_state: PublishedGauges,
    /// `karpenter_pods_startup_duration_seconds` (summary, no labels).
    pub pods_startup_duration_seconds: SummaryVec,
    /// `karpenter_pods_unstarted_time_seconds`: name, namespace.
    pub pods_unstarted_time_seconds: PublishedGauges,
    /// `karpenter_pods_bound_duration_seconds`.
    pub pods_bound_duration_seconds: Histogram,
    /// `karpenter_pods_unbound_time_seconds`: name, namespace.
    pub pods_unbound_time_seconds: PublishedGauges,
    /// `karpenter_pods_provisioning_bound_duration_seconds`.
    pub pods_provisioning_bound_duration_seconds: Histogram,
    /// `karpenter_pods_provisioning_unbound_time_seconds`: name, namespace.
    pub pods_provisioning_unbound_time_seconds: PublishedGauges,
    /// `karpenter_pods_provisioning_startup_duration_seconds`.
    pub pods_provisioning_startup_duration_seconds: Histogram,
    /// `karpenter_pods_provisioning_unstarted_time_seconds`: name, namespace.
    pub pods_provisioning_unstarted_time_seconds: PublishedGauges,
    /// `karpenter_pods_provisioning_scheduling_undecided_time_seconds`: name, namespace.
    pub pods_provisioning_scheduling_undecided_time_seconds: PublishedGauges,
    /// `karpenter_pods_scheduling_decision_duration_seconds`.
    pub pods_scheduling_decision_duration_seconds: Histogram,
    /// `karpenter_cluster_state_node_count`.
    pub cluster_state_node_count: Gauge,
    /// `karpenter_cluster_state_synced` (1 or 0).
    pub cluster_state_synced: Gauge,
    /// `karpenter_cluster_state_unsynced_time_seconds`.
    pub cluster_state_unsynced_time_seconds: Gauge,
    /// `karpenter_scheduler_scheduling_duration_seconds`: controller.
    pub scheduler_scheduling_duration_seconds: HistogramVec,
    /// `karpenter_scheduler_queue_depth`: controller, scheduling_id.
    pub scheduler_queue_depth: GaugeVec,
    /// `karpenter_scheduler_unfinished_work_seconds`: controller, scheduling_id.
    pub scheduler_unfinished_work_seconds: GaugeVec,
    /// `karpenter_scheduler_ignored_pods_count`.
    pub scheduler_ignored_pods_count: Gauge,
    /// `karpenter_scheduler_unschedulable_pods_count`: controller.
    pub scheduler_unschedulable_pods_count: GaugeVec,
    /// `karpenter_scheduler_pending_pods_by_effective_zone_count`: controller, zone.
    pub scheduler_pending_pods_by_effective_zone_count: PublishedGauges,
    /// `karpenter_cloudprovider_duration_seconds`: controller, method, provider.
    pub cloudprovider_duration_seconds: HistogramVec,
    /// `karpenter_cloudprovider_errors_total`: controller, method, provider, error.
    pub cloudprovider_errors_total: CounterVec,
    /// `controller_runtime_reconcile_panics_total`: controller (controller-runtime's name).
    pub reconcile_panics_total: CounterVec,
    /// `controller_runtime_reconcile_total`: controller, result (`success`, `error`,
    /// `requeue_after`; a caught panic counts as `error`).
    pub reconcile_total: CounterVec,
    /// `controller_runtime_reconcile_errors_total`: controller.
    pub reconcile_errors_total: CounterVec,
    /// `controller_runtime_reconcile_time_seconds`: controller.
    pub reconcile_time_seconds: HistogramVec,
    /// `controller_runtime_active_workers`: controller; reconciles (or polling passes) running now.
    pub active_workers: GaugeVec,
    /// `workqueue_depth`: name, controller, priority (controller-runtime's; both names are the
    /// controller's, priority is empty as for a queue without priorities). The work queues are
    /// kept in [`workqueue`].
    pub workqueue_depth: GaugeVec,
    /// `workqueue_adds_total`: name, controller.
    pub workqueue_adds_total: CounterVec,
    /// `workqueue_queue_duration_seconds`: name, controller.
    pub workqueue_queue_duration_seconds: HistogramVec,
    /// `workqueue_work_duration_seconds`: name, controller.
    pub workqueue_work_duration_seconds: HistogramVec,
    /// `workqueue_retries_total`: name, controller.
    pub workqueue_retries_total: CounterVec,
    /// `workqueue_unfinished_work_seconds`: name, controller.
    pub workqueue_unfinished_work_seconds: GaugeVec,
    /// `workqueue_longest_running_processor_seconds`: name, controller.
    pub workqueue_longest_running_processor_seconds: GaugeVec,

    // AWS provider.
    /// `karpenter_cloudprovider_batcher_batch_time_seconds`: batcher.
    pub cloudprovider_batcher_batch_time_seconds: HistogramVec,
    /// `karpenter_cloudprovider_batcher_batch_size`: batcher.
    pub cloudprovider_batcher_batch_size: HistogramVec,
    /// `karpenter_cloudprovider_instance_type_offering_available`: instance_type,
    /// capacity_type, zone.
    pub cloudprovider_instance_type_offering_available: PublishedGauges,
    /// `karpenter_cloudprovider_instance_type_offering_price_estimate`: instance_type,
    /// capacity_type, zone.
    pub cloudprovider_instance_type_offering_price_estimate: PublishedGauges,
    /// `karpenter_cloudprovider_instance_type_cpu_cores`: instance_type.
    pub cloudprovider_instance_type_cpu_cores: PublishedGauges,
    /// `karpenter_cloudprovider_instance_type_memory_bytes`: instance_type.
    pub cloudprovider_instance_type_memory_bytes: PublishedGauges,
    /// `karpenter_cloudprovider_instance_launch_failures_total`: zone, zone_id, capacity_type,
    /// reason.
    pub cloudprovider_instance_launch_failures_total: CounterVec,
    /// `karpenter_cloudprovider_instance_termination_failures_total`: zone, zone_id.
    pub cloudprovider_instance_termination_failures_total: CounterVec,
    /// `karpenter_interruption_received_messages_total`: message_type.
    pub interruption_received_messages_total: CounterVec,
    /// `karpenter_interruption_deleted_messages_total`.
    pub interruption_deleted_messages_total: Counter,
    /// `karpenter_interruption_message_queue_duration_seconds`.
    pub interruption_message_queue_duration_seconds: Histogram,
    /// `karpenter_interruption_instance_status_unhealthy_total`: category.
    pub interruption_instance_status_unhealthy_total: CounterVec,
    /// `karpenter_ec2nodeclasses_userdata_bytes`: nodeclass.
    pub ec2nodeclasses_userdata_bytes: GaugeVec,

    // Operator status families.
    /// `operator_nodeclaim_*`; the condition gauges add karpenter_k8s_aws_ec2nodeclass and
    /// karpenter_sh_nodepool.
    pub nodeclaim_status: StatusMetrics,
    /// `operator_nodepool_*`.
    pub nodepool_status: StatusMetrics,
    /// `operator_node_*`; the condition gauges add karpenter_k8s_aws_ec2nodeclass,
    /// karpenter_sh_nodepool and karpenter_sh_initialized.
    pub node_status: StatusMetrics,
    /// `operator_ec2nodeclass_*`.
    pub ec2nodeclass_status: StatusMetrics,
    /// The deprecated `operator_status_condition_*` and `operator_termination_*` families,
    /// which upstream still emits for every kind with a `kind` label.
    pub deprecated_status: StatusMetrics,
}

/// Registers families as they are built; a registration error is a programming error (a name
/// used twice or an invalid name) that the tests catch, so it panics with the metric's name.
struct Builder {
    registry: Registry,
    /// Every family, in registration order.
    families: std::cell::RefCell<Vec<Family>>,
    /// The published gauge families (see [`Metrics::published`]).
    published: std::cell::RefCell<Vec<PublishedGauges>>,
}

impl Builder {
    fn register<C: Collector + Clone + 'static>(
        &self,
        name: &str,
        kind: &'static str,
        collector: C,
    ) -> C {
        if let Err(e) = self.registry.register(Box::new(collector.clone())) {
            panic!("registering metric {name}: {e}");
        }
        self.families
            .borrow_mut()
            .extend(collector.desc().iter().map(|d| Family {
                name: d.fq_name.clone(),
                kind,
                labels: d.variable_labels.clone(),
            }));
        collector
    }

    fn counter_vec(&self, name: &str, help: &str, labels: &[&str]) -> CounterVec {
        let vec = CounterVec::new(Opts::new(name, help), labels)
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.register(name, "counter", vec)
    }

    fn counter(&self, name: &str, help: &str) -> Counter {
        let counter = Counter::with_opts(Opts::new(name, help))
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.register(name, "counter", counter)
    }

    fn gauge_vec(&self, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
        let vec = GaugeVec::new(Opts::new(name, help), labels)
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.register(name, "gauge", vec)
    }

    fn published_gauges(&self, name: &str, help: &str, labels: &[&str]) -> PublishedGauges {
        let family = PublishedGauges::new(name, help, labels)
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        let mut families = self.families.borrow_mut();
        // The registry's own check, for a family it does not hold.
        if families.iter().any(|f| f.name == name) {
            panic!("registering metric {name}: a family of that name exists");
        }
        families.push(Family {
            name: name.to_string(),
            kind: "gauge",
            labels: labels.iter().map(|l| l.to_string()).collect(),
        });
        self.published.borrow_mut().push(family.clone());
        family
    }

    fn gauge(&self, name: &str, help: &str) -> Gauge {
        let gauge = Gauge::with_opts(Opts::new(name, help))
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.register(name, "gauge", gauge)
    }

    fn histogram_vec(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
        buckets: &[f64],
    ) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        let vec = HistogramVec::new(opts, labels).unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.register(name, "histogram", vec)
    }

    fn histogram(&self, name: &str, help: &str, buckets: &[f64]) -> Histogram {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        let histogram = Histogram::with_opts(opts).unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.register(name, "histogram", histogram)
    }

    fn summary_vec(&self, name: &str, help: &str, labels: &[&str]) -> SummaryVec {
        let vec =
            SummaryVec::new(name, help, labels).unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.register(name, "summary", vec)
    }

    /// One kind's status families; `kind` is None for the deprecated aggregate families.
    fn status(&self, kind: Option<&str>, extra_labels: &[&str]) -> StatusMetrics {
        let (prefix, kind_label): (String, &[&str]) = match kind {
            Some(kind) => (format!("operator_{kind}"), &[]),
            None => ("operator".to_string(), &["kind"]),
        };
        let what = kind.unwrap_or("object");
        let extra: Vec<String> = extra_labels
            .iter()
            .map(|k| label_key_to_metric_label(k))
            .collect();
        let labels = |base: &[&str], with_extra: bool| -> Vec<String> {
            let mut out: Vec<String> = base.iter().map(|s| s.to_string()).collect();
            out.extend(kind_label.iter().map(|s| s.to_string()));
            if with_extra {
                out.extend(extra.iter().cloned());
            }
            out
        };
        let condition = labels(
            &["namespace", "name", "group", "type", "status", "reason"],
            true,
        );
        let transitions = labels(&["group", "type", "status", "reason"], false);
        let transition_seconds = labels(&["group", "type", "status"], false);
        let terminating = labels(&["namespace", "name", "group"], false);
        let termination = labels(&["group"], false);
        // Powers of two from half a second to over two hours.
        let transition_buckets = exponential_buckets(0.5, 2.0, 15)
            .unwrap_or_else(|e| panic!("status condition buckets: {e}"));
        StatusMetrics {
            status_condition_count: self.published_gauges(
                &format!("{prefix}_status_condition_count"),
                &format!("1 for each status condition a {what} currently has, by type, status and reason; alert on e.g. Ready=False."),
                &as_strs(&condition),
            ),
            status_condition_current_status_seconds: self.published_gauges(
                &format!("{prefix}_status_condition_current_status_seconds"),
                &format!("Seconds each current status condition of a {what} has had its status; alert on conditions stuck Unknown or False."),
                &as_strs(&condition),
            ),
            status_condition_transitions_total: self.counter_vec(
                &format!("{prefix}_status_condition_transitions_total"),
                &format!("Status condition changes observed on {what}s, by the new type, status and reason."),
                &as_strs(&transitions),
            ),
            status_condition_transition_seconds: self.histogram_vec(
                &format!("{prefix}_status_condition_transition_seconds"),
                &format!("How long a {what}'s status condition kept a status before it changed."),
                &as_strs(&transition_seconds),
                &transition_buckets,
            ),
            termination_current_time_seconds: self.published_gauges(
                &format!("{prefix}_termination_current_time_seconds"),
                &format!("Seconds a {what} has been terminating (deletion requested, finalizers pending)."),
                &as_strs(&terminating),
            ),
            termination_duration_seconds: self.histogram_vec(
                &format!("{prefix}_termination_duration_seconds"),
                &format!("How long {what}s took from deletion request to removal."),
                &as_strs(&termination),
                &transition_buckets,
            ),
        }
    }
}

impl Metrics {
    /// Builds and registers every family in a fresh registry. Use [`METRICS`]; a second
    /// instance would only be invisible to the metrics server.
    fn new() -> Self {
        let b = Builder {
            registry: Registry::new(),
            families: std::cell::RefCell::new(Vec::new()),
            published: std::cell::RefCell::new(Vec::new()),
        };
        let node_lifetime_labels: Vec<&str> = node_metric_labels()
            .iter()
            .map(|(_, name)| name.as_str())
            .chain(nodes::NODE_LABELS)
            .collect();
        let node_resource_labels: Vec<&str> = node_lifetime_labels
            .iter()
            .copied()
            .chain([nodes::RESOURCE_LABEL])
            .collect();
        let disruption_labels = [
            "reason",
            "nodepool",
            "capacity_type",
            "consolidation_policy",
            "termination_mode",
        ];
        let termination_buckets = exponential_buckets(1.0, 2.0, 12)
            .unwrap_or_else(|e| panic!("termination buckets: {e}"));
        let instance_termination_buckets = exponential_buckets(1.0, 2.0, 11)
            .unwrap_or_else(|e| panic!("instance termination buckets: {e}"));
        // controller-runtime's work-queue buckets: 10 ns to 1000 s, by factors of ten.
        let workqueue_buckets = exponential_buckets(1e-8, 10.0, 12)
            .unwrap_or_else(|e| panic!("work queue buckets: {e}"));
        let queue = ["name", "controller"];

        let mut metrics = Self {
            build_info: b.gauge_vec(
                "karpenter_build_info",
                "Always 1; its labels say which karpenter-rs build is running (goversion is \"rust\").",
                &["version", "goversion", "goarch", "commit"],
            ),
            rest_client_requests_total: b.counter_vec(
                "rest_client_requests_total",
                "Kubernetes API requests, by status code, host and method.",
                &["code", "host", "method"],
            ),
            client_go_request_total: b.counter_vec(
                "client_go_request_total",
                "Kubernetes API requests, by status code and method.",
                &["code", "method"],
            ),
            rest_client_request_duration_seconds: b.histogram_vec(
                "rest_client_request_duration_seconds",
                "Kubernetes API request latency in seconds, by verb and host.",
                &["verb", "host"],
                &REST_CLIENT_BUCKETS,
            ),
            leader_election_master_status: b.gauge_vec(
                "leader_election_master_status",
                "1 while this replica holds the leader election lease, else 0.",
                &["name"],
            ),
            nodeclaims_created_total: b.counter_vec(
                "karpenter_nodeclaims_created_total",
                "NodeClaims created, by why they were created and by NodePool.",
                &["reason", "nodepool", "min_values_relaxed"],
            ),
            nodeclaims_terminated_total: b.counter_vec(
                "karpenter_nodeclaims_terminated_total",
                "NodeClaims whose termination finished, by NodePool, capacity type and zone.",
                &["nodepool", "capacity_type", "zone"],
            ),
            nodeclaims_disrupted_total: b.counter_vec(
                "karpenter_nodeclaims_disrupted_total",
                "NodeClaims disrupted (drifted, expired, empty, underutilized, interrupted, ...), by reason.",
                &disruption_labels,
            ),
            pods_disruption_initiated_total: b.counter_vec(
                "karpenter_pods_disruption_initiated_total",
                "Pods whose eviction began because their node was disrupted, by disruption reason.",
                &disruption_labels,
            ),
            nodes_created_total: b.counter_vec(
                "karpenter_nodes_created_total",
                "Nodes that registered for a NodeClaim.",
                &["nodepool", "zone"],
            ),
            nodes_terminated_total: b.counter_vec(
                "karpenter_nodes_terminated_total",
                "Nodes deleted after their drain and instance termination.",
                &["nodepool", "zone"],
            ),
            nodeclaims_termination_duration_seconds: b.histogram_vec(
                "karpenter_nodeclaims_termination_duration_seconds",
                "Seconds from a NodeClaim's deletion request to the removal of its finalizer.",
                &["nodepool"],
                &termination_buckets,
            ),
            nodeclaims_instance_termination_duration_seconds: b.histogram_vec(
                "karpenter_nodeclaims_instance_termination_duration_seconds",
                "Seconds the cloud provider took to terminate a NodeClaim's instance.",
                &["nodepool"],
                &instance_termination_buckets,
            ),
            nodeclaims_unhealthy_disrupted_total: b.counter_vec(
                "karpenter_nodeclaims_unhealthy_disrupted_total",
                "NodeClaims replaced by node repair because a node condition stayed unhealthy.",
                &["condition", "nodepool", "capacity_type", "image_id"],
            ),
            nodes_termination_duration_seconds: b.summary_vec(
                "karpenter_nodes_termination_duration_seconds",
                "Seconds from a node's deletion request to its removal (drain included).",
                &["nodepool"],
            ),
            nodes_drained_total: b.counter_vec(
                "karpenter_nodes_drained_total",
                "Nodes whose pods were all evicted.",
                &["nodepool"],
            ),
            nodes_lifetime_duration_seconds: b.histogram_vec(
                "karpenter_nodes_lifetime_duration_seconds",
                "Seconds a node existed, observed when it is deleted.",
                &["nodepool"],
                &LIFETIME_BUCKETS,
            ),
            pods_eviction_requests_total: b.counter_vec(
                "karpenter_pods_eviction_requests_total",
                "Eviction API calls made while draining, by HTTP response code.",
                &["code"],
            ),
            pods_drained_total: b.counter_vec(
                "karpenter_pods_drained_total",
                "Pods removed from draining nodes, by why the node was drained.",
                &["reason"],
            ),
            nodes_allocatable: b.published_gauges(
                "karpenter_nodes_allocatable",
                "Each node's allocatable resources (cores, bytes, pods).",
                &node_resource_labels,
            ),
            nodes_total_pod_requests: b.published_gauges(
                "karpenter_nodes_total_pod_requests",
                "Sum of the resource requests of the pods bound to each node, DaemonSet pods included.",
                &node_resource_labels,
            ),
            nodes_total_pod_limits: b.published_gauges(
                "karpenter_nodes_total_pod_limits",
                "Sum of the resource limits of the pods bound to each node, DaemonSet pods included.",
                &node_resource_labels,
            ),
            nodes_total_daemon_requests: b.published_gauges(
                "karpenter_nodes_total_daemon_requests",
                "Sum of the resource requests of the DaemonSet pods bound to each node.",
                &node_resource_labels,
            ),
            nodes_total_daemon_limits: b.published_gauges(
                "karpenter_nodes_total_daemon_limits",
                "Sum of the resource limits of the DaemonSet pods bound to each node.",
                &node_resource_labels,
            ),
            nodes_system_overhead: b.published_gauges(
                "karpenter_nodes_system_overhead",
                "Resources each node reserves for the system and kubelet (capacity minus allocatable).",
                &node_resource_labels,
            ),
            nodes_current_lifetime_seconds: b.published_gauges(
                "karpenter_nodes_current_lifetime_seconds",
                "Seconds since each node was created.",
                &node_lifetime_labels,
            ),
            cluster_utilization_percent: b.published_gauges(
                "karpenter_cluster_utilization_percent",
                "Requested share of the allocatable resources of Karpenter's nodes, in percent.",
                &[nodes::RESOURCE_LABEL],
            ),
            nodepools_limit: b.gauge_vec(
                "karpenter_nodepools_limit",
                "Each NodePool's spec.limits.",
                &["resource_type", "nodepool"],
            ),
            nodepools_usage: b.gauge_vec(
                "karpenter_nodepools_usage",
                "Resources each NodePool's nodes provide, counted against its limits.",
                &["resource_type", "nodepool"],
            ),
            nodepools_cost_total: b.published_gauges(
                "karpenter_nodepools_cost_total",
                "Estimated hourly cost of each NodePool's nodes, from the offerings' prices.",
                &["nodepool"],
            ),
            nodepools_cost_tracker_errors_total: b.counter_vec(
                "karpenter_nodepools_cost_tracker_errors_total",
                "Times a NodePool's cost could not be computed (e.g. an offering without a price).",
                &["nodepool"],
            ),
            nodepools_allowed_disruptions: b.gauge_vec(
                "karpenter_nodepools_allowed_disruptions",
                "Nodes each NodePool's disruption budgets allow to disrupt right now, by reason.",
                &["nodepool", "reason"],
            ),
            nodepools_nodes_consuming_budgets: b.gauge_vec(
                "karpenter_nodepools_nodes_consuming_budgets",
                "Nodes of each NodePool being disrupted now, and so counting against its budgets.",
                &["nodepool", "reason"],
            ),
            voluntary_disruption_decision_evaluation_duration_seconds: b.histogram_vec(
                "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
                "Seconds one disruption method took to decide, by method.",
                &["reason", "consolidation_type"],
                &DURATION_BUCKETS,
            ),
            voluntary_disruption_decisions_total: b.counter_vec(
                "karpenter_voluntary_disruption_decisions_total",
                "Disruption decisions taken (delete or replace), by method.",
                &["decision", "reason", "consolidation_type"],
            ),
            voluntary_disruption_decisions_by_nodepool_total: b.counter_vec(
                "karpenter_voluntary_disruption_decisions_by_nodepool_total",
                "Disruption decisions taken (delete or replace), by NodePool and method.",
                &["nodepool", "decision", "reason", "consolidation_type"],
            ),
            voluntary_disruption_eligible_nodes: b.gauge_vec(
                "karpenter_voluntary_disruption_eligible_nodes",
                "Nodes each disruption method could act on in its last evaluation.",
                &["reason"],
            ),
            voluntary_disruption_failed_validations_total: b.counter_vec(
                "karpenter_voluntary_disruption_failed_validations_total",
                "Consolidation decisions dropped because the cluster changed during the validation delay.",
                &["consolidation_type"],
            ),
            voluntary_disruption_queue_failures_total: b.counter_vec(
                "karpenter_voluntary_disruption_queue_failures_total",
                "Disruption commands that failed while being carried out (e.g. a replacement never became ready).",
                &["decision", "reason", "consolidation_type"],
            ),
            consolidation_score: b.histogram_vec(
                "karpenter_consolidation_score",
                "Scores of moves evaluated under consolidationPolicy Balanced (savings share over disruption share).",
                &["decision", "nodepool", "policy"],
                &CONSOLIDATION_SCORE_BUCKETS,
            ),
            consolidation_moves_total: b.counter_vec(
                "karpenter_consolidation_moves_total",
                "Moves evaluated under consolidationPolicy Balanced, approved or rejected.",
                &["decision", "nodepool", "policy"],
            ),
            pods_state: b.published_gauges(
                "karpenter_pods_state",
                "1 for each pod, with where it runs and its phase as labels.",
                &pods::STATE_LABELS,
            ),
            pods_startup_duration_seconds: b.summary_vec(
                "karpenter_pods_startup_duration_seconds",
                "Seconds from a pod's creation until it was running.",
                &[],
            ),
            pods_unstarted_time_seconds: b.published_gauges(
                "karpenter_pods_unstarted_time_seconds",
                "Seconds each not-yet-running pod has existed.",
                &pods::NAME_LABELS,
            ),
            pods_bound_duration_seconds: b.histogram(
                "karpenter_pods_bound_duration_seconds",
                "Seconds from a pod's creation until it was bound to a node.",
                &DURATION_BUCKETS,
            ),
            pods_unbound_time_seconds: b.published_gauges(
                "karpenter_pods_unbound_time_seconds",
                "Seconds each not-yet-bound pod has existed.",
                &pods::NAME_LABELS,
            ),
            pods_provisioning_bound_duration_seconds: b.histogram(
                "karpenter_pods_provisioning_bound_duration_seconds",
                "Seconds from the moment Karpenter first saw a pending pod until it was bound.",
                &DURATION_BUCKETS,
            ),
            pods_provisioning_unbound_time_seconds: b.published_gauges(
                "karpenter_pods_provisioning_unbound_time_seconds",
                "Seconds since Karpenter first saw each still-unbound pod.",
                &["name", "namespace"],
            ),
            pods_provisioning_startup_duration_seconds: b.histogram(
                "karpenter_pods_provisioning_startup_duration_seconds",
                "Seconds from the moment Karpenter first saw a pending pod until it was running.",
                &DURATION_BUCKETS,
            ),
            pods_provisioning_unstarted_time_seconds: b.published_gauges(
                "karpenter_pods_provisioning_unstarted_time_seconds",
                "Seconds since Karpenter first saw each pod that is not running yet.",
                &["name", "namespace"],
            ),
            pods_provisioning_scheduling_undecided_time_seconds: b.published_gauges(
                "karpenter_pods_provisioning_scheduling_undecided_time_seconds",
                "Seconds each pending pod has waited without a scheduling decision from Karpenter.",
                &["name", "namespace"],
            ),
            pods_scheduling_decision_duration_seconds: b.histogram(
                "karpenter_pods_scheduling_decision_duration_seconds",
                "Seconds from the moment Karpenter saw a pending pod until it decided where it goes.",
                &DURATION_BUCKETS,
            ),
            cluster_state_node_count: b.gauge(
                "karpenter_cluster_state_node_count",
                "Nodes in Karpenter's in-memory view of the cluster.",
            ),
            cluster_state_synced: b.gauge(
                "karpenter_cluster_state_synced",
                "1 when Karpenter's view of nodes and NodeClaims matches the API server, else 0.",
            ),
            cluster_state_unsynced_time_seconds: b.gauge(
                "karpenter_cluster_state_unsynced_time_seconds",
                "Seconds Karpenter's view of the cluster has been out of sync.",
            ),
            scheduler_scheduling_duration_seconds: b.histogram_vec(
                "karpenter_scheduler_scheduling_duration_seconds",
                "Seconds one scheduling simulation took.",
                &["controller"],
                &DURATION_BUCKETS,
            ),
            scheduler_queue_depth: b.gauge_vec(
                "karpenter_scheduler_queue_depth",
                "Pods still waiting in the running scheduling simulation.",
                &["controller", "scheduling_id"],
            ),
            scheduler_unfinished_work_seconds: b.gauge_vec(
                "karpenter_scheduler_unfinished_work_seconds",
                "Seconds the running scheduling simulation has taken so far.",
                &["controller", "scheduling_id"],
            ),
            scheduler_ignored_pods_count: b.gauge(
                "karpenter_scheduler_ignored_pods_count",
                "Pending pods the scheduler skipped (e.g. invalid requirements or volumes).",
            ),
            scheduler_unschedulable_pods_count: b.gauge_vec(
                "karpenter_scheduler_unschedulable_pods_count",
                "Pods that fit no NodePool in the last scheduling simulation.",
                &["controller"],
            ),
            scheduler_pending_pods_by_effective_zone_count: b.published_gauges(
                "karpenter_scheduler_pending_pods_by_effective_zone_count",
                "Pending pods by the zone their requirements pin them to.",
                &["controller", "zone"],
            ),
            cloudprovider_duration_seconds: b.histogram_vec(
                "karpenter_cloudprovider_duration_seconds",
                "Seconds each cloud provider call took.",
                &["controller", "method", "provider"],
                &DURATION_BUCKETS,
            ),
            cloudprovider_errors_total: b.counter_vec(
                "karpenter_cloudprovider_errors_total",
                "Cloud provider calls that failed, by error kind.",
                &["controller", "method", "provider", "error"],
            ),
            reconcile_panics_total: b.counter_vec(
                "controller_runtime_reconcile_panics_total",
                "Reconciles that panicked and were caught, by controller.",
                &["controller"],
            ),
            reconcile_total: b.counter_vec(
                "controller_runtime_reconcile_total",
                "Reconciles (or polling passes) by controller and result.",
                &["controller", "result"],
            ),
            reconcile_errors_total: b.counter_vec(
                "controller_runtime_reconcile_errors_total",
                "Reconciles (or polling passes) that returned an error or panicked, by controller.",
                &["controller"],
            ),
            reconcile_time_seconds: b.histogram_vec(
                "controller_runtime_reconcile_time_seconds",
                "Seconds per reconcile (or polling pass), by controller.",
                &["controller"],
                &RECONCILE_TIME_BUCKETS,
            ),
            active_workers: b.gauge_vec(
                "controller_runtime_active_workers",
                "Reconciles (or polling passes) running now, by controller.",
                &["controller"],
            ),
            workqueue_depth: b.gauge_vec(
                "workqueue_depth",
                "Current depth of workqueue by workqueue and priority",
                &["name", "controller", "priority"],
            ),
            workqueue_adds_total: b.counter_vec(
                "workqueue_adds_total",
                "Total number of adds handled by workqueue",
                &queue,
            ),
            workqueue_queue_duration_seconds: b.histogram_vec(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                &queue,
                &workqueue_buckets,
            ),
            workqueue_work_duration_seconds: b.histogram_vec(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes.",
                &queue,
                &workqueue_buckets,
            ),
            workqueue_retries_total: b.counter_vec(
                "workqueue_retries_total",
                "Total number of retries handled by workqueue",
                &queue,
            ),
            workqueue_unfinished_work_seconds: b.gauge_vec(
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
                &queue,
            ),
            workqueue_longest_running_processor_seconds: b.gauge_vec(
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                &queue,
            ),
            cloudprovider_batcher_batch_time_seconds: b.histogram_vec(
                "karpenter_cloudprovider_batcher_batch_time_seconds",
                "Seconds a batcher collected requests before sending one EC2 call.",
                &["batcher"],
                &DURATION_BUCKETS,
            ),
            cloudprovider_batcher_batch_size: b.histogram_vec(
                "karpenter_cloudprovider_batcher_batch_size",
                "Requests merged into one EC2 call by a batcher.",
                &["batcher"],
                &BATCH_SIZE_BUCKETS,
            ),
            cloudprovider_instance_type_offering_available: b.published_gauges(
                "karpenter_cloudprovider_instance_type_offering_available",
                "1 when an instance type can be launched in a zone with a capacity type, else 0.",
                &["instance_type", "capacity_type", "zone"],
            ),
            cloudprovider_instance_type_offering_price_estimate: b.published_gauges(
                "karpenter_cloudprovider_instance_type_offering_price_estimate",
                "Estimated hourly price of an instance type in a zone with a capacity type.",
                &["instance_type", "capacity_type", "zone"],
            ),
            cloudprovider_instance_type_cpu_cores: b.published_gauges(
                "karpenter_cloudprovider_instance_type_cpu_cores",
                "vCPUs of each instance type.",
                &["instance_type"],
            ),
            cloudprovider_instance_type_memory_bytes: b.published_gauges(
                "karpenter_cloudprovider_instance_type_memory_bytes",
                "Memory of each instance type, in bytes.",
                &["instance_type"],
            ),
            cloudprovider_instance_launch_failures_total: b.counter_vec(
                "karpenter_cloudprovider_instance_launch_failures_total",
                "Instance launches EC2 refused, by zone, capacity type and error code.",
                &["zone", "zone_id", "capacity_type", "reason"],
            ),
            cloudprovider_instance_termination_failures_total: b.counter_vec(
                "karpenter_cloudprovider_instance_termination_failures_total",
                "Instance terminations that failed.",
                &["zone", "zone_id"],
            ),
            interruption_received_messages_total: b.counter_vec(
                "karpenter_interruption_received_messages_total",
                "Messages read from the interruption queue, by kind (spot_interrupted, scheduled_change, ...).",
                &["message_type"],
            ),
            interruption_deleted_messages_total: b.counter(
                "karpenter_interruption_deleted_messages_total",
                "Messages deleted from the interruption queue after handling.",
            ),
            interruption_message_queue_duration_seconds: b.histogram(
                "karpenter_interruption_message_queue_duration_seconds",
                "Seconds an interruption message waited in the queue before it was handled.",
                &DURATION_BUCKETS,
            ),
            interruption_instance_status_unhealthy_total: b.counter_vec(
                "karpenter_interruption_instance_status_unhealthy_total",
                "Count of unique unhealthy instance statuses detected from EC2 DescribeInstanceStatus. Broken down by status check category.",
                &["category"],
            ),
            ec2nodeclasses_userdata_bytes: b.gauge_vec(
                "karpenter_ec2nodeclasses_userdata_bytes",
                "Size in bytes of the user data last rendered for each EC2NodeClass, before base64 (EC2 allows 16384 bytes encoded).",
                &["nodeclass"],
            ),
            nodeclaim_status: b.status(
                Some(STATUS_KINDS[0]),
                &[labels::EC2NODECLASS, labels::NODEPOOL],
            ),
            nodepool_status: b.status(Some(STATUS_KINDS[1]), &[]),
            node_status: b.status(
                Some(STATUS_KINDS[2]),
                &[labels::EC2NODECLASS, labels::NODEPOOL, labels::INITIALIZED],
            ),
            ec2nodeclass_status: b.status(Some(STATUS_KINDS[3]), &[]),
            deprecated_status: b.status(None, &[]),
            families: Vec::new(),
            described: b.families.take(),
            registry: b.registry,
            published: {
                let mut published = b.published.take();
                published.sort_by(|a, b| a.name().cmp(b.name()));
                published
            },
        };
        metrics
            .build_info
            .with_label_values(&[
                env!("CARGO_PKG_VERSION"),
                "rust",
                go_arch(),
                option_env!("KARPENTER_RS_COMMIT").unwrap_or("unknown"),
            ])
            .set(1.0);
        metrics.families = metrics.described.iter().map(|f| f.name.clone()).collect();
        metrics
    }

    /// Gives controller `name` its reconcile and work-queue series (see [`in_controller`]);
    /// those it has keep their values.
    fn start_controller(&self, name: &str) {
        for result in RECONCILE_RESULTS {
            self.reconcile_total.with_label_values(&[name, result]);
        }
        self.reconcile_errors_total.with_label_values(&[name]);
        self.reconcile_panics_total.with_label_values(&[name]);
        self.active_workers.with_label_values(&[name]);
        // controller-runtime creates a queue's series with the queue.
        let queue = [name, name];
        self.workqueue_depth.with_label_values(&[name, name, ""]);
        self.workqueue_adds_total.with_label_values(&queue);
        self.workqueue_queue_duration_seconds
            .with_label_values(&queue);
        self.workqueue_work_duration_seconds
            .with_label_values(&queue);
        self.workqueue_retries_total.with_label_values(&queue);
        self.workqueue_unfinished_work_seconds
            .with_label_values(&queue);
        self.workqueue_longest_running_processor_seconds
            .with_label_values(&queue);
    }

    /// The text exposition of every family that has at least one series, in pieces: the
    /// registry's families are written at once (they are small), the published ones piece by
    /// piece as the pieces are taken ([`PublishedGauges::text_chunks`]).
    fn exposition(&self) -> impl Iterator<Item = String> + Send + 'static {
        let encoder = TextEncoder::new();
        let mut pieces: Vec<Box<dyn Iterator<Item = String> + Send>> = Vec::new();
        let mut registry_text = String::new();
        // Families in name order, as the registry alone would write them: the published ones
        // merged in between the registry's.
        let mut published = self.published.iter().peekable();
        for family in self.registry.gather() {
            while let Some(p) = published.next_if(|p| p.name() < family.name()) {
                pieces.push(Box::new(std::iter::once(std::mem::take(
                    &mut registry_text,
                ))));
                pieces.push(Box::new(p.text_chunks()));
            }
            // Encoding only fails for malformed families, which registration already rejects.
            if let Err(e) = encoder.encode_utf8(std::slice::from_ref(&family), &mut registry_text) {
                pieces = vec![Box::new(std::iter::once(format!(
                    "# encoding metrics failed: {e}\n"
                )))];
                return pieces.into_iter().flatten();
            }
        }
        pieces.push(Box::new(std::iter::once(registry_text)));
        for p in published {
            pieces.push(Box::new(p.text_chunks()));
        }
        pieces.into_iter().flatten()
    }
}

/// Borrows owned label names as the `&str` slice the `prometheus` constructors take.
fn as_strs(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).collect()
}

/// The architecture under Go's name (`amd64`, `arm64`), as upstream's build_info reports it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[cfg(test)]
mod tests;
