//! The metrics controller: every five seconds it publishes what the cluster looks like now
//! (node count, status conditions, NodePool costs, cluster-state sync) and observes the pods
//! that bound or started since the last pass, and, every minute, the cloud provider's instance
//! types and offerings, as upstream's metrics controllers do. The numbers come from the pure
//! functions in [`crate::metrics::cluster_state`] and [`crate::metrics::status`]; this shell
//! reads the reflected stores and writes the registry.
//!
//! The per-node gauges (`karpenter_nodes_*` but the counters and histograms,
//! `karpenter_cluster_utilization_percent`) and the per-pod ones (`karpenter_pods_state`,
//! `karpenter_pods_unbound_time_seconds`, `karpenter_pods_unstarted_time_seconds`,
//! `karpenter_pods_provisioning_*_time_seconds`) are not published by the pass: once the
//! caches have synced, `serve_node_families` and `serve_pod_families` hand them the node and
//! pod caches and they are written from those when scraped (see [`crate::metrics::nodes`] and
//! [`crate::metrics::pods`]). Likewise the instance-type families are written from the types
//! the pass last read ([`crate::metrics::instance_types`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::metrics::cluster_state::{self, Label, PodTransitions};
use crate::metrics::status::{
    KindGauges, StatusKind, StatusObject, StatusTracker, StatusUpdate, Transition,
};
use crate::metrics::{METRICS, StatusMetrics, instance_types, nodes, pod_scheduling, pods};
use crate::runtime::panics::guarded_pass;
use crate::scheduling::instance_type::InstanceType;

use super::Context;

/// How often the gauges are refreshed (upstream's node metrics controller requeues every 5s).
const INTERVAL: Duration = Duration::from_secs(5);

/// Instance types are refreshed every this many intervals (a minute, as upstream's).
const INSTANCE_TYPE_EVERY: u32 = 12;

