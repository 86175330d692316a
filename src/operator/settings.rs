//! Controller settings with upstream Karpenter's environment variables, flags and defaults.
//!
//! The Helm chart (ours and upstream's) configures the controller only through environment
//! variables, so every name and default here is upstream's: a values file or a `controller.env`
//! list written for upstream Karpenter configures this controller the same way. Flags win over
//! environment variables, as with upstream's `flag` + `env.WithDefault*` pattern.

use std::ffi::OsString;
use std::fmt;
use std::time::Duration;

use clap::{ArgAction, Args, FromArgMatches, ValueEnum};

use crate::apis::duration::parse_go_duration;

/// `FEATURE_GATES` when it is unset: upstream's gates and defaults.
pub const DEFAULT_FEATURE_GATES: &str = "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false";

/// `AWS_FEATURE_GATES` when it is unset: the AWS provider's gates and defaults.
pub const DEFAULT_AWS_FEATURE_GATES: &str = "NodeClassCEL=false";

/// Which cloud the controller launches capacity in; `simulated` lets the whole controller run
/// against a real API server without an AWS account (demos, end-to-end tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CloudProviderKind {
    /// Amazon EC2 (the upstream behaviour).
    Aws,
    /// An in-memory provider that "launches" instances from the bundled catalog.
    Simulated,
}

/// How much the controller logs; upstream documents debug, info and error, and its logger also
/// takes warn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum LogLevel {
    /// Everything, including per-decision detail.
    Debug,
    /// Actions the controller takes (the default).
    Info,
    /// Problems the controller works around.
    Warn,
    /// Failures only.
    Error,
}

/// Whether preferred affinities and `ScheduleAnyway` spreads shape scheduling (`PREFERENCE_POLICY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PreferencePolicy {
    /// Treat preferences as requirements first and relax them one at a time when pods do not fit.
    #[value(name = "Respect")]
    Respect,
    /// Drop preferences up front: fewer, larger NodeClaims.
    #[value(name = "Ignore")]
    Ignore,
}

/// What happens when a NodePool's `minValues` cannot be met (`MIN_VALUES_POLICY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MinValuesPolicy {
    /// The pods stay pending.
    #[value(name = "Strict")]
    Strict,
    /// Launch anyway with as much flexibility as there is, and mark the NodeClaim.
    #[value(name = "BestEffort")]
    BestEffort,
}

/// The core feature gates (`FEATURE_GATES`), typed so that controllers cannot misspell one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    /// Replace nodes whose cloud-provider repair conditions stay unhealthy too long.
    pub node_repair: bool,
    /// Launch into on-demand capacity reservations (`karpenter.sh/capacity-type: reserved`).
    pub reserved_capacity: bool,
    /// Let consolidation replace a spot node with a cheaper spot node.
    pub spot_to_spot_consolidation: bool,
    /// Read NodeOverlay objects (price and capacity adjustments).
    pub node_overlay: bool,
    /// NodePools with a fixed `replicas` count.
    pub static_capacity: bool,
    /// Read CapacityBuffer objects (headroom kept free).
    pub capacity_buffer: bool,
}

impl Default for FeatureGates {
    /// Upstream's defaults: only `ReservedCapacity` (beta) is on.
    fn default() -> Self {
        Self {
            node_repair: false,
            reserved_capacity: true,
            spot_to_spot_consolidation: false,
            node_overlay: false,
            static_capacity: false,
            capacity_buffer: false,
        }
    }
}

impl FeatureGates {
    /// Parses `Name=true,Other=false`. Gates left out keep their default (upstream resets them
    /// to false, which silently turns `ReservedCapacity` off for anyone who sets one gate);
    /// unknown names are rejected rather than ignored, so a typo does not go unnoticed.
    pub fn parse(input: &str) -> Result<Self, String> {
        let mut gates = Self::default();
        parse_gates(
            input,
            "FEATURE_GATES",
            &mut [
                ("NodeRepair", &mut gates.node_repair),
                ("ReservedCapacity", &mut gates.reserved_capacity),
                (
                    "SpotToSpotConsolidation",
                    &mut gates.spot_to_spot_consolidation,
                ),
                ("NodeOverlay", &mut gates.node_overlay),
                ("StaticCapacity", &mut gates.static_capacity),
                ("CapacityBuffer", &mut gates.capacity_buffer),
            ],
        )?;
        Ok(gates)
    }
}

/// The AWS provider's feature gates (`AWS_FEATURE_GATES`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AwsFeatureGates {
    /// Evaluate EC2NodeClass CEL rules in the controller as well as in the API server.
    pub node_class_cel: bool,
}

impl AwsFeatureGates {
    /// Parses `NodeClassCEL=true`, with the same rules as [`FeatureGates::parse`].
    pub fn parse(input: &str) -> Result<Self, String> {
        let mut gates = Self::default();
        parse_gates(
            input,
            "AWS_FEATURE_GATES",
            &mut [("NodeClassCEL", &mut gates.node_class_cel)],
        )?;
        Ok(gates)
    }
}

/// Applies a `Name=bool,...` list to named gates; the error names the variable and the fix.
fn parse_gates(input: &str, variable: &str, gates: &mut [(&str, &mut bool)]) -> Result<(), String> {
    for entry in input.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, value)) = entry.split_once('=') else {
            return Err(format!(
                "{variable}: {entry:?} is not Name=true|false; write gates as a comma-separated list such as {:?}",
                "SpotToSpotConsolidation=true,NodeRepair=false"
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        let Some((_, gate)) = gates.iter_mut().find(|(known, _)| *known == name) else {
            if name == "Drift" {
                return Err(format!(
                    "{variable}: Drift is no longer a feature gate (drift is always on since v1); remove it"
                ));
            }
            let known: Vec<&str> = gates.iter().map(|(known, _)| *known).collect();
            return Err(format!(
                "{variable}: unknown feature gate {name:?}; known gates are {}",
                known.join(", ")
            ));
        };
        **gate = parse_bool(value).map_err(|e| format!("{variable}: {name}: {e}"))?;
    }
    Ok(())
}

/// Parses booleans the way Go's `strconv.ParseBool` does, which is what upstream's flags and
/// environment variables accept.
pub fn parse_bool(input: &str) -> Result<bool, String> {
    match input {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!(
            "{input:?} is not a boolean; use true or false (1, t, T, TRUE, True, 0, f, F, FALSE and False also work)"
        )),
    }
}

