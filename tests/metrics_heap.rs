//! What the per-pod and per-node metric families cost in heap at 20,000 pods on 1,000 nodes
//! (issue #15): counted by this binary's own global allocator (`tests/support/heap.rs`).

use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use k8s_openapi::api::core::v1::Node;
use karpenter_rs::metrics::cluster_state::PodTransitions;
use karpenter_rs::metrics::pod_scheduling::{PodKey, PodSchedulingTimes};
use karpenter_rs::metrics::{PublishedGauges, families, nodes, pods};
use karpenter_rs::snapshot::ClusterPod;
use serde_json::json;

#[path = "support/heap.rs"]
mod heap;

/// Node `i`, managed, in one of three zones.
fn node(i: usize) -> Arc<Node> {
    Arc::new(serde_json::from_value(json!({
        "metadata": {"name": format!("node-{i}"), "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"karpenter.sh/nodepool": "default", "topology.kubernetes.io/zone": format!("us-east-1{}", ["a","b","c"][i % 3]),
                "kubernetes.io/arch": "amd64", "karpenter.sh/capacity-type": "on-demand",
                "node.kubernetes.io/instance-type": "m5.xlarge"}},
        "status": {"phase": "Running"}
    })).expect("node"))
}

/// Pod `i`: bound to one of the nodes (one in 20 pending), one in 3 not Ready, one in 97 being
/// deleted, converted as the pod cache converts it.
fn pod(i: usize) -> Arc<ClusterPod> {
    let bound = !i.is_multiple_of(20);
    let mut conditions = vec![];
    if bound {
        conditions.push(json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z"}));
    }
    conditions.push(json!({"type": "Ready", "status": if i.is_multiple_of(3) { "False" } else { "True" }, "lastTransitionTime": "2026-01-01T00:00:30Z"}));
    let mut meta = json!({"name": format!("web-{}-{i:05}", i % 100), "namespace": format!("ns-{}", i % 10), "uid": format!("uid-{i}"),
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("web-{}", i % 100), "uid": "r", "controller": true}]});
    if i.is_multiple_of(97) {
        meta["deletionTimestamp"] = json!("2026-01-01T00:01:00Z");
    }
    let p: ClusterPod = serde_json::from_value(json!({
        "metadata": meta,
        "spec": {"nodeName": if bound { Some(format!("node-{}", i % 1000)) } else { None },
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
        "status": {"phase": if bound { "Running" } else { "Pending" }, "conditions": conditions}
    })).expect("pod");
    let _ = p.scheduling_pod();
    Arc::new(p)
}

/// 1,000 nodes and 20,000 pods on them, 100 s after they were created.
fn cluster() -> (DateTime<Utc>, Vec<Arc<Node>>, Vec<Arc<ClusterPod>>) {
    let now = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 1, 40)
        .single()
        .expect("time");
    (
        now,
        (0..1000).map(node).collect(),
        (0..20000).map(pod).collect(),
    )
}

/// The bytes a metrics pass and a scrape of the per-pod families hold over 20,000 pods on
/// 1,000 nodes: the pass holds nothing for them (they read the cache when scraped), and a
/// scrape holds a row per pod and a piece of text, not a series per pod.
/// Takes the text of every family once, as a scrape does. Returns its length, and the heap
/// mark taken just before.
fn scrape(families: &[PublishedGauges]) -> (usize, heap::Mark) {
    let mark = heap::Mark::now();
    let bytes = families
        .iter()
        .flat_map(|f| f.text_chunks())
        .map(|c| c.len())
        .sum();
    (bytes, mark)
}

#[test]
fn the_pod_families_hold_no_series_between_scrapes_and_little_during_one() {
    let _counting = heap::exclusive();
    let (now, nodes, pods) = cluster();
    let families = [
        PublishedGauges::new("karpenter_pods_state", "h", &pods::STATE_LABELS),
        PublishedGauges::new(
            "karpenter_pods_unbound_time_seconds",
            "h",
            &pods::NAME_LABELS,
        ),
        PublishedGauges::new(
            "karpenter_pods_unstarted_time_seconds",
            "h",
            &pods::NAME_LABELS,
        ),
    ]
    .map(|f| f.expect("valid family"));
    let mark = heap::Mark::now();
    let [state, unbound_time_seconds, unstarted_time_seconds] = &families;
    pods::serve(
        pods::PodFamilies {
            state,
            unbound_time_seconds,
            unstarted_time_seconds,
        },
        move || pods::PodView {
            nodes: nodes.clone(),
            pods: pods.clone(),
            now,
        },
    );
    let held = mark.held();
    let (bytes, scrape) = scrape(&families);
    let scrape_peak = scrape.peak();
    let scrape_total = scrape.allocated();
    println!(
        "held between scrapes {held} B; scrape: peak {scrape_peak} B, allocated {scrape_total} B, text {bytes} B"
    );
    // Built by a metrics pass, the families held 5.3 MB of series at 20,000 pods.
    assert!(held < 100_000, "{held} B held between scrapes");
    // The text is streamed a chunk at a time, never held whole.
    assert!(
        scrape_peak < bytes / 2,
        "a scrape peaked at {scrape_peak} B for {bytes} B of text"
    );
}