/// Runs until the task is dropped. With `observe_cluster_state` false
/// (`DISABLE_CLUSTER_STATE_OBSERVABILITY`), the per-node and per-pod families stay empty, as
/// upstream skips its node and pod metrics controllers.
pub async fn run(ctx: Arc<Context>, observe_cluster_state: bool) {
    ctx.state.wait_synced().await;
    METRICS.cluster_state_synced.set(1.0);
    METRICS.cluster_state_unsynced_time_seconds.set(0.0);
    if observe_cluster_state {
        serve_node_families(&ctx);
        serve_pod_families(&ctx);
    }
    let mut pods = PodTransitions::default();
    let mut status = StatusTracker::default();
    let mut tick: u32 = 0;
    let mut last_classes = Vec::new();
    let mut types = HashMap::new();
    let offered = serve_instance_type_families();
    let mut unpriced_claims = HashSet::new();
    loop {
        let pass = async {
            let now = ctx.clock.now();
            let nodes = ctx.state.nodes.state();
            METRICS.cluster_state_node_count.set(nodes.len() as f64);
            if observe_cluster_state {
                let all_pods = ctx.state.pods.state();
                let times = &ctx.pod_scheduling;
                let durations = pods.observe(&all_pods, |k| times.get(k).schedulable);
                for d in durations.bound {
                    METRICS.pods_bound_duration_seconds.observe(d);
                }
                for d in durations.started {
                    if let Err(e) = METRICS.pods_startup_duration_seconds.observe(&[], d) {
                        tracing::warn!(error = %e, "could not record a pod startup duration");
                    }
                }
                for d in durations.provisioning_bound {
                    METRICS.pods_provisioning_bound_duration_seconds.observe(d);
                }
                for d in durations.provisioning_started {
                    METRICS
                        .pods_provisioning_startup_duration_seconds
                        .observe(d);
                }
                times.forget(&durations.done, &keys(&all_pods), now);
            } else {
                // Nothing reads the provisioner's times; keep only the pods that still exist.
                let all_pods = ctx.state.pods.state();
                ctx.pod_scheduling
                    .forget(&Default::default(), &keys(&all_pods), now);
            }
            let mut objects: Vec<StatusObject> = Vec::new();
            objects.extend(
                ctx.state
                    .nodeclaims
                    .state()
                    .iter()
                    .map(|c| StatusObject::from_nodeclaim(c)),
            );
            objects.extend(
                ctx.state
                    .nodepools
                    .state()
                    .iter()
                    .map(|p| StatusObject::from_nodepool(p)),
            );
            objects.extend(
                ctx.state
                    .nodeclasses
                    .state()
                    .iter()
                    .map(|c| StatusObject::from_nodeclass(c)),
            );
            // Nodes Karpenter manages only: an unmanaged node's conditions are the kubelet's
            // business, and would multiply the series by the cluster's size.
            objects.extend(
                nodes
                    .iter()
                    .filter(|n| {
                        n.metadata
                            .labels
                            .as_ref()
                            .is_some_and(|l| l.contains_key(crate::apis::labels::NODEPOOL))
                    })
                    .map(|n| StatusObject::from_node(n)),
            );
            publish_status(status.observe(&objects, now));
            // Every minute, and at once when an EC2NodeClass appears, changes or goes.
            let classes: Vec<(Option<String>, Option<String>)> = ctx
                .state
                .nodeclasses
                .state()
                .iter()
                .map(|c| (c.metadata.name.clone(), c.metadata.resource_version.clone()))
                .collect();
            if tick.is_multiple_of(INSTANCE_TYPE_EVERY) || classes != last_classes {
                types = publish_instance_types(&ctx, &offered).await;
                last_classes = classes;
            }
            let pools: Vec<String> = ctx
                .state
                .nodepools
                .state()
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            let costs =
                cluster_state::nodepool_costs(&pools, &ctx.state.nodeclaims.state(), &types);
            METRICS.nodepools_cost_total.publish(costs.cost);
            // One error per NodeClaim whose offering has no price, not one per pass.
            let unpriced: HashSet<String> = costs
                .unpriced
                .iter()
                .map(|(_, claim)| claim.clone())
                .collect();
            for (pool, claim) in &costs.unpriced {
                if !unpriced_claims.contains(claim) {
                    tracing::debug!(nodepool = %pool, nodeclaim = %claim, "no price for the nodeclaim's offering; left out of the nodepool's cost");
                    METRICS
                        .nodepools_cost_tracker_errors_total
                        .with_label_values(&[pool])
                        .inc();
                }
            }
            unpriced_claims = unpriced;
            tick = tick.wrapping_add(1);
        };
        guarded_pass("metrics", &ctx, pass).await;
        tokio::time::sleep(INTERVAL).await;
    }
}

/// Makes the instance-type families read the types the pass last handed the returned holder
/// when scraped (see [`crate::metrics::instance_types`]).
fn serve_instance_type_families() -> instance_types::Offered {
    let offered = instance_types::Offered::default();
    let families = instance_types::InstanceTypeFamilies {
        offering_available: &METRICS.cloudprovider_instance_type_offering_available,
        offering_price_estimate: &METRICS.cloudprovider_instance_type_offering_price_estimate,
        cpu_cores: &METRICS.cloudprovider_instance_type_cpu_cores,
        memory_bytes: &METRICS.cloudprovider_instance_type_memory_bytes,
    };
    instance_types::serve(families, &offered);
    offered
}

/// Makes the node families read the node and pod caches when scraped (see
/// [`crate::metrics::nodes`]) rather than be published by each pass.
fn serve_node_families(ctx: &Context) {
    let (nodes, pods, clock) = (
        ctx.state.nodes.clone(),
        ctx.state.pods.clone(),
        Arc::clone(&ctx.clock),
    );
    let families = nodes::NodeFamilies {
        allocatable: &METRICS.nodes_allocatable,
        total_pod_requests: &METRICS.nodes_total_pod_requests,
        total_pod_limits: &METRICS.nodes_total_pod_limits,
        total_daemon_requests: &METRICS.nodes_total_daemon_requests,
        total_daemon_limits: &METRICS.nodes_total_daemon_limits,
        system_overhead: &METRICS.nodes_system_overhead,
        current_lifetime_seconds: &METRICS.nodes_current_lifetime_seconds,
        cluster_utilization_percent: &METRICS.cluster_utilization_percent,
    };
    nodes::serve(families, move || pods::PodView {
        nodes: nodes.state(),
        pods: pods.state(),
        now: clock.now(),
    });
}

