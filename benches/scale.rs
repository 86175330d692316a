//! The running controller at cluster scale, end to end: `karpenter-rs run --cloud-provider
//! simulated` (its stand-in kubelet registers the Nodes) against a real API server and
//! kube-scheduler, driven with thousands of pending pods from Deployments of mixed shapes, some
//! with zone spread and hostname anti-affinity.
//!
//! Not a criterion benchmark and not part of the test run: `hack/scale-bench.sh` starts a control
//! plane, builds the release binary and runs this with `KUBECONFIG` set. It prints one Markdown
//! table row per phase (the table in benches/README.md): seconds from the Deployments being
//! created until every NodeClaim exists, every Node registered and every pod bound; NodeClaims
//! against what `simulate` plans for the same manifests, and the fleet's hourly cost as the
//! controller prices it (`karpenter_nodepools_cost_total`) against the plan's; the controller's
//! peak and settled RSS and CPU seconds (from /proc); the API requests it made, by method (from
//! its own `rest_client_requests_total`), and those refused as throttled; and, per phase, every
//! client's requests by verb and kind as the API servers count them (`apiserver_request_total`
//! of the core server and of the CRD server, `CRD_KUBECONFIG`).
//!
//! The phases: the pods arrive (provision), the Deployments scale to zero and back, a drift roll
//! of the whole fleet (a new NodePool template label: every NodeClaim replaced within the
//! disruption budget), and 60 s idle.
//!
//! `SCALE_PODS` sets the pod count (default 5000). `SCALE_MODE=burst` runs one other phase
//! instead: every pod already pending when the NodePool appears, so the provisioner plans them
//! all in one batch (see [`burst`]). `SCALE_MODE=roll` skips scaling to zero and back: the pods
//! arrive, then the drift roll.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use karpenter_rs::apis::{EC2NodeClass, NodeClaim, NodePool};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const NAMESPACE: &str = "scale-bench";

/// `scheduler` names a scheduler that does not run, so kube-scheduler leaves the pods to the
/// bench (the burst mode marks them unschedulable itself).
fn deployments(pods: usize, scheduler: Option<&str>) -> Vec<Value> {
    let count = 50;
    let shapes = [
        ("250m", "256Mi"),
        ("500m", "512Mi"),
        ("1", "1Gi"),
        ("500m", "2Gi"),
        ("2", "1Gi"),
    ];
    (0..count)
        .map(|i| {
            let name = format!("web-{i:02}");
            let (cpu, memory) = shapes[i % shapes.len()];
            // Two Deployments of 20 with hostname anti-affinity force 20 nodes each; the rest
            // share the remaining pods.
            let anti = i < 2;
            let replicas = if anti {
                20
            } else {
                (pods.saturating_sub(40)) / (count - 2)
            };
            let mut spec = json!({
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
            });
            if i % 5 == 4 {
                spec["topologySpreadConstraints"] = json!([{
                    "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": name}},
                }]);
            }
            if let Some(scheduler) = scheduler {
                spec["schedulerName"] = json!(scheduler);
            }
            if anti {
                spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": name}}}
                ]}});
            }
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
                },
            })
        })
        .collect()
}

fn nodeclass() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-bench",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
        },
    })
}

fn nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["5"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            ],
        }}},
    })
}

