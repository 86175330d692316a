//! Scheduling benchmark in the shape of upstream Karpenter's scheduling micro-benchmark
//! (`scheduling_benchmark_test.go`, see `shared/karpenter-reference.md` §4.1), so our numbers can
//! be read next to the ones upstream publishes.
//!
//! * 400 fake instance types `fake-it-0 … fake-it-399`: type *i* has `i+1` CPUs, `2·(i+1)` GiB,
//!   `10·(i+1)` pod slots, kube-reserved 100m / 10Mi, five offerings (spot in test-zone-1/2,
//!   on-demand in test-zone-1/2/3) priced `0.1·cpu + 0.1·memory-in-GB`.
//! * One NodePool `default` with no limits, no taints and no requirements besides
//!   `karpenter.sh/nodepool In [default]`.
//! * `diverse/N`: N pods in five equal groups (generic, zonal spread, hostname spread, zonal
//!   self-affinity, hostname anti-affinity), requests drawn from a fixed-seed PRNG.
//! * `preferences/{respect,ignore}`: 4000 pods with one satisfiable preferred node affinity, one
//!   unsatisfiable and one satisfiable preferred pod anti-affinity.
//!
//! Before timing a case the bench solves it once and prints pods, scheduled pods, NodeClaims and
//! errors to stderr; it panics if any pod could not be scheduled, as upstream's benchmark fails.
//!
//! Run with `cargo bench --bench scheduling` (filter with e.g. `-- diverse/20000`).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use karpenter_rs::apis::labels;
use karpenter_rs::apis::nodeclaim::Operator;
use karpenter_rs::scheduling::instance_type::{CapacityType, InstanceType, Offering, Overhead};
use karpenter_rs::scheduling::pod::{
    AffinityTerm, Pod, PodShape, Selector, SelectorOp, SpreadConstraint, WhenUnsatisfiable,
};
use karpenter_rs::scheduling::requirements::{NodeSelectorExpression, Requirement, Requirements};
use karpenter_rs::scheduling::resources::{Resources, gib, mib};
use karpenter_rs::scheduling::scheduler::{Input, NodePoolTemplate, Options, solve};

/// Diverse-pod counts, as upstream's `BenchmarkScheduling{1,…,20000}`.
const SIZES: [usize; 9] = [1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000];

/// Pod count of the preference benchmarks.
const PREFERENCE_PODS: usize = 4000;

/// Number of fake instance types.
const INSTANCE_TYPES: i64 = 400;

/// Seed of the request and label PRNG (upstream seeds Go's `math/rand` with 42).
const SEED: u64 = 42;

/// The zone the preference pods prefer.
const ZONE_1: &str = "test-zone-1";

/// CPU requests (millicores) pods draw from.
const CPU_CHOICES: [i64; 5] = [100, 250, 500, 1000, 1500];

/// Memory requests (MiB) pods draw from.
const MEMORY_CHOICES: [i64; 6] = [100, 256, 512, 1024, 2048, 4096];

/// Label values of `my-label` and `my-affininity`.
const LABEL_VALUES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];

/// A splitmix64 generator: tiny, deterministic, good enough to draw requests and labels.
struct SplitMix64(u64);

impl SplitMix64 {
    /// The next 64 random bits.
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniformly chosen element of a non-empty slice.
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next_u64() % items.len() as u64) as usize]
    }
}

/// One fake instance type `fake-it-<i>`.
fn instance_type(i: i64) -> InstanceType {
    let cpu = i + 1;
    let memory = gib(2 * cpu);
    let name: Arc<str> = Arc::from(format!("fake-it-{i}"));
    let price = 0.1 * cpu as f64 + 0.1 * memory as f64 / 1e9;
    let offering = |zone: &str, capacity_type| Offering {
        zone: Arc::from(zone),
        zone_id: None,
        capacity_type,
        price,
        available: true,
        reservation: None,
        partition: None,
    };
    let capacity = Resources {
        cpu: cpu * 1000,
        memory,
        pods: 10 * cpu,
        ..Resources::default()
    };
    let overhead = Overhead {
        kube_reserved: Resources::cpu_memory(100, mib(10)),
        ..Overhead::default()
    };
    let mut allocatable = capacity.clone();
    allocatable.sub(&overhead.total());
    InstanceType {
        labels: BTreeMap::from([
            (labels::ARCH, "amd64".to_string()),
            (labels::INSTANCE_TYPE, name.to_string()),
        ]),
        name,
        offerings: vec![
            offering("test-zone-1", CapacityType::Spot),
            offering("test-zone-2", CapacityType::Spot),
            offering("test-zone-1", CapacityType::OnDemand),
            offering("test-zone-2", CapacityType::OnDemand),
            offering("test-zone-3", CapacityType::OnDemand),
        ],
        capacity,
        overhead,
        allocatable,
    }
}

