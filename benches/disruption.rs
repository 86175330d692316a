//! Disruption benchmark: one full engine evaluation (candidates, budgets, drift, emptiness,
//! multi-node and single-node consolidation) for clusters of 100, 500 and 1,000 nodes spread over
//! 1, 3 and 9 NodePools, on the bundled us-east-1 catalog.
//!
//! Two cluster shapes bound the cost: `underutilized` (a third of the nodes run one small pod, so
//! consolidation finds a command early) and `packed` (every node is busy, so every method runs to
//! the end without finding anything — the worst case, where single-node consolidation simulates
//! every candidate).
//!
//! A third, `tainted_pools`, has many NodePools that each taint their nodes, with pods that
//! tolerate only their own pool's taint (the shape of `benches/gen-tainted-pools.py` once
//! provisioning has placed the pending pods): every rescheduling simulation sees every pool.

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use criterion::{BenchmarkId, Criterion, SamplingMode, criterion_group, criterion_main};
use karpenter_rs::catalog::Catalog;
use karpenter_rs::disruption::{self, state::State};
use karpenter_rs::manifest;
use karpenter_rs::snapshot::EngineOptions;

/// Deterministic splitmix64, so every run benchmarks the same cluster.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

/// (instance type, allocatable cpu, allocatable memory) for the node shapes used.
const SHAPES: &[(&str, &str, &str)] = &[
    ("m5.large", "1930m", "6903Mi"),
    ("m5.xlarge", "3920m", "14162Mi"),
    ("m5.2xlarge", "7910m", "29317Mi"),
    ("c5.xlarge", "3920m", "6398Mi"),
    ("r5.large", "1930m", "14575Mi"),
];

const NODECLASS: &str = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: default}\nspec:\n  role: R\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{tags: {a: b}}]\n";

fn manifests(nodes: usize, pools: usize, packed: bool) -> String {
    let mut out = String::from(NODECLASS);
    for p in 0..pools {
        let _ = write!(
            out,
            "---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: pool-{p}}}\nspec:\n  disruption: {{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s, budgets: [{{nodes: \"10%\"}}]}}\n  template:\n    spec:\n      expireAfter: Never\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n        - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}\n        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n        - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}}\n"
        );
    }
    let mut rng = Rng(42);
    let zones = ["us-east-1a", "us-east-1b", "us-east-1c"];
    let cpus = ["100m", "250m", "500m", "1"];
    let mems = ["256Mi", "512Mi", "1Gi", "2Gi"];
    for n in 0..nodes {
        let (itype, cpu, mem) = rng.pick(SHAPES);
        let zone = rng.pick(&zones);
        let pool = n % pools;
        let _ = write!(
            out,
            "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: node-{n}\n  creationTimestamp: \"2026-11-01T00:00:00Z\"\n  labels: {{kubernetes.io/hostname: node-{n}, kubernetes.io/arch: amd64, kubernetes.io/os: linux, topology.kubernetes.io/zone: {zone}, node.kubernetes.io/instance-type: {itype}, karpenter.sh/capacity-type: on-demand, karpenter.sh/nodepool: pool-{pool}, karpenter.sh/initialized: \"true\", karpenter.k8s.aws/instance-category: \"{cat}\"}}\nstatus:\n  allocatable: {{cpu: \"{cpu}\", memory: \"{mem}\", pods: \"29\"}}\n  conditions: [{{type: Ready, status: \"True\"}}]\n",
            cat = &itype[..1]
        );
        // Packed: pods fill most of the node; underutilized: every third node holds one small pod.
        let pods = if !packed && n % 3 == 0 { 1 } else { 3 };
        for k in 0..pods {
            let (c, m) = if packed {
                // A third of the node each: nothing fits anywhere else.
                let third = |q: &str, unit: &str| {
                    let n: i64 = q.trim_end_matches(unit).parse().unwrap_or(0);
                    format!("{}{unit}", n * 3 / 10)
                };
                (third(cpu, "m"), third(mem, "Mi"))
            } else {
                (rng.pick(&cpus).to_string(), rng.pick(&mems).to_string())
            };
            let _ = write!(
                out,
                "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p-{n}-{k}, namespace: default, labels: {{app: a{}}}}}\nspec:\n  nodeName: node-{n}\n  containers: [{{name: c, image: i, resources: {{requests: {{cpu: \"{c}\", memory: {m}}}}}}}]\nstatus: {{phase: Running}}\n",
                n % 7
            );
        }
    }
    out
}