/// `VmHWM` (peak) and `VmRSS` of a process, in MiB.
fn memory_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(f64::NAN, |kib| kib / 1024.0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// User + system CPU seconds of a process (clock ticks of 1/100 s, as Linux reports them).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which ends with the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Requests an API server answered, from its `apiserver_request_total`: by `VERB resource`
/// (`resource/subresource` where there is one), and how many it refused as throttled (429).
/// Every client's requests count, not only the controller's. `kubeconfig` names the server
/// (the core one, or the CRD server that serves Karpenter's kinds behind it).
fn apiserver_requests(kubeconfig: &str) -> (BTreeMap<String, f64>, f64) {
    let out = Command::new("kubectl")
        .args(["--kubeconfig", kubeconfig, "get", "--raw", "/metrics"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    let mut by_kind = BTreeMap::new();
    let mut throttled = 0.0;
    for line in out
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let label = |name: &str| {
            line.split(&format!("{name}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("")
                .to_string()
        };
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let (resource, sub) = (label("resource"), label("subresource"));
        let kind = if sub.is_empty() {
            resource
        } else {
            format!("{resource}/{sub}")
        };
        *by_kind
            .entry(format!("{} {kind}", label("verb")))
            .or_insert(0.0) += value;
        if label("code") == "429" {
            throttled += value;
        }
    }
    (by_kind, throttled)
}

/// What the API servers answered since `before`, by `VERB resource`, largest first (zero
/// differences left out), and the throttled (429) difference.
fn requests_since(
    before: &(BTreeMap<String, f64>, f64),
    now: &(BTreeMap<String, f64>, f64),
) -> (Vec<(String, f64)>, f64) {
    let mut diff: Vec<(String, f64)> = now
        .0
        .iter()
        .map(|(k, v)| (k.clone(), v - before.0.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v >= 1.0)
        .collect();
    diff.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    (diff, now.1 - before.1)
}

/// Both API servers' request counters: the core server's and the CRD server's (Karpenter's own
/// kinds), merged.
fn cluster_requests(kubeconfigs: &[String]) -> (BTreeMap<String, f64>, f64) {
    let mut all = (BTreeMap::new(), 0.0);
    for k in kubeconfigs {
        let (by_kind, throttled) = apiserver_requests(k);
        for (kind, v) in by_kind {
            *all.0.entry(kind).or_insert(0.0) += v;
        }
        all.1 += throttled;
    }
    all
}

/// The controller's own `/metrics` exposition (empty when it does not answer).
fn scrape(metrics_port: u16) -> String {
    Command::new("curl")
        .args(["-s", &format!("http://127.0.0.1:{metrics_port}/metrics")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default()
}

/// The fleet's hourly cost as the controller prices it: `karpenter_nodepools_cost_total`
/// summed over the NodePools, to set beside the cost of `simulate`'s plan.
fn fleet_cost(metrics_port: u16) -> f64 {
    scrape(metrics_port)
        .lines()
        .filter(|l| l.starts_with("karpenter_nodepools_cost_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The controller's `rest_client_requests_total`, summed by method (and `429` for the
/// requests the API server refused as throttled).
fn requests_by_method(metrics_port: u16) -> BTreeMap<String, f64> {
    let out = scrape(metrics_port);
    let mut by_method = BTreeMap::new();
    for line in out
        .lines()
        .filter(|l| l.starts_with("rest_client_requests_total{"))
    {
        let method = line
            .split("method=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("?")
            .to_string();
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        if line.contains("code=\"429\"") {
            *by_method.entry("429".to_string()).or_insert(0.0) += value;
        }
        *by_method.entry(method).or_insert(0.0) += value;
    }
    by_method
}

async fn apply(client: &Client, objects: &[Value]) {
    for o in objects {
        let kind = o["kind"].as_str().unwrap_or_default();
        let result = match kind {
            "Deployment" => Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(o.clone()).expect("deployment"),
                )
                .await
                .map(|_| ()),
            "NodePool" => Api::<NodePool>::all(client.clone())
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(o.clone()).expect("nodepool"),
                )
                .await
                .map(|_| ()),
            "EC2NodeClass" => Api::<EC2NodeClass>::all(client.clone())
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(o.clone()).expect("nodeclass"),
                )
                .await
                .map(|_| ()),
            other => panic!("unexpected kind {other}"),
        };
        result.unwrap_or_else(|e| panic!("creating {kind}: {e}"));
    }
}

/// What one poll sees.
struct Seen {
    /// The NodeClaims' names: a drift roll is over when none of the old ones is left.
    claim_names: BTreeSet<String>,
    nodes: usize,
    pods: usize,
    bound: usize,
    /// Pods kube-scheduler has bound or found no room for: the provisioner only plans for those.
    judged: usize,
}

async fn look(client: &Client) -> Seen {
    let claim_names: BTreeSet<String> = Api::<NodeClaim>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map(|l| l.items.iter().map(ResourceExt::name_any).collect())
        .unwrap_or_default();
    let nodes = Api::<Node>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map_or(0, |l| l.items.len());
    let pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let bound = pods
        .iter()
        .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
        .count();
    let unschedulable = pods
        .iter()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter().any(|c| {
                        c.type_ == "PodScheduled"
                            && c.status == "False"
                            && c.reason.as_deref() == Some("Unschedulable")
                    })
                })
        })
        .count();
    Seen {
        claim_names,
        nodes,
        pods: pods.len(),
        bound,
        judged: bound + unschedulable,
    }
}

/// Seconds from the start of a phase to each milestone.
struct Timings {
    /// Every pod judged by kube-scheduler (bound, or marked unschedulable): the provisioner's
    /// last batch can start no earlier. `None` where the phase starts with every pod bound or
    /// none left (scale to zero, the drift roll, idle) or kube-scheduler never sees them (burst).
    judged: Option<f64>,
    /// The last change to the set of NodeClaims (one created or deleted).
    claims: f64,
    /// Every Node registered.
    nodes: f64,
    /// Every pod bound (none in the burst mode, where nothing binds them).
    bound: Option<f64>,
}

/// Runs one phase: waits until `pods` pods are all bound, no NodeClaim of `replaced` is left
/// and the set of NodeClaims has stood still for 20 s, and returns the timings and the
/// NodeClaim count.
async fn settle(
    client: &Client,
    pods: usize,
    replaced: &BTreeSet<String>,
    start: Instant,
) -> (Timings, usize) {
    let (mut last_claims, mut claims_at, mut nodes_at) = (None, 0.0, 0.0);
    let mut judged_at = None;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let seen = look(client).await;
        let now = start.elapsed().as_secs_f64();
        if judged_at.is_none() && seen.pods == pods && seen.judged == pods {
            judged_at = Some(now);
        }
        let left = seen.claim_names.intersection(replaced).count();
        if last_claims.as_ref() != Some(&seen.claim_names) {
            claims_at = now;
        }
        // The moment the Nodes caught up with the NodeClaims (again, if more claims came).
        if seen.nodes < seen.claim_names.len() {
            nodes_at = 0.0;
        } else if nodes_at == 0.0 {
            nodes_at = now;
        }
        eprintln!(
            "  {now:7.1}s  nodeclaims {:5}  nodes {:5}  pods {:6}  bound {:6}  old nodeclaims {left:5}",
            seen.claim_names.len(),
            seen.nodes,
            seen.pods,
            seen.bound
        );
        if seen.pods == pods && seen.bound == pods && left == 0 && now - claims_at > 20.0 {
            let timings = Timings {
                judged: Some(judged_at.unwrap_or(now)),
                claims: claims_at,
                nodes: nodes_at,
                bound: Some(now),
            };
            return (timings, seen.claim_names.len());
        }
        last_claims = Some(seen.claim_names);
        assert!(now < 3600.0, "the phase did not settle within an hour");
    }
}

/// Sets every Deployment's replicas to what `replicas` says for its manifest.
async fn scale(api: &Api<Deployment>, deployments: &[Value], replicas: impl Fn(&Value) -> Value) {
    for d in deployments {
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas(d)}})),
        )
        .await
        .unwrap_or_else(|e| panic!("scaling {name}: {e}"));
    }
}