/// Why a `CONSOLIDATION_REPLACEMENTS` of 0 is refused, by `run` and by `simulate` alike.
pub const NO_CONSOLIDATION_REPLACEMENTS: &str = "CONSOLIDATION_REPLACEMENTS (--consolidation-replacements) is 0: it counts the new nodes one consolidation may launch and must be at least 1 (1, the default, is upstream's rule)";

/// Every setting of `karpenter-rs run`. Field names follow the flags (`cluster_name` is
/// `--cluster-name` and `CLUSTER_NAME`); strings that upstream leaves empty by default are empty
/// here too, and empty means "not set".
#[derive(Clone, Debug, PartialEq, Args)]
pub struct Settings {
    /// Cloud provider: aws, or simulated (in-memory instances, no AWS account needed).
    #[arg(long, env = "CLOUD_PROVIDER", value_enum, default_value = "aws")]
    pub cloud_provider: CloudProviderKind,

    // Core settings.
    /// Name of the controller's Service (set by the Helm chart).
    #[arg(long, env = "KARPENTER_SERVICE", default_value = "")]
    pub karpenter_service: String,
    /// Port of the Prometheus metrics endpoint (/metrics).
    #[arg(long, env = "METRICS_PORT", default_value_t = 8080)]
    pub metrics_port: u16,
    /// Port of the liveness (/healthz) and readiness (/readyz) probes.
    #[arg(long, env = "HEALTH_PROBE_PORT", default_value_t = 8081)]
    pub health_probe_port: u16,
    /// Sustained requests per second to the Kubernetes API server.
    #[arg(long, env = "KUBE_CLIENT_QPS", default_value_t = 200)]
    pub kube_client_qps: u32,
    /// Burst of requests to the Kubernetes API server above the QPS.
    #[arg(long, env = "KUBE_CLIENT_BURST", default_value_t = 300)]
    pub kube_client_burst: u32,
    /// Upstream serves Go's pprof on the metrics port; accepted for compatibility, no effect.
    #[arg(long, env = "ENABLE_PROFILING", default_value = "false", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub enable_profiling: bool,
    /// Start controllers only after winning leader election instead of warming caches first.
    #[arg(long, env = "DISABLE_CONTROLLER_WARMUP", default_value = "true", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub disable_controller_warmup: bool,
    /// Run without leader election (only safe with a single replica).
    #[arg(long, env = "DISABLE_LEADER_ELECTION", default_value = "false", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub disable_leader_election: bool,
    /// Turn off cluster-state metrics and events (less load on very large clusters).
    #[arg(long, env = "DISABLE_CLUSTER_STATE_OBSERVABILITY", default_value = "false", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub disable_cluster_state_observability: bool,
    /// Name of the leader election Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_NAME",
        default_value = "karpenter-leader-election"
    )]
    pub leader_election_name: String,
    /// Namespace of the leader election Lease (empty: the controller's own namespace).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", default_value = "")]
    pub leader_election_namespace: String,
    /// The container's memory limit in bytes (-1: none); the chart sets it from the pod spec.
    /// Upstream tunes Go's garbage collector with it; accepted for compatibility, no effect.
    #[arg(long, env = "MEMORY_LIMIT", default_value_t = -1, allow_negative_numbers = true)]
    pub memory_limit: i64,
    /// The container's CPU request in millicores (0: none), which upstream scales reconcile
    /// concurrency by; accepted for compatibility, the controllers here do not use it yet.
    #[arg(
        long,
        env = "CPU_REQUESTS",
        default_value_t = 1000,
        allow_negative_numbers = true
    )]
    pub cpu_requests: i64,
    /// Log level: debug, info, warn or error.
    #[arg(
        long,
        env = "LOG_LEVEL",
        value_enum,
        ignore_case = true,
        default_value = "info"
    )]
    pub log_level: LogLevel,
    /// Where log lines go: stdout, stderr or file paths, comma-separated.
    #[arg(
        long,
        env = "LOG_OUTPUT_PATHS",
        default_value = "stdout",
        value_delimiter = ','
    )]
    pub log_output_paths: Vec<String>,
    /// Where the logger reports its own failures (such as an unwritable log file): stdout,
    /// stderr or file paths, comma-separated.
    #[arg(
        long,
        env = "LOG_ERROR_OUTPUT_PATHS",
        default_value = "stderr",
        value_delimiter = ','
    )]
    pub log_error_output_paths: Vec<String>,
    /// Longest time pending pods are collected into one provisioning batch.
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = parse_go_duration)]
    pub batch_max_duration: Duration,
    /// A batch closes once no new pending pod arrived for this long.
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = parse_go_duration)]
    pub batch_idle_duration: Duration,
    /// Respect or Ignore preferred affinities and ScheduleAnyway topology spreads.
    #[arg(
        long,
        env = "PREFERENCE_POLICY",
        value_enum,
        ignore_case = true,
        default_value = "Respect"
    )]
    pub preference_policy: PreferencePolicy,
    /// Strict or BestEffort handling of NodePool minValues.
    #[arg(
        long,
        env = "MIN_VALUES_POLICY",
        value_enum,
        ignore_case = true,
        default_value = "Strict"
    )]
    pub min_values_policy: MinValuesPolicy,
    /// Leave pods with dynamic resource allocation (DRA) claims to others: Karpenter does not
    /// provision for them (upstream's default). `false` would ask for DRA-aware provisioning,
    /// which is not implemented, so it is refused at start-up.
    #[arg(long, env = "IGNORE_DRA_REQUESTS", default_value = "true", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub ignore_dra_requests: bool,
    /// Feature gates, e.g. SpotToSpotConsolidation=true.
    #[arg(long, env = "FEATURE_GATES", default_value = DEFAULT_FEATURE_GATES, value_parser = FeatureGates::parse)]
    pub feature_gates: FeatureGates,
    /// The most new nodes one consolidation may launch (karpenter-rs only). 1, the default, is
    /// upstream's rule; above 1, a consolidation is also simulated with new nodes sized by cost
    /// as the provisioner sizes NodeClaims, and may replace its candidates with up to this many
    /// nodes that together cost less.
    #[arg(long, env = "CONSOLIDATION_REPLACEMENTS", default_value_t = 1)]
    pub consolidation_replacements: usize,
    /// A scheduler configuration file (empty: none); accepted for compatibility, no effect yet.
    #[arg(long, env = "SCHEDULER_CONFIG", default_value = "")]
    pub scheduler_config: String,

    // AWS settings.
    /// The EKS cluster's name; required with the aws cloud provider.
    #[arg(long, env = "CLUSTER_NAME", default_value = "")]
    pub cluster_name: String,
    /// The API server endpoint nodes join (empty: discovered with eks:DescribeCluster).
    #[arg(long, env = "CLUSTER_ENDPOINT", default_value = "")]
    pub cluster_endpoint: String,
    /// The API server's CA bundle, base64, for nodes' bootstrap (empty: discovered with eks:DescribeCluster).
    #[arg(long, env = "CLUSTER_CA_BUNDLE", default_value = "")]
    pub cluster_ca_bundle: String,
    /// The VPC has no internet access: do not call the Pricing API, use bundled prices.
    #[arg(long, env = "ISOLATED_VPC", default_value = "false", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub isolated_vpc: bool,
    /// The cluster's control plane is EKS: the Kubernetes version (which picks alias AMIs) is
    /// read with eks:DescribeCluster instead of from the API server, as upstream reads it.
    #[arg(long, env = "EKS_CONTROL_PLANE", default_value = "false", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub eks_control_plane: bool,
    /// The cluster's Kubernetes minor version (`1.33`), overriding the one discovered (from
    /// eks:DescribeCluster with EKS_CONTROL_PLANE, else from the API server); empty: discovered.
    #[arg(long, env = "KUBERNETES_VERSION", default_value = "")]
    pub kubernetes_version: String,
    /// Share of each instance type's memory the hypervisor takes, as a fraction (0.075 = 7.5%).
    #[arg(long, env = "VM_MEMORY_OVERHEAD_PERCENT", default_value_t = 0.075)]
    pub vm_memory_overhead_percent: f64,
    /// Name of the SQS queue that EventBridge feeds interruption events into (empty: off).
    #[arg(long, env = "INTERRUPTION_QUEUE", default_value = "")]
    pub interruption_queue: String,
    /// Network interfaces per instance kept out of the max-pods computation.
    #[arg(
        long,
        env = "RESERVED_ENIS",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub reserved_enis: i64,
    /// Skip the EC2 dry-run authorization checks (CreateFleet, CreateLaunchTemplate,
    /// RunInstances) when validating EC2NodeClasses.
    #[arg(long, env = "DISABLE_DRY_RUN", default_value = "false", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub disable_dry_run: bool,
    /// Stop launching into availability zones under an ARC zonal shift; accepted for
    /// compatibility, no effect yet.
    #[arg(long, env = "ENABLE_ZONAL_SHIFT", default_value = "false", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub enable_zonal_shift: bool,
    /// How often AMI selectors are resolved again (at least 1m).
    #[arg(long, env = "AMI_REFRESH_INTERVAL", default_value = "1m", value_parser = parse_go_duration)]
    pub ami_refresh_interval: Duration,
    /// How often subnet selectors are resolved again (at least 1m).
    #[arg(long, env = "SUBNET_REFRESH_INTERVAL", default_value = "1m", value_parser = parse_go_duration)]
    pub subnet_refresh_interval: Duration,
    /// AWS provider feature gates, e.g. NodeClassCEL=true.
    #[arg(long, env = "AWS_FEATURE_GATES", default_value = DEFAULT_AWS_FEATURE_GATES, value_parser = AwsFeatureGates::parse)]
    pub aws_feature_gates: AwsFeatureGates,
}