/// `pools` NodePools, each tainting its nodes `team=pool-P:NoSchedule` (budget 50%), with three
/// m5.xlarge nodes in three zones and its share of `pods` (250m, 512Mi, tolerating only that
/// taint) spread over them.
fn tainted_manifests(pools: usize, pods: usize) -> String {
    let mut out = String::from(NODECLASS);
    let zones = ["us-east-1a", "us-east-1b", "us-east-1c"];
    for p in 0..pools {
        let taint = format!("{{key: team, value: pool-{p}, effect: NoSchedule}}");
        let _ = write!(
            out,
            "---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: pool-{p}}}\nspec:\n  disruption: {{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s, budgets: [{{nodes: \"50%\"}}]}}\n  template:\n    spec:\n      expireAfter: Never\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      taints: [{taint}]\n      requirements:\n        - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}\n        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n        - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}}\n"
        );
        for n in 0..3 {
            let zone = zones[(p + n) % zones.len()];
            let _ = write!(
                out,
                "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: pool-{p}-node-{n}\n  creationTimestamp: \"2026-11-01T00:00:00Z\"\n  labels: {{kubernetes.io/hostname: pool-{p}-node-{n}, kubernetes.io/arch: amd64, kubernetes.io/os: linux, topology.kubernetes.io/zone: {zone}, node.kubernetes.io/instance-type: m5.xlarge, karpenter.sh/capacity-type: on-demand, karpenter.sh/nodepool: pool-{p}, karpenter.sh/initialized: \"true\", karpenter.k8s.aws/instance-category: m}}\nspec:\n  taints: [{taint}]\nstatus:\n  allocatable: {{cpu: \"3920m\", memory: \"14162Mi\", pods: \"58\"}}\n  conditions: [{{type: Ready, status: \"True\"}}]\n"
            );
        }
        let share = pods / pools + usize::from(p < pods % pools);
        for k in 0..share {
            let _ = write!(
                out,
                "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: pool-{p}-{k}, namespace: default, labels: {{app: pool-{p}}}}}\nspec:\n  nodeName: pool-{p}-node-{}\n  tolerations: [{{key: team, operator: Equal, value: pool-{p}, effect: NoSchedule}}]\n  containers: [{{name: c, image: i, resources: {{requests: {{cpu: 250m, memory: 512Mi}}}}}}]\nstatus: {{phase: Running}}\n",
                k % 3
            );
        }
    }
    out
}

/// The scale bench's drift roll, one pass: `nodes` m5.4xlarge nodes (three zones, one NodePool,
/// budget 10%) whose NodeClaims carry a NodePool hash the template no longer has, so every node
/// is drifted, each running `per_node` pods (200m, 512Mi) of 100 Deployments, a third of them
/// spread over zones. Every drift command of the pass simulates its candidate's pods against
/// the whole cluster.
fn drifted_manifests(nodes: usize, per_node: usize) -> String {
    let mut out = String::from(NODECLASS);
    out.push_str("---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: pool}\nspec:\n  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s, budgets: [{nodes: \"10%\"}]}\n  template:\n    spec:\n      expireAfter: Never\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n        - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}\n");
    let zones = ["us-east-1a", "us-east-1b", "us-east-1c"];
    for n in 0..nodes {
        let zone = zones[n % zones.len()];
        let _ = write!(
            out,
            "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: node-{n}\n  creationTimestamp: \"2026-11-01T00:00:00Z\"\n  labels: {{kubernetes.io/hostname: node-{n}, kubernetes.io/arch: amd64, kubernetes.io/os: linux, topology.kubernetes.io/zone: {zone}, node.kubernetes.io/instance-type: m5.4xlarge, karpenter.sh/capacity-type: on-demand, karpenter.sh/nodepool: pool, karpenter.sh/initialized: \"true\", karpenter.k8s.aws/instance-category: m}}\nspec:\n  providerID: aws:///{zone}/i-{n}\nstatus:\n  allocatable: {{cpu: \"15890m\", memory: \"57632Mi\", pods: \"234\"}}\n  conditions: [{{type: Ready, status: \"True\"}}]\n---\napiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: node-{n}\n  creationTimestamp: \"2026-11-01T00:00:00Z\"\n  labels: {{karpenter.sh/nodepool: pool}}\n  annotations: {{karpenter.sh/nodepool-hash: \"a-template-since-changed\", karpenter.sh/nodepool-hash-version: \"{version}\"}}\nspec:\n  requirements: [{{key: karpenter.sh/nodepool, operator: In, values: [pool]}}]\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\nstatus:\n  nodeName: node-{n}\n  providerID: aws:///{zone}/i-{n}\n",
            version = karpenter_rs::apis::hash::NODEPOOL_HASH_VERSION
        );
        for k in 0..per_node {
            let app = (n * per_node + k) % 100;
            let spread = if app.is_multiple_of(3) {
                format!(
                    "\n  topologySpreadConstraints: [{{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: a{app}}}}}}}]"
                )
            } else {
                String::new()
            };
            let _ = write!(
                out,
                "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p-{n}-{k}, namespace: default, labels: {{app: a{app}}}, ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: rs-{app}, uid: rs-{app}, controller: true}}]}}\nspec:\n  nodeName: node-{n}{spread}\n  containers: [{{name: c, image: i, resources: {{requests: {{cpu: 200m, memory: 512Mi}}}}}}]\nstatus: {{phase: Running}}\n"
            );
        }
    }
    out
}