/// The scheduler the burst mode's pods name: none runs under it, so kube-scheduler leaves them
/// alone and the bench marks them unschedulable itself.
const BURST_SCHEDULER: &str = "scale-bench-burst";

/// The burst mode: every pod is pending and marked unschedulable before the NodePool exists, so
/// the provisioner's first batch holds all of them. Measures the issue's target directly: from
/// the NodePool's creation to the last NodeClaim (the batch window included), and to every
/// Node registered. Nothing binds the pods (their scheduler does not run).
async fn burst(client: &Client, objects: &[Value], pods: usize) -> (Timings, usize) {
    apply(client, &objects[..1]).await;
    apply(client, &objects[2..]).await;
    let start = Instant::now();
    while look(client).await.pods < pods {
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            start.elapsed() < Duration::from_secs(1800),
            "the Deployments did not create their pods"
        );
    }
    let api = Api::<Pod>::namespaced(client.clone(), NAMESPACE);
    let names: Vec<String> = api
        .list_metadata(&ListParams::default())
        .await
        .expect("list pods")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let status = json!({"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/0 nodes are available (scale bench)",
    }]}});
    futures::stream::iter(names)
        .for_each_concurrent(32, |name| {
            let (api, status) = (api.clone(), status.clone());
            async move {
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                    .await
                    .unwrap_or_else(|e| panic!("marking pod {name} unschedulable: {e}"));
            }
        })
        .await;
    eprintln!(
        "{pods} pods created and marked unschedulable in {:.1}s",
        start.elapsed().as_secs_f64()
    );

    let start = Instant::now();
    apply(client, &objects[1..2]).await;
    let (mut last_claims, mut claims_at, mut nodes_at) = (0, 0.0, None);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let seen = look(client).await;
        let now = start.elapsed().as_secs_f64();
        let claims = seen.claim_names.len();
        if claims != last_claims {
            last_claims = claims;
            claims_at = now;
            nodes_at = None;
        }
        if claims > 0 && seen.nodes >= claims && nodes_at.is_none() {
            nodes_at = Some(now);
        }
        eprintln!(
            "  {now:7.1}s  nodeclaims {:5}  nodes {:5}",
            claims, seen.nodes
        );
        if let Some(nodes) = nodes_at.filter(|_| now - claims_at > 20.0) {
            let timings = Timings {
                judged: None,
                claims: claims_at,
                nodes,
                bound: None,
            };
            return (timings, claims);
        }
        assert!(now < 1800.0, "the burst did not settle within 30 minutes");
    }
}

