//! What one scheduler run costs in heap over the bundled catalog (issue #15): every
//! provisioning round and every disruption simulation solves afresh, so what a solve builds per
//! instance type is paid at each one, beside whatever else the controller holds then. Counted by
//! this binary's own global allocator (`tests/support/heap.rs`).

use std::sync::Arc;

use karpenter_rs::apis::ec2nodeclass::AMIFamily;
use karpenter_rs::apis::labels;
use karpenter_rs::apis::nodeclaim::Operator;
use karpenter_rs::catalog::Catalog;
use karpenter_rs::scheduling::instance_type::NodeClassSettings;
use karpenter_rs::scheduling::pod::{Pod, PodShape};
use karpenter_rs::scheduling::requirements::{Requirement, Requirements};
use karpenter_rs::scheduling::resources::{Resources, gib};
use karpenter_rs::scheduling::scheduler::{Input, NodePoolTemplate, Options, solve};

#[path = "support/heap.rs"]
mod heap;

/// The scale bench's NodePool: on-demand c, m and r types of generation 6 and later, amd64, over
/// every instance type of the bundled catalog (the pool's requirements pick among them).
fn bench_pool() -> NodePoolTemplate {
    let catalog = Catalog::bundled("us-east-1").expect("bundled catalog");
    let types = catalog.instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023));
    let requirements: Requirements = [
        Requirement::new(labels::NODEPOOL, Operator::In, ["default"], None),
        Requirement::new(labels::CAPACITY_TYPE, Operator::In, ["on-demand"], None),
        Requirement::new(labels::ARCH, Operator::In, ["amd64"], None),
        Requirement::new(
            labels::INSTANCE_CATEGORY,
            Operator::In,
            ["c", "m", "r"],
            None,
        ),
        Requirement::new(labels::INSTANCE_GENERATION, Operator::Gt, ["5"], None),
    ]
    .into_iter()
    .collect();
    NodePoolTemplate {
        name: Arc::from("default"),
        weight: 0,
        requirements,
        taints: Vec::new(),
        instance_types: Arc::new(types),
        daemon_overhead: Resources::default(),
        daemon_host_ports: Vec::new(),
        limits: Vec::new(),
        nodes_limit: None,
        cache: Default::default(),
    }
}

/// Pending pod `i`: half a CPU and 1 GiB, no constraints.
fn pod(i: usize) -> Pod {
    Pod {
        namespace: Arc::from("default"),
        name: Arc::from(format!("web-{i}")),
        uid: Arc::from(format!("uid-{i}")),
        labels: Arc::default(),
        created: 0,
        owner_kind: None,
        annotations: Arc::default(),
        volumes: vec![],
        shape: Arc::new(PodShape {
            requests: Resources {
                pods: 1,
                ..Resources::cpu_memory(500, gib(1))
            },
            ..PodShape::default()
        }),
    }
}

/// A solve of 200 pending pods over the bundled catalog's ~1,000 instance types, with a fresh
/// template cache as every provisioning round and disruption pass gets: what it allocates at
/// its peak beyond its input. It used to build each instance type's label requirements for the
/// solve (~8 KB a type, 11.3 MB at the peak over 1,340 types); the labels are read from the
/// types instead (71 KB at the peak).
#[test]
fn a_solve_builds_nothing_per_instance_type() {
    let input = Input {
        nodepools: vec![bench_pool()],
        existing: Vec::new(),
        pods: (0..200).map(pod).collect(),
        options: Options::default(),
    };
    let types = input.nodepools[0].instance_types.len();
    let mark = heap::Mark::now();
    let outcome = solve(&input);
    let peak = mark.peak();
    let placed = outcome.placements.iter().flatten().count();
    println!(
        "{types} instance types, 200 pods: {placed} placed on {} NodeClaims, solve peak {peak} B",
        outcome.nodeclaims.len()
    );
    assert_eq!(placed, 200, "every pod fits");
    assert!(
        peak < 1_000_000,
        "a solve allocated {peak} B at its peak over {types} instance types"
    );
}