/// Makes the per-pod families read the pod and node caches when scraped (see
/// [`crate::metrics::pods`]) rather than be published by each pass.
fn serve_pod_families(ctx: &Context) {
    let (nodes, pods, clock) = (
        ctx.state.nodes.clone(),
        ctx.state.pods.clone(),
        Arc::clone(&ctx.clock),
    );
    let families = pods::PodFamilies {
        state: &METRICS.pods_state,
        unbound_time_seconds: &METRICS.pods_unbound_time_seconds,
        unstarted_time_seconds: &METRICS.pods_unstarted_time_seconds,
    };
    let read = move || pods::PodView {
        nodes: nodes.state(),
        pods: pods.state(),
        now: clock.now(),
    };
    let (pods, clock) = (ctx.state.pods.clone(), Arc::clone(&ctx.clock));
    pods::serve(families, read);
    let provisioning = pods::ProvisioningFamilies {
        unbound_time_seconds: &METRICS.pods_provisioning_unbound_time_seconds,
        unstarted_time_seconds: &METRICS.pods_provisioning_unstarted_time_seconds,
        scheduling_undecided_time_seconds: &METRICS
            .pods_provisioning_scheduling_undecided_time_seconds,
    };
    // The provisioning families read no nodes.
    pods::serve_provisioning(provisioning, Arc::clone(&ctx.pod_scheduling), move || {
        pods::PodView {
            nodes: Vec::new(),
            pods: pods.state(),
            now: clock.now(),
        }
    });
}

/// The `namespace/name` of each pod.
fn keys(pods: &[Arc<crate::snapshot::ClusterPod>]) -> HashSet<pod_scheduling::PodKey> {
    pods.iter()
        .map(|p| pod_scheduling::PodKey::of_cached(p))
        .collect()
}

fn family_of(kind: StatusKind) -> &'static StatusMetrics {
    match kind {
        StatusKind::NodeClaim => &METRICS.nodeclaim_status,
        StatusKind::NodePool => &METRICS.nodepool_status,
        StatusKind::Node => &METRICS.node_status,
        StatusKind::EC2NodeClass => &METRICS.ec2nodeclass_status,
    }
}

/// Appends the `kind` label of the deprecated aggregate families, which come before the
/// per-kind extra labels (the aggregate families have none).
fn with_kind(labels: &[Label], base: usize, kind: StatusKind) -> cluster_state::Series {
    let mut out: Vec<Label> = labels[..base].to_vec();
    out.push(kind.kind().into());
    cluster_state::Series {
        labels: out,
        value: 0.0,
    }
}

/// Publishes a pass's status gauges (replacing the last pass's) and counts its transitions
/// and finished terminations.
fn publish_status(update: StatusUpdate) {
    publish_status_gauges(update.gauges);
    count_status_changes(&update.transitions, &update.terminated);
}

fn publish_status_gauges(gauges: HashMap<StatusKind, KindGauges>) {
    let mut deprecated: [Vec<cluster_state::Series>; 3] = Default::default();
    for (kind, gauges) in gauges {
        let [count, current, terminating] = &mut deprecated;
        for (out, series, base) in [
            (count, &gauges.condition_count, 6),
            (current, &gauges.current_status_seconds, 6),
            (terminating, &gauges.termination_current_time_seconds, 3),
        ] {
            out.extend(series.iter().map(|s| cluster_state::Series {
                value: s.value,
                ..with_kind(&s.labels, base, kind)
            }));
        }
        let family = family_of(kind);
        family
            .status_condition_count
            .publish(gauges.condition_count);
        family
            .status_condition_current_status_seconds
            .publish(gauges.current_status_seconds);
        family
            .termination_current_time_seconds
            .publish(gauges.termination_current_time_seconds);
    }
    let old = &METRICS.deprecated_status;
    let [count, current, terminating] = deprecated;
    old.status_condition_count.publish(count);
    old.status_condition_current_status_seconds.publish(current);
    old.termination_current_time_seconds.publish(terminating);
}