fn state(manifests: &str, catalog: &Catalog) -> State {
    let now = Utc.with_ymd_and_hms(2026, 11, 23, 10, 0, 0).unwrap();
    let docs =
        manifest::parse_str(manifests, Path::new("bench.yaml")).expect("generated manifests parse");
    let c = manifest::load(&docs, now).expect("generated manifests load");
    let options = EngineOptions::default();
    let prepared = karpenter_rs::snapshot::scheduling_input::prepare(&c, catalog, &options);
    karpenter_rs::snapshot::disruption_input::disruption_state(
        &c,
        prepared.input.nodepools,
        options.scheduler,
        karpenter_rs::snapshot::disruption_input::Unbound::LeftOut,
        now,
    )
}

fn bench(c: &mut Criterion) {
    let catalog = Catalog::bundled("us-east-1").expect("bundled catalog");
    let now = Utc.with_ymd_and_hms(2026, 11, 23, 10, 0, 0).unwrap();
    for shape in ["underutilized", "packed"] {
        let mut group = c.benchmark_group(format!("disruption/{shape}"));
        group.sampling_mode(SamplingMode::Flat);
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(4));
        for nodes in [100, 500, 1000] {
            for pools in [1, 3, 9] {
                let s = state(&manifests(nodes, pools, shape == "packed"), &catalog);
                report(&format!("{shape}/{nodes}x{pools}"), &s, now);
                group.bench_with_input(
                    BenchmarkId::from_parameter(format!("{nodes}-nodes-{pools}-pools")),
                    &s,
                    |b, s| {
                        b.iter(|| {
                            black_box(disruption::evaluate(s, now, disruption::Options::default()))
                        })
                    },
                );
            }
        }
        group.finish();
    }
    let mut group = c.benchmark_group("disruption/drifted");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    for (nodes, per_node) in [(100, 20), (300, 67)] {
        let s = state(&drifted_manifests(nodes, per_node), &catalog);
        let pods = nodes * per_node;
        report(&format!("drifted/{nodes}x{pods}"), &s, now);
        group.bench_with_input(
            BenchmarkId::from_parameter(format!("{nodes}-nodes-{pods}-pods")),
            &s,
            |b, s| {
                b.iter(|| black_box(disruption::evaluate(s, now, disruption::Options::default())))
            },
        );
    }
    group.finish();
    let mut group = c.benchmark_group("disruption/tainted_pools");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(4));
    for pools in [10, 30, 100] {
        let pods = 10 * pools;
        let s = state(&tainted_manifests(pools, pods), &catalog);
        report(&format!("tainted_pools/{pools}x{pods}"), &s, now);
        group.bench_with_input(
            BenchmarkId::from_parameter(format!("{pools}x{pods}")),
            &s,
            |b, s| {
                b.iter(|| black_box(disruption::evaluate(s, now, disruption::Options::default())))
            },
        );
    }
    group.finish();
}

/// Prints what the engine decides for a case, so a run shows what it timed.
fn report(case: &str, s: &State, now: chrono::DateTime<Utc>) {
    let decision = disruption::evaluate(s, now, disruption::Options::default());
    eprintln!(
        "disruption/{case}: commands={} ({}) blocked={}",
        decision.commands.len(),
        decision
            .commands
            .iter()
            .map(|c| format!("{:?} of {}", c.method, c.candidates.len()))
            .collect::<Vec<_>>()
            .join(", "),
        decision.blocked.len()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