/// The controller under test, started in a process group of its own, which a
/// `KARPENTER_RS_BIN` wrapper that forks (heaptrack, say) shares with its children. Dropping it
/// (the bench's end, a panic, or a signal: see [`main`]) stops the whole group, so no controller
/// outlives the bench, holding its ports against the next run.
struct Controller(Child);

impl Controller {
    fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        // The group's ID is the leader's PID.
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        // A wrapper may need a moment to write out what it recorded.
        for _ in 0..100 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

/// Runs the bench until it ends or the process is told to stop (SIGINT, SIGTERM, SIGHUP): then
/// the bench is dropped where it stands, and the controller it started with it.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    let mut hangup = signal(SignalKind::hangup()).expect("a SIGHUP handler");
    tokio::select! {
        () = bench() => {}
        _ = tokio::signal::ctrl_c() => eprintln!("SIGINT: the controller is stopped"),
        _ = term.recv() => eprintln!("SIGTERM: the controller is stopped"),
        _ = hangup.recv() => eprintln!("SIGHUP: the controller is stopped"),
    }
}

/// One run: the phases of the module's doc, then the results on stdout.
async fn bench() {
    // `cargo bench` passes --bench; only the environment configures this run.
    let pods: usize = std::env::var("SCALE_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let binary = std::env::var("KARPENTER_RS_BIN").map_or_else(
        |_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release/karpenter-rs"),
        PathBuf::from,
    );
    let client = Client::try_default()
        .await
        .expect("KUBECONFIG of a control plane with the CRDs (hack/scale-bench.sh starts one)");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).expect("ns"),
        )
        .await;

    // What simulate plans for the same manifests.
    let mut objects = vec![nodeclass(), nodepool()];
    let mode = std::env::var("SCALE_MODE").unwrap_or_default();
    let (burst_mode, roll_mode) = (mode == "burst", mode == "roll");
    if burst_mode {
        // The pods never bind, so their nodes look empty: consolidating them would only churn.
        objects[1]["spec"]["disruption"] = json!({"consolidateAfter": "Never"});
    }
    objects.extend(deployments(pods, burst_mode.then_some(BURST_SCHEDULER)));
    let planned = {
        let file = std::env::temp_dir().join("karpenter-rs-scale-bench.json");
        std::fs::write(
            &file,
            serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": objects}))
                .expect("manifests"),
        )
        .expect("write manifests");
        let out = Command::new(&binary)
            .args(["simulate", "-o", "json", "-f"])
            .arg(&file)
            .output()
            .expect("simulate runs");
        let report: Value = serde_json::from_slice(&out.stdout).expect("simulate JSON");
        (
            report["nodeclaims"].as_array().map_or(0, Vec::len),
            report["cost"]["perHour"].as_f64().unwrap_or(f64::NAN),
        )
    };
    let (planned, planned_cost) = planned;
    let total_pods: usize = objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .map(|o| o["spec"]["replicas"].as_u64().unwrap_or(0) as usize)
        .sum();

    let metrics_port = 18080;
    let log = std::fs::File::create(std::env::temp_dir().join("karpenter-rs-scale-bench.log"))
        .expect("log");
    let controller = Controller(
        Command::new(&binary)
            .args([
                "run",
                "--cloud-provider",
                "simulated",
                "--disable-leader-election=true",
            ])
            .args(["--metrics-port", &metrics_port.to_string()])
            .args(["--health-probe-port", "18081"])
            .env("LOG_LEVEL", "error")
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .process_group(0)
            .spawn()
            .expect("start karpenter-rs run"),
    );
    let pid = controller.id();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (_, idle_rss) = memory_mib(pid);

    // Karpenter's kinds are served by the CRD server behind the core one: both count requests.
    let kubeconfigs: Vec<String> = ["KUBECONFIG", "CRD_KUBECONFIG"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .collect();
    let mut rows = Vec::new();
    let mut breakdowns = Vec::new();
    // What a phase cost: the controller's requests by method (and 429s), and every client's
    // requests by kind and verb as the API servers counted them.
    struct Before {
        cpu: f64,
        controller: BTreeMap<String, f64>,
        cluster: (BTreeMap<String, f64>, f64),
    }
    let before = || Before {
        cpu: cpu_seconds(pid),
        controller: requests_by_method(metrics_port),
        cluster: cluster_requests(&kubeconfigs),
    };
    let mut report = |phase: &str, pods: usize, claims: usize, t: &Timings, b: &Before| {
        let (peak, rss) = memory_mib(pid);
        let cpu = cpu_seconds(pid) - b.cpu;
        let requests = requests_by_method(metrics_port)
            .into_iter()
            .map(|(m, n)| (m.clone(), n - b.controller.get(&m).copied().unwrap_or(0.0)))
            .filter(|(_, n)| *n >= 1.0)
            .map(|(m, n)| format!("{m} {n:.0}"))
            .collect::<Vec<_>>()
            .join(", ");
        let (by_kind, throttled) = requests_since(&b.cluster, &cluster_requests(&kubeconfigs));
        let cost = fleet_cost(metrics_port);
        let seconds = |s: Option<f64>| s.map_or("–".to_string(), |s| format!("{s:.1} s"));
        let row = format!(
            "| {phase} | {pods} | {claims} ({planned}) | {cost:.2} ({planned_cost:.2}) | {} | {:.1} s | {:.1} s | {} | {peak:.0} | {rss:.0} | {cpu:.1} | {requests} | {throttled:.0} |",
            seconds(t.judged),
            t.claims,
            t.nodes,
            seconds(t.bound)
        );
        // In the progress log too, so a run stopped early keeps its finished phases.
        eprintln!("{row}");
        rows.push(row);
        breakdowns.push(format!(
            "* {phase}: {}",
            by_kind
                .iter()
                .take(16)
                .map(|(k, n)| format!("{k} {n:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };

    if burst_mode {
        let b = before();
        let (t, claims) = burst(&client, &objects, total_pods).await;
        report("burst", total_pods, claims, &t, &b);
    } else {
        // Phase 1: the pods arrive.
        apply(&client, &objects[..2]).await;
        let b = before();
        let start = Instant::now();
        apply(&client, &objects[2..]).await;
        eprintln!(
            "{total_pods} pods in {} Deployments created in {:.1}s",
            objects.len() - 2,
            start.elapsed().as_secs_f64()
        );
        let (t, claims) = settle(&client, total_pods, &BTreeSet::new(), start).await;
        report("provision", total_pods, claims, &t, &b);

        // Phase 2: scale to zero, then back (not in the roll mode, which goes straight to the
        // drift roll).
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
        if !roll_mode {
            let b = before();
            scale(&deployments, &objects[2..], |_| json!(0)).await;
            let start = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let seen = look(&client).await;
                eprintln!(
                    "  {:7.1}s  nodeclaims {:5}  nodes {:5}  pods {:6}",
                    start.elapsed().as_secs_f64(),
                    seen.claim_names.len(),
                    seen.nodes,
                    seen.pods
                );
                if seen.claim_names.is_empty() && seen.nodes == 0 {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(3600),
                    "scale-down did not finish"
                );
            }
            let emptied = start.elapsed().as_secs_f64();
            let t = Timings {
                judged: None,
                claims: emptied,
                nodes: emptied,
                bound: Some(emptied),
            };
            report("scale to zero", 0, 0, &t, &b);
            let b = before();
            let start = Instant::now();
            scale(&deployments, &objects[2..], |d| {
                d["spec"]["replicas"].clone()
            })
            .await;
            let (t, claims) = settle(&client, total_pods, &BTreeSet::new(), start).await;
            report("scale back", total_pods, claims, &t, &b);
        }

        // Phase 3: a drift roll. A new label in the NodePool's template changes its hash, so
        // every NodeClaim is drifted and replaced within the NodePool's disruption budget (10%
        // of the nodes at a time by default) while the Deployments' evicted pods move.
        let b = before();
        let old = look(&client).await.claim_names;
        let start = Instant::now();
        Api::<NodePool>::all(client.clone())
            .patch(
                "default",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"scale-bench/roll": "1"}}}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("relabelling the NodePool: {e}"));
        let (mut t, claims) = settle(&client, total_pods, &old, start).await;
        // Every pod was bound when the roll began: "all judged" would be the first poll.
        t.judged = None;
        report("drift roll", total_pods, claims, &t, &b);

        // Idle: a quiet cluster should cost next to nothing.
        let b = before();
        tokio::time::sleep(Duration::from_secs(60)).await;
        let t = Timings {
            judged: None,
            claims: 0.0,
            nodes: 0.0,
            bound: Some(60.0),
        };
        report("idle 60 s", total_pods, claims, &t, &b);
    }
    eprintln!("RSS {idle_rss:.0} MiB before the first pod");

    println!(
        "| phase | pods | NodeClaims (simulate) | fleet $/h (simulate) | all judged | all NodeClaims | all Nodes | all bound | peak RSS MiB | RSS MiB | CPU s | controller requests | throttled (429) |"
    );
    println!(
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"
    );
    for row in &rows {
        println!("{row}");
    }
    println!();
    println!("API server requests by verb and kind (every client):");
    println!();
    for b in &breakdowns {
        println!("{b}");
    }

    drop(controller);
    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    for claim in Api::<NodeClaim>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let _ = Api::<NodeClaim>::all(client.clone())
            .delete(&claim.name_any(), &DeleteParams::default())
            .await;
    }
}