fn count_status_changes(transitions: &[Transition], terminated: &[(StatusKind, f64)]) {
    let old = &METRICS.deprecated_status;
    for t in transitions {
        let family = family_of(t.kind);
        let group = t.kind.group();
        let kind = t.kind.kind();
        family
            .status_condition_transitions_total
            .with_label_values(&[group, &t.type_, &t.to_status, &t.reason])
            .inc();
        family
            .status_condition_transition_seconds
            .with_label_values(&[group, &t.type_, &t.from_status])
            .observe(t.seconds_in_previous);
        old.status_condition_transitions_total
            .with_label_values(&[group, &t.type_, &t.to_status, &t.reason, kind])
            .inc();
        old.status_condition_transition_seconds
            .with_label_values(&[group, &t.type_, &t.from_status, kind])
            .observe(t.seconds_in_previous);
    }
    for (kind, seconds) in terminated {
        family_of(*kind)
            .termination_duration_seconds
            .with_label_values(&[kind.group()])
            .observe(*seconds);
        old.termination_duration_seconds
            .with_label_values(&[kind.group(), kind.kind()])
            .observe(*seconds);
    }
}

/// Reads every EC2NodeClass's instance types, hands them to the instance-type families
/// (written from them when scraped), and returns them by EC2NodeClass name (for the NodePool
/// costs until the next refresh).
async fn publish_instance_types(
    ctx: &Context,
    offered: &instance_types::Offered,
) -> HashMap<String, Arc<Vec<InstanceType>>> {
    let mut types = HashMap::new();
    for class in ctx.state.nodeclasses.state() {
        match ctx.provider.instance_types(&class).await {
            Ok(t) => {
                types.insert(class.metadata.name.clone().unwrap_or_default(), t);
            }
            Err(e) => {
                tracing::debug!(ec2nodeclass = %class.metadata.name.clone().unwrap_or_default(), error = %e, "instance types unavailable for metrics")
            }
        }
    }
    let mut by_class: Vec<(&String, &Arc<Vec<InstanceType>>)> = types.iter().collect();
    by_class.sort_by_key(|&(class, _)| class);
    offered.set(by_class.into_iter().map(|(_, t)| Arc::clone(t)).collect());
    types
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, labels: serde_json::Value) -> Arc<crate::apis::NodeClaim> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "labels": labels},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                         "requirements": []}
            }))
            .expect("nodeclaim"),
        )
    }

    #[test]
    fn a_nodepool_costs_the_offering_prices_of_its_launched_nodeclaims() {
        let catalog = crate::catalog::Catalog::bundled("us-east-1").expect("catalog");
        let types = Arc::new(catalog.instance_types(
            &crate::scheduling::instance_type::NodeClassSettings::for_family(
                crate::apis::ec2nodeclass::AMIFamily::AL2023,
            ),
        ));
        let price = |name: &str| {
            types
                .iter()
                .find(|t| &*t.name == name)
                .and_then(|t| {
                    t.offerings.iter().find(|o| {
                        &*o.zone == "us-east-1a"
                            && o.capacity_type.label()
                                == crate::apis::labels::CAPACITY_TYPE_ON_DEMAND
                    })
                })
                .map(|o| o.price)
                .expect("an on-demand m5 offering in us-east-1a")
        };
        let launched = |name: &str, instance_type: &str| {
            claim(
                name,
                serde_json::json!({
                    "karpenter.sh/nodepool": "default",
                    "node.kubernetes.io/instance-type": instance_type,
                    "karpenter.sh/capacity-type": "on-demand",
                    "topology.kubernetes.io/zone": "us-east-1a",
                }),
            )
        };
        let claims = [
            launched("a", "m5.large"),
            launched("b", "m5.xlarge"),
            launched("c", "no-such.type"),
            // Not launched yet: no instance type label, no cost and no error.
            claim("d", serde_json::json!({"karpenter.sh/nodepool": "default"})),
        ];
        let by_class = HashMap::from([("default".to_string(), types.clone())]);
        let costs = cluster_state::nodepool_costs(
            &["default".to_string(), "idle".to_string()],
            &claims,
            &by_class,
        );
        assert_eq!(costs.cost.len(), 2);
        assert_eq!(*costs.cost[0].labels, [Label::from("default")]);
        assert!((costs.cost[0].value - price("m5.large") - price("m5.xlarge")).abs() < 1e-9);
        assert_eq!(*costs.cost[1].labels, [Label::from("idle")]);
        assert_eq!(costs.cost[1].value, 0.0);
        assert_eq!(costs.unpriced, [("default".to_string(), "c".to_string())]);
    }

    /// A status change and a finished deletion the tracker reports move the per-kind families
    /// and the deprecated aggregate ones (with `kind`) alike.
    #[test]
    fn transitions_and_terminations_are_published_per_kind_and_in_the_aggregate() {
        use crate::metrics::status::Transition;
        let kind = StatusKind::NodePool;
        let group = kind.group();
        let update = StatusUpdate {
            gauges: HashMap::new(),
            // A condition type of this test's own, so no other test moves these series.
            transitions: vec![Transition {
                kind,
                type_: "PublishedByTest".into(),
                from_status: "Unknown".into(),
                to_status: "True".into(),
                reason: "Tested".into(),
                seconds_in_previous: 3.0,
            }],
            terminated: vec![(kind, 7.0)],
        };
        let counter = |c: &prometheus::CounterVec, labels: &[&str]| c.with_label_values(labels);
        let histogram = |h: &prometheus::HistogramVec, labels: &[&str]| h.with_label_values(labels);
        let (new, old) = (&METRICS.nodepool_status, &METRICS.deprecated_status);
        let transitions = [
            counter(
                &new.status_condition_transitions_total,
                &[group, "PublishedByTest", "True", "Tested"],
            ),
            counter(
                &old.status_condition_transitions_total,
                &[group, "PublishedByTest", "True", "Tested", "NodePool"],
            ),
        ];
        let durations = [
            histogram(
                &new.status_condition_transition_seconds,
                &[group, "PublishedByTest", "Unknown"],
            ),
            histogram(
                &old.status_condition_transition_seconds,
                &[group, "PublishedByTest", "Unknown", "NodePool"],
            ),
            histogram(&new.termination_duration_seconds, &[group]),
            histogram(&old.termination_duration_seconds, &[group, "NodePool"]),
        ];
        let counted: Vec<f64> = transitions.iter().map(|c| c.get()).collect();
        let timed: Vec<(u64, f64)> = durations
            .iter()
            .map(|h| (h.get_sample_count(), h.get_sample_sum()))
            .collect();

        count_status_changes(&update.transitions, &update.terminated);

        for (c, before) in transitions.iter().zip(&counted) {
            assert_eq!(c.get() - before, 1.0);
        }
        for ((h, (count, sum)), seconds) in durations.iter().zip(&timed).zip([3.0, 3.0, 7.0, 7.0]) {
            assert_eq!(h.get_sample_count() - count, 1);
            assert!((h.get_sample_sum() - sum - seconds).abs() < 1e-9);
        }
    }

    #[test]
    fn the_deprecated_families_put_kind_after_the_base_labels() {
        let labels: Vec<Label> = [
            "",
            "a",
            "karpenter.sh",
            "Ready",
            "True",
            "Ready",
            "ec2",
            "np",
        ]
        .iter()
        .map(|s| Label::from(*s))
        .collect();
        assert_eq!(
            with_kind(&labels, 6, StatusKind::NodeClaim).labels,
            cluster_state::Series::new(
                [
                    "",
                    "a",
                    "karpenter.sh",
                    "Ready",
                    "True",
                    "Ready",
                    "NodeClaim"
                ],
                0.0
            )
            .labels
        );
    }
}