/// The NodePool `default`: every fake instance type, no limits, no taints, no DaemonSets.
fn nodepool() -> NodePoolTemplate {
    let mut requirements = Requirements::new();
    requirements.add_requirement(Requirement::new(
        labels::NODEPOOL,
        Operator::In,
        ["default"],
        None,
    ));
    NodePoolTemplate {
        name: Arc::from("default"),
        weight: 0,
        requirements,
        taints: Vec::new(),
        instance_types: Arc::new((0..INSTANCE_TYPES).map(instance_type).collect()),
        daemon_overhead: Resources::default(),
        daemon_host_ports: Vec::new(),
        limits: Vec::new(),
        nodes_limit: None,
        cache: Default::default(),
    }
}

/// `key In [value]` as a selector.
fn selector(key: &str, value: &str) -> Selector {
    Selector {
        expressions: vec![(key.to_string(), SelectorOp::In, vec![value.to_string()])],
    }
}

/// A term on pods of the pod's own namespace matching `key=value`.
fn term(topology_key: &str, key: &str, value: &str) -> AffinityTerm {
    AffinityTerm {
        topology_key: topology_key.to_string(),
        selector: selector(key, value),
        namespaces: Vec::new(),
        all_namespaces: false,
    }
}

/// Builds pods with distinct names and uids and random requests from one seeded PRNG.
struct PodFactory {
    /// Draws requests and label values.
    rng: SplitMix64,
    /// Pods built so far (names and uids derive from it).
    built: usize,
}

impl PodFactory {
    /// A factory seeded with [`SEED`].
    fn new() -> Self {
        Self {
            rng: SplitMix64(SEED),
            built: 0,
        }
    }

    /// A random `a..g` label value.
    fn label_value(&mut self) -> &'static str {
        self.rng.pick(&LABEL_VALUES)
    }

    /// A pod in `default` with `labels` and random requests, no constraints yet.
    fn pod(&mut self, labels: &[(&str, &str)]) -> Pod {
        let n = self.built;
        self.built += 1;
        let cpu = self.rng.pick(&CPU_CHOICES);
        let memory = mib(self.rng.pick(&MEMORY_CHOICES));
        Pod {
            namespace: Arc::from("default"),
            name: Arc::from(format!("pod-{n}")),
            uid: Arc::from(format!("00000000-0000-0000-0000-{n:012}")),
            labels: Arc::new(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            created: 0,
            owner_kind: None,
            annotations: Arc::default(),
            volumes: vec![],
            shape: Arc::new(PodShape {
                requests: Resources {
                    pods: 1,
                    ..Resources::cpu_memory(cpu, memory)
                },
                ..PodShape::default()
            }),
        }
    }

    /// Group 1: no constraints, a random `my-label`.
    fn generic(&mut self) -> Pod {
        let value = self.label_value();
        self.pod(&[("my-label", value)])
    }

    /// Groups 2 and 3: a random `my-label` and a `DoNotSchedule` spread (max skew 1) over
    /// `topology_key` of the pods with another random `my-label` value.
    fn spread(&mut self, topology_key: &str) -> Pod {
        let own = self.label_value();
        let selected = self.label_value();
        let mut pod = self.pod(&[("my-label", own)]);
        pod.spread.push(SpreadConstraint {
            topology_key: topology_key.to_string(),
            max_skew: 1,
            min_domains: None,
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            selector: selector("my-label", selected),
            honor_node_affinity: true,
            honor_node_taints: false,
        });
        pod
    }

    /// Group 4: required zonal affinity to the pod's own random `my-affininity` value (upstream's
    /// spelling), so every pod of a value lands in one zone.
    fn zone_self_affinity(&mut self) -> Pod {
        let value = self.label_value();
        let mut pod = self.pod(&[("my-affininity", value)]);
        pod.affinity
            .push(term(labels::ZONE, "my-affininity", value));
        pod
    }

    /// Group 5: `app: nginx` with required hostname anti-affinity to `app: nginx`, so one node
    /// per pod.
    fn hostname_anti_affinity(&mut self) -> Pod {
        let mut pod = self.pod(&[("app", "nginx")]);
        pod.anti_affinity
            .push(term(labels::HOSTNAME, "app", "nginx"));
        pod
    }

    /// A preference pod: `app: nginx`, preferred node affinity `zone In [test-zone-1]`
    /// (satisfiable), preferred zonal anti-affinity to `app: nginx` of weight 10 (unsatisfiable
    /// once zone 1 holds one) and preferred hostname anti-affinity of weight 1 (satisfiable).
    fn preference(&mut self) -> Pod {
        let mut pod = self.pod(&[("app", "nginx")]);
        pod.preferred_terms.push((
            1,
            vec![NodeSelectorExpression {
                key: labels::ZONE.to_string(),
                operator: Operator::In,
                values: vec![ZONE_1.to_string()],
            }],
        ));
        pod.preferred_anti_affinity
            .push((10, term(labels::ZONE, "app", "nginx")));
        pod.preferred_anti_affinity
            .push((1, term(labels::HOSTNAME, "app", "nginx")));
        pod
    }
}