/// What the provisioner's scheduling times hold for 20,000 pending pods, each acknowledged and
/// decided by a round: an entry per pod keyed by the names the pod cache already holds.
#[test]
fn the_scheduling_times_of_20000_pods_allocate_no_key_per_pod() {
    let _counting = heap::exclusive();
    let now: DateTime<Utc> = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 1, 40)
        .single()
        .expect("time");
    let pods: Vec<Arc<ClusterPod>> = (0..20000).map(pod).collect();
    let mark = heap::Mark::now();
    let times = PodSchedulingTimes::default();
    // A round's pending pods, as the provisioner lists them.
    let keys: Vec<PodKey> = pods.iter().map(|p| PodKey::of_cached(p)).collect();
    let round = mark.held();
    let recording = heap::Mark::now();
    times.ack(&keys, now);
    let _ = times.decide(&keys, [], now);
    let allocations = recording.allocations();
    drop(keys);
    let held = mark.held();
    println!(
        "scheduling times of 20,000 pods: {held} B held in {allocations} allocations, a round's keys {round} B"
    );
    // With a `String` key per pod: 2.47 MB held, a round's keys 0.82 MB, and an allocation per
    // pod for each.
    assert!(
        allocations < 100,
        "{allocations} allocations to record 20,000 pods"
    );
}

/// What following 20,000 pods' binding and start costs a metrics pass: the sets of pods still
/// unbound or unstarted share the pod cache's UIDs instead of copying one per pod every pass.
#[test]
fn following_20000_pods_allocates_no_key_per_pod() {
    let _counting = heap::exclusive();
    let pods: Vec<Arc<ClusterPod>> = (0..20000).map(pod).collect();
    let mut transitions = PodTransitions::default();
    let _ = transitions.observe(&pods, |_| None);
    let pass = heap::Mark::now();
    let durations = transitions.observe(&pods, |_| None);
    let allocations = pass.allocations();
    let allocated = pass.allocated();
    drop(durations);
    println!("a pass over 20,000 pods: {allocations} allocations, {allocated} B");
    // With a `String` per unbound or unstarted pod: 20,817 allocations a pass.
    assert!(
        allocations < 200,
        "{allocations} allocations to follow 20,000 pods"
    );
}

/// What the node families cost on 1,000 nodes with 20,000 pods: they hold nothing between
/// scrapes (they read the caches when scraped), and a scrape keeps a row per series (a node, a
/// resource and a value) and a piece of text, not a series with its label values: a few
/// allocations per family, not per node.
#[test]
fn the_node_families_hold_no_series_and_allocate_little_per_node_when_scraped() {
    let _counting = heap::exclusive();
    let (now, nodes, pods) = cluster();
    let families = [
        "karpenter_nodes_allocatable",
        "karpenter_nodes_total_pod_requests",
        "karpenter_nodes_total_pod_limits",
        "karpenter_nodes_total_daemon_requests",
        "karpenter_nodes_total_daemon_limits",
        "karpenter_nodes_system_overhead",
        "karpenter_nodes_current_lifetime_seconds",
        "karpenter_cluster_utilization_percent",
    ]
    .map(|name| {
        let labels: Vec<&str> = families()
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.labels.iter().map(String::as_str).collect())
            .expect("a registered family");
        PublishedGauges::new(name, "h", &labels).expect("valid family")
    });
    let node_count = nodes.len();
    let mark = heap::Mark::now();
    nodes::serve(nodes::NodeFamilies::in_order(&families), move || {
        pods::PodView {
            nodes: nodes.clone(),
            pods: pods.clone(),
            now,
        }
    });
    let held = mark.held();
    let (bytes, scrape) = scrape(&families);
    let allocations = scrape.allocations();
    let peak = scrape.peak();
    println!(
        "node families of 1,000 nodes: held between scrapes {held} B; scrape: {allocations} allocations, peak {peak} B, text {bytes} B"
    );
    // Built by a metrics pass: 210,420 allocations and a 5.7 MB peak per pass (363,220 and
    // 9.9 MB with the label values copied per series), and 5.2 MB held between passes.
    assert!(held < 10_000, "{held} B held between scrapes");
    assert!(
        allocations < node_count,
        "{allocations} allocations to scrape the node families of {node_count} nodes"
    );
    // The text is streamed a piece at a time, never held whole; the rows and the nodes' label
    // table of one family at a time are what remains.
    assert!(
        peak < 2_000_000,
        "a scrape peaked at {peak} B for {bytes} B of text"
    );
}