/// Everything wrong with a set of settings, one line per problem, so an operator fixes them all
/// in one go instead of one restart at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSettings {
    /// One line per problem, each naming the environment variable and the flag.
    pub problems: Vec<String>,
}

impl fmt::Display for InvalidSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid settings:")?;
        for problem in &self.problems {
            write!(f, "\n  - {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for InvalidSettings {}

/// The shortest interval upstream allows for the AMI and subnet refreshes: anything faster
/// mostly burns EC2 API quota.
const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(60);

impl Settings {
    /// How often an EC2NodeClass is resolved again: its AMIs and subnets are looked up in one
    /// resolution, so at the shorter of `AMI_REFRESH_INTERVAL` and `SUBNET_REFRESH_INTERVAL`
    /// (upstream's default of 1m for both re-resolves every minute).
    pub fn nodeclass_resolution_period(&self) -> Duration {
        self.ami_refresh_interval.min(self.subnet_refresh_interval)
    }

    /// Parses flags with environment variables read through `env` instead of the process
    /// environment, so that tests (and embedders) can supply both without racing on global
    /// state. `args` starts with the program name, like `std::env::args_os()`.
    pub fn parse_from<I, T>(
        args: I,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        // An environment value is the same as a default that an explicit flag overrides, so
        // each variable becomes its argument's default.
        let command = Self::augment_args(clap::Command::new("karpenter-rs")).mut_args(|arg| {
            let Some(name) = arg.get_env().and_then(|n| n.to_str()).map(str::to_owned) else {
                return arg;
            };
            let arg = arg.env(None::<&str>);
            match env(&name) {
                Some(value) => arg.default_value(value),
                None => arg,
            }
        });
        let matches = command.try_get_matches_from(args)?;
        Self::from_arg_matches(&matches)
    }

    /// Checks what the types cannot: required settings, ranges and settings that contradict
    /// each other. Run it before starting anything, so a misconfigured controller exits with
    /// every problem listed instead of failing later in a controller loop.
    pub fn validate(&self) -> Result<(), InvalidSettings> {
        let mut problems = Vec::new();
        if self.cloud_provider == CloudProviderKind::Aws && self.cluster_name.trim().is_empty() {
            problems.push(
                "CLUSTER_NAME (--cluster-name) is required with the aws cloud provider: set it to the EKS cluster's name (Helm: settings.clusterName), or use CLOUD_PROVIDER=simulated (--cloud-provider simulated)".to_string(),
            );
        }
        if !self.cluster_endpoint.is_empty() && !is_http_url(&self.cluster_endpoint) {
            problems.push(format!(
                "CLUSTER_ENDPOINT (--cluster-endpoint) {:?} is not a URL: use the API server's https:// endpoint, or leave it empty to discover it with eks:DescribeCluster",
                self.cluster_endpoint
            ));
        }
        if !(0.0..1.0).contains(&self.vm_memory_overhead_percent) {
            problems.push(format!(
                "VM_MEMORY_OVERHEAD_PERCENT (--vm-memory-overhead-percent) is {}: it is a fraction and must be at least 0 and below 1 (the default 0.075 means 7.5%)",
                self.vm_memory_overhead_percent
            ));
        }
        if !self.interruption_queue.is_empty() && !is_sqs_queue_name(&self.interruption_queue) {
            problems.push(format!(
                "INTERRUPTION_QUEUE (--interruption-queue) {:?} is not an SQS queue name: give the queue's name (up to 80 letters, digits, - and _), not its URL or ARN",
                self.interruption_queue
            ));
        }
        if self.feature_gates.capacity_buffer {
            problems.push(
                "FEATURE_GATES (--feature-gates) turns CapacityBuffer on, which karpenter-rs does not implement: CapacityBuffer objects are not read yet; set CapacityBuffer=false (upstream's default) rather than run without what you asked for"
                    .to_string(),
            );
        }
        // Settings that ask for behaviour karpenter-rs does not have: refused when set away from
        // their default, never accepted and silently ignored.
        for (asked, setting, what, fix) in [
            (
                self.enable_zonal_shift,
                "ENABLE_ZONAL_SHIFT (--enable-zonal-shift) is true",
                "zones under an ARC zonal shift are not detected",
                "set it to false",
            ),
            (
                self.enable_profiling,
                "ENABLE_PROFILING (--enable-profiling) is true",
                "there are no profiling endpoints",
                "set it to false",
            ),
            (
                !self.disable_controller_warmup,
                "DISABLE_CONTROLLER_WARMUP (--disable-controller-warmup) is false",
                "caches are not warmed before the replica is elected",
                "set it to true (the default)",
            ),
            (
                !self.scheduler_config.trim().is_empty(),
                "SCHEDULER_CONFIG (--scheduler-config) is set",
                "scheduler configuration files are not read",
                "leave it empty",
            ),
            (
                self.aws_feature_gates.node_class_cel,
                "AWS_FEATURE_GATES (--aws-feature-gates) turns NodeClassCEL on",
                "the controller does not evaluate EC2NodeClass CEL rules itself (the API server does, from the CRDs)",
                "set NodeClassCEL=false",
            ),
        ] {
            if asked {
                problems.push(format!(
                    "{setting}, which karpenter-rs does not support: {what}; {fix} rather than run without what you asked for"
                ));
            }
        }
        if !self.ignore_dra_requests {
            problems.push(
                "IGNORE_DRA_REQUESTS (--ignore-dra-requests) is false: DRA-aware provisioning (upstream's DynamicResourceAllocation scheduling) is not supported; leave it at its default true, where pods with resourceClaims are reported and not provisioned for".to_string(),
            );
        }
        if self.consolidation_replacements == 0 {
            problems.push(NO_CONSOLIDATION_REPLACEMENTS.to_string());
        }
        if self.reserved_enis < 0 {
            problems.push(format!(
                "RESERVED_ENIS (--reserved-enis) is {}: it counts network interfaces and must be 0 or more",
                self.reserved_enis
            ));
        }
        for (value, variable, flag, default) in [
            (
                self.batch_max_duration,
                "BATCH_MAX_DURATION",
                "--batch-max-duration",
                "10s",
            ),
            (
                self.batch_idle_duration,
                "BATCH_IDLE_DURATION",
                "--batch-idle-duration",
                "1s",
            ),
        ] {
            if value.is_zero() {
                problems.push(format!(
                    "{variable} ({flag}) is 0: pending pods need a batching window longer than 0 (default {default})"
                ));
            }
        }
        if self.batch_idle_duration > self.batch_max_duration {
            problems.push(format!(
                "BATCH_IDLE_DURATION (--batch-idle-duration) {:?} is longer than BATCH_MAX_DURATION (--batch-max-duration) {:?}: the idle window must fit in the maximum batch window, so lower the first or raise the second",
                self.batch_idle_duration, self.batch_max_duration
            ));
        }
        for (value, variable, flag) in [
            (
                self.ami_refresh_interval,
                "AMI_REFRESH_INTERVAL",
                "--ami-refresh-interval",
            ),
            (
                self.subnet_refresh_interval,
                "SUBNET_REFRESH_INTERVAL",
                "--subnet-refresh-interval",
            ),
        ] {
            if value < MIN_REFRESH_INTERVAL {
                problems.push(format!(
                    "{variable} ({flag}) is {value:?}: it must be at least 1m, to stay within EC2 API rate limits"
                ));
            }
        }
        if self.kube_client_qps == 0 {
            problems.push("KUBE_CLIENT_QPS (--kube-client-qps) is 0: the controller could not call the API server; use a positive rate (default 200)".to_string());
        }
        if self.kube_client_burst == 0 {
            problems.push("KUBE_CLIENT_BURST (--kube-client-burst) is 0: the controller could not call the API server; use a positive burst (default 300)".to_string());
        }
        // 0 is what the chart's downward-API reference yields when the container has no CPU
        // request (`controller.resources: {}`, the default): the kubelet rounds the missing
        // request up to 0 millicores, unlike limits, which it fills in from the node's
        // allocatable. Upstream starts with it (its reconcile concurrency has a floor), so 0 is
        // valid here too.
        if self.cpu_requests < 0 {
            problems.push(format!(
                "CPU_REQUESTS (--cpu-requests) is {}: it is the controller's CPU request in millicores and must be 0 or more (default 1000)",
                self.cpu_requests
            ));
        }
        if self.memory_limit == 0 || self.memory_limit < -1 {
            problems.push(format!(
                "MEMORY_LIMIT (--memory-limit) is {}: give the container's memory limit in bytes, or -1 for none",
                self.memory_limit
            ));
        }
        if self.metrics_port == self.health_probe_port {
            problems.push(format!(
                "METRICS_PORT (--metrics-port) and HEALTH_PROBE_PORT (--health-probe-port) are both {}: the two servers need different ports (defaults 8080 and 8081)",
                self.metrics_port
            ));
        }
        if !self.disable_leader_election && self.leader_election_name.trim().is_empty() {
            problems.push("LEADER_ELECTION_NAME (--leader-election-name) is empty: name the leader election Lease (default karpenter-leader-election), or set DISABLE_LEADER_ELECTION=true (--disable-leader-election) for a single replica".to_string());
        }
        for (paths, variable, flag, default) in [
            (
                &self.log_output_paths,
                "LOG_OUTPUT_PATHS",
                "--log-output-paths",
                "stdout",
            ),
            (
                &self.log_error_output_paths,
                "LOG_ERROR_OUTPUT_PATHS",
                "--log-error-output-paths",
                "stderr",
            ),
        ] {
            if paths.iter().all(|p| p.trim().is_empty()) {
                problems.push(format!(
                    "{variable} ({flag}) names no output: give stdout, stderr or file paths, comma-separated (default {default})"
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(InvalidSettings { problems })
        }
    }
}

/// `http://host...` or `https://host...` with a non-empty host: what a kubelet can dial.
fn is_http_url(value: &str) -> bool {
    let rest = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"));
    rest.and_then(|r| r.split(['/', ':']).next())
        .is_some_and(|host| !host.is_empty() && !host.contains(char::is_whitespace))
}

/// SQS's naming rule: 1–80 letters, digits, hyphens and underscores, with `.fifo` allowed at the
/// end.
fn is_sqs_queue_name(value: &str) -> bool {
    let base = value.strip_suffix(".fifo").unwrap_or(value);
    (1..=80).contains(&value.len())
        && !base.is_empty()
        && base
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Settings, clap::Error> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let argv = std::iter::once("karpenter-rs").chain(args.iter().copied());
        Settings::parse_from(argv, |name| env.get(name).cloned())
    }

    fn settings(args: &[&str]) -> Settings {
        match parse(args, &[]) {
            Ok(s) => s,
            Err(e) => panic!("{args:?} should parse: {e}"),
        }
    }

    fn problems(args: &[&str]) -> Vec<String> {
        match settings(args).validate() {
            Ok(()) => Vec::new(),
            Err(e) => e.problems,
        }
    }

    #[test]
    fn defaults_are_upstreams() {
        let s = settings(&[]);
        assert_eq!(s.cloud_provider, CloudProviderKind::Aws);
        assert_eq!(s.karpenter_service, "");
        assert_eq!(s.metrics_port, 8080);
        assert_eq!(s.health_probe_port, 8081);
        assert_eq!(s.kube_client_qps, 200);
        assert_eq!(s.kube_client_burst, 300);
        assert!(!s.enable_profiling);
        assert!(s.disable_controller_warmup);
        assert!(!s.disable_leader_election);
        assert!(!s.disable_cluster_state_observability);
        assert_eq!(s.leader_election_name, "karpenter-leader-election");
        assert_eq!(s.leader_election_namespace, "");
        assert_eq!(s.memory_limit, -1);
        assert_eq!(s.cpu_requests, 1000);
        assert_eq!(s.log_level, LogLevel::Info);
        assert_eq!(s.log_output_paths, ["stdout"]);
        assert_eq!(s.log_error_output_paths, ["stderr"]);
        assert_eq!(s.batch_max_duration, Duration::from_secs(10));
        assert_eq!(s.batch_idle_duration, Duration::from_secs(1));
        assert_eq!(s.preference_policy, PreferencePolicy::Respect);
        assert_eq!(s.min_values_policy, MinValuesPolicy::Strict);
        assert!(s.ignore_dra_requests);
        assert_eq!(
            s.feature_gates,
            FeatureGates {
                node_repair: false,
                reserved_capacity: true,
                spot_to_spot_consolidation: false,
                node_overlay: false,
                static_capacity: false,
                capacity_buffer: false,
            }
        );
        assert_eq!(s.consolidation_replacements, 1);
        assert_eq!(s.scheduler_config, "");
        assert_eq!(s.cluster_name, "");
        assert_eq!(s.cluster_endpoint, "");
        assert_eq!(s.cluster_ca_bundle, "");
        assert!(!s.isolated_vpc);
        assert!(!s.eks_control_plane);
        assert_eq!(s.kubernetes_version, "");
        assert_eq!(s.vm_memory_overhead_percent, 0.075);
        assert_eq!(s.interruption_queue, "");
        assert_eq!(s.reserved_enis, 0);
        assert!(!s.disable_dry_run);
        assert!(!s.enable_zonal_shift);
        assert_eq!(s.ami_refresh_interval, Duration::from_secs(60));
        assert_eq!(s.subnet_refresh_interval, Duration::from_secs(60));
        assert!(!s.aws_feature_gates.node_class_cel);
    }

    #[test]
    fn node_classes_are_resolved_again_at_the_shorter_refresh_interval() {
        assert_eq!(
            settings(&[]).nodeclass_resolution_period(),
            Duration::from_secs(60)
        );
        let s = match parse(
            &["--ami-refresh-interval=10m"],
            &[("SUBNET_REFRESH_INTERVAL", "3m30s")],
        ) {
            Ok(s) => s,
            Err(e) => panic!("should parse: {e}"),
        };
        assert_eq!(s.ami_refresh_interval, Duration::from_secs(600));
        assert_eq!(s.nodeclass_resolution_period(), Duration::from_secs(210));
        assert_eq!(
            settings(&["--ami-refresh-interval=2m", "--subnet-refresh-interval=1h"])
                .nodeclass_resolution_period(),
            Duration::from_secs(120)
        );
    }

    #[test]
    fn every_setting_has_an_env_var_and_its_flag() {
        let command = Settings::augment_args(clap::Command::new("karpenter-rs"));
        let mut pairs: Vec<(String, String)> = command
            .get_arguments()
            .map(|arg| {
                let env = arg
                    .get_env()
                    .and_then(|e| e.to_str())
                    .unwrap_or_default()
                    .to_string();
                let flag = format!("--{}", arg.get_long().unwrap_or_default());
                (env, flag)
            })
            .collect();
        pairs.sort();
        let mut expected: Vec<(String, String)> = [
            "CLOUD_PROVIDER",
            // Core.
            "KARPENTER_SERVICE",
            "METRICS_PORT",
            "HEALTH_PROBE_PORT",
            "KUBE_CLIENT_QPS",
            "KUBE_CLIENT_BURST",
            "ENABLE_PROFILING",
            "DISABLE_CONTROLLER_WARMUP",
            "DISABLE_LEADER_ELECTION",
            "DISABLE_CLUSTER_STATE_OBSERVABILITY",
            "LEADER_ELECTION_NAME",
            "LEADER_ELECTION_NAMESPACE",
            "MEMORY_LIMIT",
            "CPU_REQUESTS",
            "LOG_LEVEL",
            "LOG_OUTPUT_PATHS",
            "LOG_ERROR_OUTPUT_PATHS",
            "BATCH_MAX_DURATION",
            "BATCH_IDLE_DURATION",
            "PREFERENCE_POLICY",
            "MIN_VALUES_POLICY",
            "IGNORE_DRA_REQUESTS",
            "FEATURE_GATES",
            "SCHEDULER_CONFIG",
            // Ours.
            "CONSOLIDATION_REPLACEMENTS",
            // AWS.
            "CLUSTER_NAME",
            "CLUSTER_ENDPOINT",
            "CLUSTER_CA_BUNDLE",
            "ISOLATED_VPC",
            "EKS_CONTROL_PLANE",
            "KUBERNETES_VERSION",
            "VM_MEMORY_OVERHEAD_PERCENT",
            "INTERRUPTION_QUEUE",
            "RESERVED_ENIS",
            "DISABLE_DRY_RUN",
            "ENABLE_ZONAL_SHIFT",
            "AMI_REFRESH_INTERVAL",
            "SUBNET_REFRESH_INTERVAL",
            "AWS_FEATURE_GATES",
        ]
        .iter()
        .map(|env| {
            (
                env.to_string(),
                format!("--{}", env.to_lowercase().replace('_', "-")),
            )
        })
        .collect();
        expected.sort();
        assert_eq!(pairs, expected);
    }

    #[test]
    fn every_variable_the_chart_sets_is_a_setting() {
        let deployment = include_str!("../../charts/karpenter/templates/deployment.yaml");
        let helpers = include_str!("../../charts/karpenter/templates/_helpers.tpl");
        let mut chart_env: Vec<&str> = deployment
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- name: "))
            .filter(|name| name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
            .collect();
        chart_env.extend(
            helpers
                .lines()
                .filter_map(|l| l.trim().strip_prefix("(list \""))
                .filter_map(|rest| rest.split_once('"').map(|(name, _)| name))
                .filter(|name| name.chars().all(|c| c.is_ascii_uppercase() || c == '_')),
        );
        assert!(chart_env.contains(&"CLUSTER_NAME") && chart_env.contains(&"LOG_LEVEL"));
        let command = Settings::augment_args(clap::Command::new("karpenter-rs"));
        let known: Vec<&str> = command
            .get_arguments()
            .filter_map(|a| a.get_env().and_then(|e| e.to_str()))
            .collect();
        // Not settings: KUBERNETES_MIN_VERSION is for upstream's libraries (nothing reads it
        // here); SYSTEM_NAMESPACE and POD_NAME come from the downward API and place and name
        // this replica's leader-election Lease.
        let ignored = ["KUBERNETES_MIN_VERSION", "SYSTEM_NAMESPACE", "POD_NAME"];
        let unknown: Vec<&&str> = chart_env
            .iter()
            .filter(|name| !known.contains(name) && !ignored.contains(name))
            .collect();
        assert!(
            unknown.is_empty(),
            "the chart sets unknown variables {unknown:?}"
        );
    }

    #[test]
    fn environment_variables_set_values_and_flags_win() {
        let env = [
            ("CLUSTER_NAME", "from-env"),
            ("METRICS_PORT", "9000"),
            ("ISOLATED_VPC", "True"),
            ("BATCH_MAX_DURATION", "1m30s"),
            ("LOG_OUTPUT_PATHS", "stdout,/var/log/karpenter.log"),
            ("CLOUD_PROVIDER", "simulated"),
            ("PREFERENCE_POLICY", "Ignore"),
        ];
        let s = parse(&[], &env).expect("env values parse");
        assert_eq!(s.cluster_name, "from-env");
        assert_eq!(s.metrics_port, 9000);
        assert!(s.isolated_vpc);
        assert_eq!(s.batch_max_duration, Duration::from_secs(90));
        assert_eq!(s.log_output_paths, ["stdout", "/var/log/karpenter.log"]);
        assert_eq!(s.cloud_provider, CloudProviderKind::Simulated);
        assert_eq!(s.preference_policy, PreferencePolicy::Ignore);

        let s = parse(
            &[
                "--cluster-name",
                "from-flag",
                "--metrics-port=9100",
                "--isolated-vpc=false",
                "--log-output-paths",
                "stderr",
                "--cloud-provider",
                "aws",
            ],
            &env,
        )
        .expect("flags parse");
        assert_eq!(s.cluster_name, "from-flag");
        assert_eq!(s.metrics_port, 9100);
        assert!(!s.isolated_vpc);
        assert_eq!(s.log_output_paths, ["stderr"]);
        assert_eq!(s.cloud_provider, CloudProviderKind::Aws);
        // Not given as a flag: the environment still applies.
        assert_eq!(s.batch_max_duration, Duration::from_secs(90));
    }

    #[test]
    fn booleans_parse_like_go_flags() {
        assert!(settings(&["--isolated-vpc"]).isolated_vpc);
        assert!(settings(&["--isolated-vpc=1"]).isolated_vpc);
        assert!(!settings(&["--disable-controller-warmup=false"]).disable_controller_warmup);
        assert!(!settings(&["--ignore-dra-requests=F"]).ignore_dra_requests);
        for (value, expected) in [("t", true), ("TRUE", true), ("0", false), ("False", false)] {
            let s = parse(&[], &[("DISABLE_DRY_RUN", value)]).expect("Go boolean");
            assert_eq!(s.disable_dry_run, expected, "{value}");
        }
        let err = parse(&[], &[("ENABLE_ZONAL_SHIFT", "yes")]).expect_err("yes is not a Go bool");
        assert!(
            err.to_string().contains("\"yes\" is not a boolean"),
            "{err}"
        );
    }

    #[test]
    fn durations_are_go_durations_within_go_range() {
        let s = settings(&[
            "--batch-max-duration",
            "1.5m",
            "--batch-idle-duration",
            "500ms",
        ]);
        assert_eq!(s.batch_max_duration, Duration::from_secs(90));
        assert_eq!(s.batch_idle_duration, Duration::from_millis(500));
        let err = parse(&[], &[("BATCH_MAX_DURATION", "3000000h")]).expect_err("above Go's range");
        assert!(
            err.to_string()
                .contains("longer than 2562047h47m16.854775807s"),
            "{err}"
        );
        let err = parse(&["--batch-idle-duration", "5"], &[]).expect_err("no unit");
        assert!(err.to_string().contains("--batch-idle-duration"), "{err}");
    }

    #[test]
    fn feature_gates_override_only_the_gates_named() {
        let s = settings(&[
            "--feature-gates",
            "SpotToSpotConsolidation=true, NodeRepair=true",
        ]);
        assert!(s.feature_gates.spot_to_spot_consolidation);
        assert!(s.feature_gates.node_repair);
        assert!(s.feature_gates.reserved_capacity, "kept its default");
        assert!(!s.feature_gates.node_overlay);

        let s = parse(
            &[],
            &[(
                "FEATURE_GATES",
                "ReservedCapacity=false,CapacityBuffer=true",
            )],
        )
        .expect("gates from env");
        assert!(!s.feature_gates.reserved_capacity);
        assert!(s.feature_gates.capacity_buffer);
        assert!(
            settings(&["--aws-feature-gates=NodeClassCEL=true"])
                .aws_feature_gates
                .node_class_cel
        );
    }

    #[test]
    fn bad_feature_gates_are_rejected_with_the_fix() {
        let cases = [
            (
                "SpotToSpot=true",
                "FEATURE_GATES: unknown feature gate \"SpotToSpot\"; known gates are NodeRepair, ReservedCapacity, SpotToSpotConsolidation, NodeOverlay, StaticCapacity, CapacityBuffer",
            ),
            (
                "Drift=true",
                "FEATURE_GATES: Drift is no longer a feature gate (drift is always on since v1); remove it",
            ),
            (
                "NodeRepair",
                "FEATURE_GATES: \"NodeRepair\" is not Name=true|false",
            ),
            (
                "NodeRepair=on",
                "FEATURE_GATES: NodeRepair: \"on\" is not a boolean",
            ),
        ];
        for (input, message) in cases {
            let err = FeatureGates::parse(input).expect_err(input);
            assert!(err.starts_with(message), "{input}: {err}");
            let err = parse(&[], &[("FEATURE_GATES", input)]).expect_err(input);
            assert!(err.to_string().contains(message), "{input}: {err}");
        }
        let err = AwsFeatureGates::parse("NodeRepair=true").expect_err("core gate");
        assert_eq!(
            err,
            "AWS_FEATURE_GATES: unknown feature gate \"NodeRepair\"; known gates are NodeClassCEL"
        );
    }

    #[test]
    fn enumerations_accept_upstreams_spelling_in_any_case() {
        let s = settings(&[
            "--log-level=DEBUG",
            "--min-values-policy",
            "BestEffort",
            "--preference-policy=ignore",
        ]);
        assert_eq!(s.log_level, LogLevel::Debug);
        assert_eq!(s.min_values_policy, MinValuesPolicy::BestEffort);
        assert_eq!(s.preference_policy, PreferencePolicy::Ignore);
        let err = parse(&[], &[("LOG_LEVEL", "verbose")]).expect_err("not a level");
        assert!(
            err.to_string()
                .contains("[possible values: debug, info, warn, error]"),
            "{err}"
        );
    }

    #[test]
    fn a_complete_aws_configuration_is_valid() {
        assert_eq!(
            problems(&[
                "--cluster-name=prod",
                "--cluster-endpoint=https://ABC.gr7.us-east-1.eks.amazonaws.com",
                "--interruption-queue=Karpenter-prod",
            ]),
            Vec::<String>::new()
        );
        assert_eq!(
            problems(&["--cloud-provider=simulated"]),
            Vec::<String>::new()
        );
    }

    #[test]
    fn run_accepts_the_node_overlay_gate() {
        let args = ["--cluster-name=c", "--feature-gates=NodeOverlay=true"];
        assert!(settings(&args).feature_gates.node_overlay);
        assert_eq!(problems(&args), Vec::<String>::new());
    }

    #[test]
    fn each_invalid_setting_gets_one_line_naming_variable_flag_and_fix() {
        let cases: &[(&[&str], &str)] = &[
            (
                &[],
                "CLUSTER_NAME (--cluster-name) is required with the aws cloud provider: set it to the EKS cluster's name (Helm: settings.clusterName), or use CLOUD_PROVIDER=simulated (--cloud-provider simulated)",
            ),
            (
                &["--vm-memory-overhead-percent=1"],
                "VM_MEMORY_OVERHEAD_PERCENT (--vm-memory-overhead-percent) is 1: it is a fraction and must be at least 0 and below 1 (the default 0.075 means 7.5%)",
            ),
            (
                &["--vm-memory-overhead-percent=-0.1"],
                "VM_MEMORY_OVERHEAD_PERCENT (--vm-memory-overhead-percent) is -0.1: it is a fraction",
            ),
            (
                &["--vm-memory-overhead-percent=NaN"],
                "VM_MEMORY_OVERHEAD_PERCENT (--vm-memory-overhead-percent) is NaN",
            ),
            (
                &["--batch-idle-duration=30s"],
                "BATCH_IDLE_DURATION (--batch-idle-duration) 30s is longer than BATCH_MAX_DURATION (--batch-max-duration) 10s: the idle window must fit in the maximum batch window, so lower the first or raise the second",
            ),
            (
                &["--batch-max-duration=0s", "--batch-idle-duration=0s"],
                "BATCH_MAX_DURATION (--batch-max-duration) is 0: pending pods need a batching window longer than 0 (default 10s)",
            ),
            (
                &["--batch-idle-duration=0"],
                "BATCH_IDLE_DURATION (--batch-idle-duration) is 0",
            ),
            (
                &["--consolidation-replacements=0"],
                "CONSOLIDATION_REPLACEMENTS (--consolidation-replacements) is 0: it counts the new nodes one consolidation may launch and must be at least 1",
            ),
            (
                &["--reserved-enis=-1"],
                "RESERVED_ENIS (--reserved-enis) is -1: it counts network interfaces and must be 0 or more",
            ),
            (
                &["--feature-gates=CapacityBuffer=true,SpotToSpotConsolidation=true"],
                "FEATURE_GATES (--feature-gates) turns CapacityBuffer on, which karpenter-rs does not implement",
            ),
            (
                &["--ignore-dra-requests=false"],
                "IGNORE_DRA_REQUESTS (--ignore-dra-requests) is false: DRA-aware provisioning (upstream's DynamicResourceAllocation scheduling) is not supported",
            ),
            (
                &["--ami-refresh-interval=30s"],
                "AMI_REFRESH_INTERVAL (--ami-refresh-interval) is 30s: it must be at least 1m",
            ),
            (
                &["--subnet-refresh-interval=59s"],
                "SUBNET_REFRESH_INTERVAL (--subnet-refresh-interval) is 59s: it must be at least 1m",
            ),
            (
                &["--cluster-endpoint=ABC.eks.amazonaws.com"],
                "CLUSTER_ENDPOINT (--cluster-endpoint) \"ABC.eks.amazonaws.com\" is not a URL: use the API server's https:// endpoint",
            ),
            (
                &["--interruption-queue=https://sqs.us-east-1.amazonaws.com/111122223333/q"],
                "INTERRUPTION_QUEUE (--interruption-queue) \"https://sqs.us-east-1.amazonaws.com/111122223333/q\" is not an SQS queue name: give the queue's name",
            ),
            (
                &["--kube-client-qps=0"],
                "KUBE_CLIENT_QPS (--kube-client-qps) is 0",
            ),
            (
                &["--kube-client-burst=0"],
                "KUBE_CLIENT_BURST (--kube-client-burst) is 0",
            ),
            (
                &["--cpu-requests=-1"],
                "CPU_REQUESTS (--cpu-requests) is -1: it is the controller's CPU request in millicores and must be 0 or more",
            ),
            (
                &["--memory-limit=-2"],
                "MEMORY_LIMIT (--memory-limit) is -2: give the container's memory limit in bytes, or -1 for none",
            ),
            (
                &["--health-probe-port=8080"],
                "METRICS_PORT (--metrics-port) and HEALTH_PROBE_PORT (--health-probe-port) are both 8080: the two servers need different ports",
            ),
            (
                &["--leader-election-name="],
                "LEADER_ELECTION_NAME (--leader-election-name) is empty",
            ),
            (
                &["--log-output-paths="],
                "LOG_OUTPUT_PATHS (--log-output-paths) names no output: give stdout, stderr or file paths, comma-separated (default stdout)",
            ),
            (
                &["--log-error-output-paths", " "],
                "LOG_ERROR_OUTPUT_PATHS (--log-error-output-paths) names no output",
            ),
        ];
        for (args, message) in cases {
            let mut args = args.to_vec();
            let missing_cluster_name = message.starts_with("CLUSTER_NAME");
            if !missing_cluster_name {
                args.push("--cluster-name=c");
            }
            let found = problems(&args);
            let expected = if args.contains(&"--batch-max-duration=0s") {
                // Both zero: each gets its own line, and nothing else is reported.
                2
            } else {
                1
            };
            assert_eq!(found.len(), expected, "{args:?}: {found:#?}");
            assert!(found[0].starts_with(message), "{args:?}: {found:#?}");
        }
    }

    /// What the default chart passes (`controller.resources: {}`): the kubelet resolves an
    /// unset CPU request to "0" and an unset memory limit to the node's allocatable memory.
    #[test]
    fn the_default_charts_downward_api_values_are_valid() {
        let s = parse(
            &["--cluster-name=c"],
            &[("CPU_REQUESTS", "0"), ("MEMORY_LIMIT", "16106127360")],
        )
        .expect("downward API values parse");
        assert_eq!(s.cpu_requests, 0);
        assert_eq!(s.memory_limit, 16_106_127_360);
        assert_eq!(s.validate(), Ok(()));
    }

    #[test]
    fn settings_asking_for_what_is_not_supported_are_refused_not_ignored() {
        let err = settings(&[
            "--cluster-name=c",
            "--enable-zonal-shift",
            "--enable-profiling",
            "--disable-controller-warmup=false",
            "--scheduler-config=/etc/scheduler.yaml",
            "--aws-feature-gates=NodeClassCEL=true",
        ])
        .validate()
        .expect_err("five unsupported settings");
        assert_eq!(err.problems.len(), 5, "{err}");
        for named in [
            "ENABLE_ZONAL_SHIFT (--enable-zonal-shift) is true",
            "ENABLE_PROFILING (--enable-profiling) is true",
            "DISABLE_CONTROLLER_WARMUP (--disable-controller-warmup) is false",
            "SCHEDULER_CONFIG (--scheduler-config) is set",
            "NodeClassCEL on",
        ] {
            assert!(err.to_string().contains(named), "{named}: {err}");
        }
        // Their defaults, which the chart passes, are fine.
        assert_eq!(settings(&["--cluster-name=c"]).validate(), Ok(()));
        // EKS_CONTROL_PLANE is supported: it picks where the Kubernetes version is read.
        assert_eq!(
            settings(&["--cluster-name=c", "--eks-control-plane"]).validate(),
            Ok(())
        );
    }

    #[test]
    fn all_problems_are_reported_at_once() {
        let err = settings(&["--vm-memory-overhead-percent=2", "--reserved-enis=-3"])
            .validate()
            .expect_err("three problems");
        assert_eq!(err.problems.len(), 3, "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with("invalid settings:\n  - CLUSTER_NAME"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 4, "{text}");
    }

    /// The controller's real entry point flattens `Settings` into its `run` command and lets clap
    /// read the process environment. Changing the environment of a running test process races
    /// with other threads, so this runs the child test below in a fresh process instead.
    #[test]
    fn the_process_environment_is_read_and_flags_win() {
        let exe = std::env::current_exe().expect("the test binary's path");
        let output = std::process::Command::new(exe)
            .args([
                "operator::settings::tests::process_environment_child",
                "--exact",
                "--test-threads=1",
            ])
            .env("KARPENTER_RS_SETTINGS_CHILD", "1")
            .env("CLUSTER_NAME", "from-env")
            .env("METRICS_PORT", "9000")
            .env("LOG_ERROR_OUTPUT_PATHS", "stderr,/tmp/karpenter-errors.log")
            .env("FEATURE_GATES", "NodeOverlay=true")
            .output()
            .expect("the child test runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The child half of `the_process_environment_is_read_and_flags_win`; in a normal test run
    /// (no `KARPENTER_RS_SETTINGS_CHILD`) it has nothing to check and returns.
    #[test]
    fn process_environment_child() {
        #[derive(clap::Parser)]
        struct Run {
            #[command(flatten)]
            settings: Settings,
        }
        if std::env::var_os("KARPENTER_RS_SETTINGS_CHILD").is_none() {
            return;
        }
        let run = <Run as clap::Parser>::try_parse_from(["karpenter-rs", "--metrics-port=9100"])
            .expect("the environment parses");
        assert_eq!(run.settings.cluster_name, "from-env");
        assert_eq!(run.settings.metrics_port, 9100);
        assert_eq!(
            run.settings.log_error_output_paths,
            ["stderr", "/tmp/karpenter-errors.log"]
        );
        assert!(run.settings.feature_gates.node_overlay);
        assert!(run.settings.feature_gates.reserved_capacity);
    }
}