/// Upstream's diverse mix: five equal groups of `n / 5`, the remainder generic.
fn diverse_pods(n: usize) -> Vec<Pod> {
    let mut f = PodFactory::new();
    let per_group = n / 5;
    let mut pods = Vec::with_capacity(n);
    pods.extend((0..per_group).map(|_| f.generic()));
    pods.extend((0..per_group).map(|_| f.spread(labels::ZONE)));
    pods.extend((0..per_group).map(|_| f.spread(labels::HOSTNAME)));
    pods.extend((0..per_group).map(|_| f.zone_self_affinity()));
    pods.extend((0..per_group).map(|_| f.hostname_anti_affinity()));
    pods.extend((pods.len()..n).map(|_| f.generic()));
    pods
}

/// The 4000 preference pods.
fn preference_pods(n: usize) -> Vec<Pod> {
    let mut f = PodFactory::new();
    (0..n).map(|_| f.preference()).collect()
}

/// The solver input for `pods` against the one NodePool.
fn input(pods: Vec<Pod>, options: Options) -> Input {
    Input {
        nodepools: vec![nodepool()],
        existing: Vec::new(),
        pods,
        options,
    }
}

/// Solves once, prints what the case produces and panics if any pod is left unscheduled.
fn report(case: &str, input: &Input) {
    let outcome = solve(input);
    let scheduled = outcome.placements.iter().flatten().count();
    eprintln!(
        "{case}: pods={} scheduled={scheduled} nodeclaims={} errors={}",
        input.pods.len(),
        outcome.nodeclaims.len(),
        outcome.errors.len()
    );
    if let Some((i, reason)) = outcome.errors.first() {
        panic!(
            "{case}: {} of {} pods failed to schedule; first: {}: {reason}",
            outcome.errors.len(),
            input.pods.len(),
            input.pods[*i].key()
        );
    }
}

/// `diverse/N` for every size of [`SIZES`].
fn bench_diverse(c: &mut Criterion) {
    let mut group = c.benchmark_group("diverse");
    for n in SIZES {
        let input = input(diverse_pods(n), Options::default());
        group.throughput(Throughput::Elements(n as u64));
        // Small cases take many timed solves; big ones ten flat samples of about one solve
        // each, so the whole run stays within a few minutes on two cores.
        let (samples, mode) = match n {
            0..500 => (20, SamplingMode::Auto),
            500..2000 => (20, SamplingMode::Flat),
            _ => (10, SamplingMode::Flat),
        };
        group.sample_size(samples);
        group.sampling_mode(mode);
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(3));
        let mut reported = false;
        group.bench_with_input(BenchmarkId::from_parameter(n), &input, |b, input| {
            if !reported {
                report(&format!("diverse/{n}"), input);
                reported = true;
            }
            b.iter(|| solve(black_box(input)));
        });
    }
    group.finish();
}

/// `preferences/respect` and `preferences/ignore` on the 4000 preference pods.
fn bench_preferences(c: &mut Criterion) {
    let mut group = c.benchmark_group("preferences");
    group.throughput(Throughput::Elements(PREFERENCE_PODS as u64));
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    let cases = [
        ("respect", Options::default()),
        (
            "ignore",
            Options {
                ignore_preferences: true,
                ..Options::default()
            },
        ),
    ];
    for (name, options) in cases {
        let input = input(preference_pods(PREFERENCE_PODS), options);
        let mut reported = false;
        group.bench_with_input(BenchmarkId::from_parameter(name), &input, |b, input| {
            if !reported {
                report(&format!("preferences/{name}"), input);
                reported = true;
            }
            b.iter(|| solve(black_box(input)));
        });
    }
    group.finish();
}

criterion_group!(benches, bench_diverse, bench_preferences);
criterion_main!(benches);
