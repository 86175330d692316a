#!/usr/bin/env python3
"""Cost benchmark: how close `simulate`'s planned fleet comes to a lower bound on its price.

Writes the manifests of one case (a workload on a NodePool), or runs every case through
`karpenter-rs simulate -o json` and prints one Markdown row per case: the fleet's $/h, its node
count, its dearest node, how that node compares with the median one, the largest ratio of a
node's price to the larger of the median and what its most demanding pod alone needs in the
node's zone (the issue's blast-radius target: at most 4x), and the ratio of the fleet's price
to a fractional lower bound computed here from the same bundled catalog.

Workloads (deterministic: every draw comes from a splitmix64 generator with seed 42):
  web     30 Deployments x 100 replicas, 250m-1 CPU and 256Mi-2Gi each
  batch   20 Deployments x 10 replicas, 2-16 CPU and 4-64Gi each
  memory  30 Deployments x 40 replicas, 250m-1 CPU and 4-16Gi each
  mixed   a third of each of the above
  constrained  30 Deployments x 83-84 replicas (2,500 pods) of 250m-1 CPU and 256Mi-2Gi, every third
          with a zonal spread (maxSkew 1, DoNotSchedule), every fifth other one with a hostname
          spread (maxSkew 1, DoNotSchedule), plus one Deployment of 100 replicas with required
          hostname anti-affinity to itself, which forces 100 nodes (2,600 pods)
NodePools: `narrow` (instance categories c, m, r of generation > 5) or `broad` (every x86 type),
`od` (on-demand) or `spot` (spot and on-demand), at the default ENI-limited pod density or with
kubelet `maxPods: 110` (`--max-pods 110`). `--daemonsets` adds a typical set of DaemonSets (aws-node,
kube-proxy, ebs-csi-node, a log shipper and a node exporter: 355m CPU, 500Mi and 5 pod slots on
every node), which makes small nodes dearer per pod.

Three lower bounds, all LP relaxations priced at the on-demand price (or the lowest spot price when
spot is allowed), with allocatable from the AL2023 overhead model of
`src/scheduling/instance_type.rs`; no fleet can cost less, whatever the packing:
  totals      the cheapest fractional mix of the NodePool's types whose allocatable CPU, memory and
              pod slots cover the workload's totals. On a broad pool it buys CPU on one type and
              memory on another for the same pods, so it is far below any real fleet there.
  assignment  pods grouped by shape are assigned fractionally to types they fit on, and each type
              bought fractionally to hold what is assigned to it, resource by resource (a pod's
              CPU and memory land on the same type; a pod with hostname anti-affinity to its own
              replicas takes a whole node). Tighter, still a relaxation.
  pattern     the node-pattern LP (`pattern_bound`): fractional counts of nodes, each holding a
              whole number of pods of each shape within its allocatable, at most one anti-affine
              or hostname-spread replica per node, and each zonal spread's floor(n / zones) pods
              in every zone at that zone's prices. The tightest; the ratio the issue's 1.10 target
              is judged against. Needs SciPy (`pip install scipy`, for HiGHS).

    python3 benches/gen-cost.py --workload web --pool broad --capacity od > /tmp/web.yaml
    target/release/karpenter-rs simulate -f /tmp/web.yaml
    python3 benches/gen-cost.py --run --binary target/release/karpenter-rs
"""

import argparse
import concurrent.futures
import contextlib
import importlib.util
import json
import math
import os
import re
import itertools
import statistics
import subprocess
import sys
import tempfile

CATALOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "catalog", "us-east-1.json")
MASK = (1 << 64) - 1

NODECLASS = """apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: c}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: c}}}}]
{kubelet}"""


class SplitMix:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def pick(self, items):
        return items[self.next() % len(items)]


# (name prefix, deployments, replicas, CPU choices in millicores, memory choices in MiB)
SHAPES = {
    "web": ("web", 30, 100, [250, 500, 750, 1000], [256, 512, 1024, 2048]),
    "batch": ("batch", 20, 10, [2000, 4000, 8000, 16000], [4096, 8192, 16384, 65536]),
    "memory": ("mem", 30, 40, [250, 500, 1000], [4096, 8192, 16384]),
}


# (name, CPU millicores, memory MiB) of the typical DaemonSets of `--daemonsets`.
DAEMONSETS = [
    ("aws-node", 25, 0),
    ("kube-proxy", 100, 0),
    ("ebs-csi-node", 30, 120),
    ("fluent-bit", 100, 200),
    ("node-exporter", 100, 180),
]


def deployments(workload):
    """(name, replicas, cpu millicores, memory MiB, constraint) per Deployment; constraint is None,
    "zone" or "hostname" (a DoNotSchedule spread of maxSkew 1 on that key), or "anti" (required
    hostname anti-affinity to its own replicas)."""
    rng = SplitMix(42)
    if workload == "constrained":
        _, _, _, cpus, mems = SHAPES["web"]
        out = []
        for d in range(30):
            constraint = "zone" if d % 3 == 0 else "hostname" if d % 5 == 0 else None
            replicas = 84 if d < 10 else 83
            out.append((f"app-{d}", replicas, rng.pick(cpus), rng.pick(mems), constraint))
        out.append(("solo", 100, rng.pick(cpus), rng.pick(mems), "anti"))
        return out
    parts = ["web", "batch", "memory"] if workload == "mixed" else [workload]
    out = []
    for part in parts:
        prefix, count, replicas, cpus, mems = SHAPES[part]
        if workload == "mixed":
            count = max(1, count // 3)
        for d in range(count):
            out.append((f"{prefix}-{d}", replicas, rng.pick(cpus), rng.pick(mems), None))
    return out


def nodepool(pool, capacity):
    reqs = ["        - {key: kubernetes.io/arch, operator: In, values: [amd64]}"]
    cts = "[on-demand]" if capacity == "od" else "[spot, on-demand]"
    reqs.append(f"        - {{key: karpenter.sh/capacity-type, operator: In, values: {cts}}}")
    if pool == "narrow":
        reqs.append(
            "        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}"
        )
        reqs.append(
            "        - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ['5']}"
        )
    return (
        """apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
"""
        + "\n".join(reqs)
        + "\n"
    )


def constraint_spec(name, constraint):
    """The pod-spec lines of a Deployment's topology constraint."""
    if constraint in ("zone", "hostname"):
        key = "topology.kubernetes.io/zone" if constraint == "zone" else "kubernetes.io/hostname"
        return f"""      topologySpreadConstraints:
        - {{maxSkew: 1, topologyKey: {key}, whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: {name}}}}}}}
"""
    if constraint == "anti":
        return f"""      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - {{topologyKey: kubernetes.io/hostname, labelSelector: {{matchLabels: {{app: {name}}}}}}}
"""
    return ""


def daemonset(name, cpu, mem):
    memory = f", memory: {mem}Mi" if mem else ""
    return f"""apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: {name}, namespace: kube-system}}
spec:
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      tolerations: [{{operator: Exists}}]
      containers:
        - name: c
          image: pause
          resources: {{requests: {{cpu: {cpu}m{memory}}}}}
"""


def deployment(name, replicas, cpu, mem, constraint):
    return f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
        - name: c
          image: pause
          resources: {{requests: {{cpu: {cpu}m, memory: {mem}Mi}}}}
{constraint_spec(name, constraint)}"""


def manifest(workload, pool, capacity, max_pods, daemonsets):
    kubelet = f"  kubelet: {{maxPods: {max_pods}}}\n" if max_pods else ""
    docs = [NODECLASS.format(kubelet=kubelet), nodepool(pool, capacity)]
    if daemonsets:
        docs += [daemonset(*d) for d in DAEMONSETS]
    docs += [deployment(*d) for d in deployments(workload)]
    return "---\n".join(docs)


def kube_reserved_cpu(vcpu):
    millis = vcpu * 1000
    bands = [(0, 1000, 0.06), (1000, 2000, 0.01), (2000, 4000, 0.005), (4000, math.inf, 0.0025)]
    return int(sum(max(min(millis, hi) - lo, 0) * rate for lo, hi, rate in bands))


def allowed_types(pool, capacity, max_pods, daemonsets, zone=None):
    """(price, allocatable cpu millicores, memory MiB, pods) of each type the NodePool allows, less
    the DaemonSets' requests when `daemonsets`; offered in `zone` and priced there, if given."""
    ds_cpu, ds_mem, ds_pods = (
        (sum(c for _, c, _ in DAEMONSETS), sum(m for _, _, m in DAEMONSETS), len(DAEMONSETS))
        if daemonsets
        else (0, 0, 0)
    )
    with open(CATALOG) as f:
        catalog = json.load(f)
    out = []
    for t in catalog["instanceTypes"]:
        if "x86_64" not in t["architectures"]:
            continue
        m = re.match(r"^([a-z]+)(\d+)", t["name"])
        if pool == "narrow" and not (m and m.group(1) in "cmr" and len(m.group(1)) == 1 and int(m.group(2)) > 5):
            continue
        offerings = [o for o in t["offerings"] if zone is None or o.get("zone") == zone]
        prices = []
        if "on-demand" in t["usageClasses"] and t.get("onDemandPrice") and offerings:
            prices.append(t["onDemandPrice"])
        if capacity == "spot" and "spot" in t["usageClasses"]:
            prices += [o["spotPrice"] for o in offerings if o.get("spotPrice")]
        if not prices:
            continue
        eni_pods = t["maxEnis"] * (t["ipv4PerEni"] - 1) + 2
        pods = (max_pods or eni_pods) - ds_pods
        mem = t["memoryMiB"] - math.ceil(t["memoryMiB"] * 0.075) - (11 * eni_pods + 255) - 100 - ds_mem
        cpu = t["vcpu"] * 1000 - kube_reserved_cpu(t["vcpu"]) - ds_cpu
        if cpu > 0 and mem > 0 and pods > 0:
            out.append((min(prices), cpu, mem, pods))
    return out


def solve3(rows, rhs):
    """The solution of a 3x3 linear system by Cramer's rule; None when singular."""
    def det(m):
        return (
            m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
        )

    d = det(rows)
    if abs(d) < 1e-18:
        return None
    out = []
    for k in range(3):
        m = [list(r) for r in rows]
        for i in range(3):
            m[i][k] = rhs[i]
        out.append(det(m) / d)
    return out


def lower_bound(workload, pool, capacity, max_pods, daemonsets):
    """The LP relaxation's optimum: the cheapest fractional mix of allowed types whose allocatable
    CPU, memory and pod slots cover the workload's totals. Solved through its dual, max y.T subject
    to y.v <= 1 for every type's resources per dollar v, y >= 0 (three variables): the optimum is at
    a vertex, and only types on the Pareto frontier of v can bound it."""
    per_dollar = {
        (c / p, m / p, n / p) for p, c, m, n in allowed_types(pool, capacity, max_pods, daemonsets)
    }
    frontier = [
        a for a in per_dollar if not any(b != a and all(b[k] >= a[k] for k in range(3)) for b in per_dollar)
    ]
    ds = deployments(workload)
    totals = (
        sum(r * c for _, r, c, _, _ in ds),
        sum(r * m for _, r, _, m, _ in ds),
        sum(r for _, r, _, _, _ in ds),
    )
    # Each constraint as (row, rhs): y.v <= 1 for a type, -y_k <= 0 for an axis.
    constraints = [(list(v), 1.0) for v in frontier]
    constraints += [([-1.0 if i == k else 0.0 for i in range(3)], 0.0) for k in range(3)]
    best = 0.0
    for trio in itertools.combinations(constraints, 3):
        y = solve3([c[0] for c in trio], [c[1] for c in trio])
        if y is None or min(y) < -1e-12:
            continue
        if all(sum(y[k] * v[k] for k in range(3)) <= 1 + 1e-9 for v in frontier):
            best = max(best, sum(y[k] * totals[k] for k in range(3)))
    return best


def pod_classes(workload):
    """(cpu millicores, memory MiB, pods, alone) per distinct pod shape of the workload; `alone`
    when its pods have required hostname anti-affinity to each other (at most one on a node)."""
    counts = {}
    for _, replicas, cpu, mem, constraint in deployments(workload):
        key = (cpu, mem, constraint == "anti")
        counts[key] = counts.get(key, 0) + replicas
    return [(cpu, mem, n, alone) for (cpu, mem, alone), n in sorted(counts.items())]


EPS = 1e-9



def best_fill(values, needs, room):
    """max sum(values[j] * z[j]) subject to sum(needs[j][r] * z[j]) <= room[r] for every r, z >= 0:
    the most a fractional node with `room` is worth filled with pods worth `values` (a tableau
    simplex with Bland's rule; a handful of rows). Returns (value, {j: z[j]})."""
    m, n = len(room), len(values)
    rows = [[needs[j][r] for j in range(n)] + [1.0 if k == r else 0.0 for k in range(m)] + [room[r]] for r in range(m)]
    cost = [-v for v in values] + [0.0] * (m + 1)
    basis = [n + r for r in range(m)]
    while True:
        enter = next((j for j in range(n + m) if cost[j] < -EPS), None)
        if enter is None:
            break
        ratios = [(rows[r][-1] / rows[r][enter], basis[r], r) for r in range(m) if rows[r][enter] > EPS]
        if not ratios:
            raise ValueError("unbounded fill: a pod shape needs none of any resource")
        _, _, out = min(ratios)
        pivot = rows[out][enter]
        rows[out] = [x / pivot for x in rows[out]]
        for r in range(m):
            if r != out and rows[r][enter] != 0.0:
                f = rows[r][enter]
                rows[r] = [x - f * y for x, y in zip(rows[r], rows[out])]
        f = cost[enter]
        cost = [x - f * y for x, y in zip(cost, rows[out])]
        basis[out] = enter
    fill = {basis[r]: rows[r][-1] for r in range(m) if basis[r] < n and rows[r][-1] > EPS}
    return cost[-1], fill


def undominated(types, classes):
    """The types some cheapest fractional fleet may need: a type is left out when another holds at
    least as much of every resource (CPU, memory, pod slots, nodes) per dollar and every pod shape
    the first one fits."""
    fits = []
    for _, cpu, mem, pods, _ in types:
        fits.append(sum(1 << k for k, (c, m, _, _) in enumerate(classes) if c <= cpu and m <= mem and pods >= 1))
    per_dollar = [tuple(r / t[0] for r in t[1:]) for t in types]
    keep = []
    for a, va in enumerate(per_dollar):
        if not fits[a]:
            continue
        dominated = any(
            b != a
            and fits[b] & fits[a] == fits[a]
            and all(vb[k] >= va[k] for k in range(len(va)))
            and (vb != va or fits[b] != fits[a] or b < a)
            for b, vb in enumerate(per_dollar)
        )
        if not dominated:
            keep.append(types[a] + (fits[a],))
    return keep


def assignment_bound(workload, pool, capacity, max_pods, daemonsets):
    """The fractional assignment LP's optimum: pods grouped by shape c (n_c pods), y[c,t] pods of c
    on type t (only types a pod of c fits on, DaemonSets included), x[t] fractional nodes of t,
    minimising sum(price_t * x_t) subject to sum_t y[c,t] = n_c and, per type and resource (CPU,
    memory, pod slots, and one node), sum_c y[c,t] * request[c] <= x_t * allocatable[t]. A pod
    with hostname anti-affinity to its own kind requests a whole node of the last resource (no
    node holds two), so the constrained workload's 100 such pods buy at least 100 nodes. A
    relaxation of the real packing (pods indivisible, nodes whole), so a lower bound on any fleet;
    unlike `lower_bound` it cannot buy CPU on one type and memory on another for the same pod.

    Solved by column generation: a column is one type filled fractionally with a mix of shapes
    (`best_fill`, at most four shapes per vertex), the master LP over the columns found so far is
    solved by a revised simplex (one row per shape, Bland's rule), and its duals price every type
    again until no column pays. The value returned is the duals' Lagrangian bound, scaled to be
    feasible for every type, so it is a valid lower bound even if the loop stopped early."""
    classes = pod_classes(workload)
    # Units close to 1: cores, GiB, pods.
    scaled = [
        (p, cpu / 1000, mem / 1024, pods, 1.0) for p, cpu, mem, pods in allowed_types(pool, capacity, max_pods, daemonsets)
    ]
    needs = [(c / 1000, m / 1024, 1.0, 1.0 if alone else 0.0) for c, m, _, alone in classes]
    types = undominated(scaled, needs)
    demand = [float(n) for _, _, n, _ in classes]
    k = len(classes)

    def most(t, c):
        return min(t[1 + r] / needs[c][r] for r in range(4) if needs[c][r] > 0)

    # The first basis: each shape alone on the type that holds it cheapest per pod.
    columns = []
    for c in range(k):
        best = min((t for t in types if t[5] >> c & 1), key=lambda t: t[0] / most(t, c))
        columns.append((best[0], {c: most(best, c)}))
    basis = list(range(k))
    inverse = [[1.0 / columns[c][1][c] if i == c else 0.0 for i in range(k)] for c in range(k)]
    level = [demand[c] / columns[c][1][c] for c in range(k)]
    for _ in range(10_000):
        # Master: pivot until no column has a negative reduced cost.
        while True:
            duals = [sum(columns[basis[i]][0] * inverse[i][j] for i in range(k)) for j in range(k)]
            in_basis = set(basis)
            enter = next(
                (
                    j
                    for j, (price, fill) in enumerate(columns)
                    if j not in in_basis and price - sum(duals[c] * z for c, z in fill.items()) < -EPS * price
                ),
                None,
            )
            if enter is None:
                break
            fill = columns[enter][1]
            d = [sum(inverse[i][c] * z for c, z in fill.items()) for i in range(k)]
            _, _, out = min((level[i] / d[i], basis[i], i) for i in range(k) if d[i] > EPS)
            pivot = d[out]
            inverse[out] = [x / pivot for x in inverse[out]]
            level[out] /= pivot
            for i in range(k):
                if i != out and d[i] != 0.0:
                    inverse[i] = [x - d[i] * y for x, y in zip(inverse[i], inverse[out])]
                    level[i] -= d[i] * level[out]
            basis[out] = enter
        # Pricing: the most each type is worth at these duals.
        worst, added = 1.0, 0
        for t in types:
            shapes = [c for c in range(k) if t[5] >> c & 1 and duals[c] > EPS]
            if not shapes:
                continue
            value, fill = best_fill([duals[c] for c in shapes], [needs[c] for c in shapes], t[1:5])
            worst = max(worst, value / t[0])
            if value > t[0] * (1 + 1e-7):
                columns.append((t[0], {shapes[j]: z for j, z in fill.items()}))
                added += 1
        if not added:
            break
    return sum(u * n for u, n in zip(duals, demand)) / worst


def catalog_zones():
    """Every zone the bundled catalog offers something in."""
    with open(CATALOG) as f:
        catalog = json.load(f)
    return sorted({o["zone"] for t in catalog["instanceTypes"] for o in t["offerings"] if o.get("zone")})


def no_larger_for_less(types):
    """The types of one zone no other beats: a type with at least as much CPU, memory and pod slots
    for at most the price holds every node pattern the first one holds, for no more."""
    keep = []
    for t in sorted(set(types), key=lambda t: (t[0], -t[1], -t[2], -t[3])):
        if not any(k[0] <= t[0] and k[1] >= t[1] and k[2] >= t[2] and k[3] >= t[3] for k in keep):
            keep.append(t)
    return keep


def pattern_classes(workload, types_by_zone):
    """(cpu millicores, memory MiB, zone or None, most per node, pods) of each pod class of the
    pattern bound; every constraint below holds in every valid plan of the workload:
      - a pod with required hostname anti-affinity to its own replicas: at most one per node;
      - a hostname spread of maxSkew 1 whose Deployment has fewer replicas than there are such
        pods (so more nodes than replicas, one of them empty of it): at most one per node;
      - a zonal spread of maxSkew 1 over the Z zones that offer a type the pod fits: at least
        floor(n / Z) of its pods in each zone, on a node of that zone; the rest anywhere.
    Classes of one shape, zone and kind merge (their per-node limits add up)."""
    deps = deployments(workload)
    alone = sum(n for _, n, _, _, constraint in deps if constraint == "anti")
    merged = {}

    def add(cpu, mem, zone, limited, most, pods):
        key = (cpu, mem, zone, limited)
        old_most, old_pods = merged.get(key, (0, 0))
        merged[key] = (old_most + most, old_pods + pods)

    for _, n, cpu, mem, constraint in deps:
        if constraint == "anti" or (constraint == "hostname" and alone > n):
            add(cpu, mem, None, True, 1, n)
        elif constraint == "zone" and None not in types_by_zone:
            domains = [
                z for z, types in types_by_zone.items() if any(cpu <= c and mem <= m for _, c, m, _ in types)
            ]
            each = n // len(domains)
            for zone in domains:
                add(cpu, mem, zone, False, 0, each)
            add(cpu, mem, None, False, 0, n - each * len(domains))
        else:
            add(cpu, mem, None, False, 0, n)
    return [
        (cpu, mem, zone, most if limited else pods, pods)
        for (cpu, mem, zone, limited), (most, pods) in sorted(merged.items(), key=str)
        if pods > 0
    ]


@contextlib.contextmanager
def quiet_stdout():
    """HiGHS' C++ core occasionally prints a debug line on file descriptor 1, into the table."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


# The pricing MIPs stop within this relative gap; their dual bound, not their solution, bounds a
# node's worth, so a gap costs iterations, never validity.
PRICING_GAP = 1e-3
# New columns per master solve: enough to converge in tens of rounds, few enough that rounds stay
# cheap.
COLUMNS_PER_ROUND = 20


def pattern_bound(workload, pool, capacity, max_pods, daemonsets):
    """The LP relaxation of the node-pattern formulation (Gilmore and Gomory's cutting-stock LP):
    a pattern is one node of a type in a zone with a whole number of pods of each class on it,
    within its allocatable (DaemonSets included) and the per-node limits of `pattern_classes`;
    minimise sum(price_p * x_p) over x_p >= 0 nodes of each pattern p subject to every class's
    pods covered. Any real fleet is such a set of nodes with whole x_p, so this is a lower bound
    on it. Unlike `assignment_bound` a small node cannot hold 2.6 pods, and the topology of the
    constrained workload is priced in: its anti-affine and hostname-spread pods at most one per
    node, its zonal spreads' pods in every zone at that zone's prices (us-east-1e lacks t3a, and
    spot prices differ by zone). Needs SciPy (HiGHS): `pip install scipy`.

    Column generation: the master LP (`linprog`) gives each class's dual value; each type in each
    zone is priced by a knapsack MIP (`milp`: the most valuable pattern) for the types whose
    single-resource bound (each resource alone, filled with the best value per unit of it) beats
    their price, the most promising first. The value returned is the duals' Lagrangian bound,
    sum(dual * pods) / max(1, max over types of worth / price), with each type's worth the MIP's
    dual bound or the single-resource bound: valid whether or not the loop converged."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, linprog, milp

    if any(constraint == "zone" for *_, constraint in deployments(workload)):
        zones = {z: allowed_types(pool, capacity, max_pods, daemonsets, z) for z in catalog_zones()}
    else:
        zones = {None: allowed_types(pool, capacity, max_pods, daemonsets)}
    types_by_zone = {z: no_larger_for_less(types) for z, types in zones.items() if types}
    classes = pattern_classes(workload, types_by_zone)
    k = len(classes)
    demand = np.array([pods for *_, pods in classes], dtype=float)
    need = np.array([[cpu, mem, 1.0] for cpu, mem, *_ in classes])
    most = np.array([m for *_, m, _ in classes], dtype=float)
    slots = []  # (price, room, classes that may go on it)
    for zone, types in types_by_zone.items():
        for price, cpu, mem, pods in types:
            fits = [
                c for c, (cc, cm, cz, _, _) in enumerate(classes) if cc <= cpu and cm <= mem and cz in (None, zone)
            ]
            if fits:
                slots.append((price, np.array([cpu, mem, pods], dtype=float), fits))
    eligible = np.zeros((len(slots), k), dtype=bool)
    for i, (_, _, fits) in enumerate(slots):
        eligible[i, fits] = True
    rooms = np.array([room for _, room, _ in slots])
    slot_prices = np.array([price for price, _, _ in slots])

    # The first columns: each class alone on the slot that holds it cheapest per pod.
    columns, prices = [], []
    for c in range(k):
        fill = np.minimum(np.floor(rooms / need[c]).min(axis=1), most[c])
        per_pod = np.where(eligible[:, c] & (fill >= 1), slot_prices / np.maximum(fill, 1), np.inf)
        best = int(per_pod.argmin())
        column = np.zeros(k)
        column[c] = fill[best]
        columns.append(column)
        prices.append(slot_prices[best])

    def best_pattern(i, duals):
        """(an upper bound on the worth of slot i's best pattern, the best pattern found or None)."""
        _, room, fits = slots[i]
        use = [c for c in fits if duals[c] > 0.0]
        result = milp(
            c=-duals[use],
            constraints=LinearConstraint(need[use].T, -np.inf, room),
            integrality=np.ones(len(use)),
            bounds=Bounds(0, most[use]),
            options={"mip_rel_gap": PRICING_GAP},
        )
        upper = -result.mip_dual_bound if result.mip_dual_bound is not None else math.inf
        if result.x is None:
            return upper, None
        pattern = np.zeros(k)
        pattern[use] = np.round(result.x)
        return upper, pattern if np.all(need.T @ pattern <= room) else None

    bound = 0.0
    with quiet_stdout():
        for _ in range(1000):
            master = linprog(prices, A_ub=-np.array(columns).T, b_ub=-demand, bounds=(0, None), method="highs")
            duals = np.maximum(-master.ineqlin.marginals, 0.0)
            best_per_unit = duals[:, None] / need
            worth = np.full(len(slots), np.inf)
            for r in range(3):
                worth = np.minimum(worth, rooms[:, r] * np.where(eligible, best_per_unit[None, :, r], 0.0).max(axis=1))
            ratio = worth / slot_prices
            added = 0
            for i in np.argsort(-ratio):
                if ratio[i] <= 1.0 or added == COLUMNS_PER_ROUND:
                    break
                upper, pattern = best_pattern(i, duals)
                ratio[i] = upper / slot_prices[i]
                if pattern is not None and duals @ pattern > slot_prices[i] * (1 + 1e-7):
                    columns.append(pattern)
                    prices.append(slot_prices[i])
                    added += 1
            # Every ratio bounds its slot's worth, priced exactly or not: the bound holds each round.
            bound = max(bound, float(duals @ demand) / max(1.0, float(ratio.max())))
            if not added:
                break
    return bound


def simulate(binary, path, settle, replacements=1):
    """`simulate -o json` of a manifest: (new NodeClaims' $/h, NodeClaims, unschedulable pods), and
    with `settle` the $/h of the fleet `--settle` leaves, consolidations launching at most
    `replacements` nodes each (`--consolidation-replacements`)."""
    cmd = [binary, "simulate", "-f", path, "-o", "json"]
    if settle:
        cmd += ["--settle", "--now", "2026-11-25T12:00:00Z"]
    if replacements > 1:
        cmd += ["--consolidation-replacements", str(replacements)]
    report = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    settled = report["cost"]["after"] if settle else None
    return report["cost"]["newPerHour"], report["nodeclaims"], report["unschedulable"], settled


def beyond_one_pods_need(claims, median, workload, pool, capacity, max_pods, daemonsets):
    """The blast-radius target, "no NodeClaim dearer than 4 times the plan's median
    unless a single pod needs it", measured against what the pods need: each NodeClaim's price
    over the larger of the median and the cheapest type of the pool (with the DaemonSets, priced
    as the bounds are) offered in the NodeClaim's zone that holds its most demanding pod alone:
    a zonal spread puts some pods in a zone that lacks the cheapest types (us-east-1e has no
    t3a), and what they need there is what that zone offers. Returns the largest such ratio,
    as "1.2x": the target is met when it is at most 4.0x. A 16-CPU batch pod that needs a $0.48/h
    node excuses a NodeClaim up to $1.91/h, not an r8i.96xlarge beside it. The raw "dearest /
    median" column beside it excuses nothing. `Solver::within_blast_radius` in
    src/scheduling/scheduler.rs checks the same under each NodeClaim's requirements (its zone
    among them): a NodeClaim is excused when one of its pods fits no type priced below a fourth
    of it."""
    requests = {name: (cpu, mem) for name, _, cpu, mem, _ in deployments(workload)}
    need = {}
    for zone in {c["zone"] for c in claims}:
        types = allowed_types(pool, capacity, max_pods, daemonsets, zone)
        for name, (cpu, mem) in requests.items():
            fitting = [price for price, c, m, n in types if cpu <= c and mem <= m and n >= 1]
            need[name, zone] = min(fitting, default=math.inf)

    def owner(pod):
        # "namespace/<deployment>-<replica set hash>-<suffix>"
        name = pod.split("/", 1)[-1]
        return next(d for d in requests if name.startswith(d + "-"))

    worst = max(
        c["price"] / max([median] + [need[owner(p), c["zone"]] for p in c["pods"]]) for c in claims
    )
    return f"{worst:.1f}x"


def run_case(binary, workload, pool, capacity, max_pods, daemonsets, baseline, settle, replacements, patterns):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(manifest(workload, pool, capacity, max_pods, daemonsets))
        path = f.name
    try:
        total, claims, unschedulable, settled = simulate(binary, path, settle)
        settled_many = simulate(binary, path, True, replacements)[3] if settle and replacements > 1 else None
        before = simulate(baseline, path, False)[0] if baseline else None
    finally:
        os.unlink(path)
    prices = [c["price"] for c in claims]
    largest = max(claims, key=lambda c: c["price"])
    median = statistics.median(prices)
    beyond_need = beyond_one_pods_need(claims, median, workload, pool, capacity, max_pods, daemonsets)
    totals = lower_bound(workload, pool, capacity, max_pods, daemonsets)
    bound = assignment_bound(workload, pool, capacity, max_pods, daemonsets)
    pattern = patterns.result()
    row = f"| {workload} | {pool} | {capacity} | {max_pods or 'ENI'} | {'yes' if daemonsets else 'no'} "
    if baseline:
        row += f"| {before:,.2f} | {before / pattern:.2f} "
    row += (
        f"| **{total:,.2f}** | {len(claims)} | {largest['instanceType']} ${largest['price']:.2f} "
        f"| {largest['price'] / median:.1f}x | {beyond_need} | {totals:,.2f} | {total / totals:.2f} | {bound:,.2f} "
        f"| {total / bound:.2f} | {pattern:,.2f} | **{total / pattern:.2f}** "
    )
    if baseline:
        row += f"| {total / before:.2f} "
    if settle:
        row += f"| {settled:,.2f} "
    if settled_many is not None:
        row += f"| {settled_many:,.2f} "
    return row + f"| {len(unschedulable)} |"


WORKLOADS = ["web", "batch", "memory", "mixed", "constrained"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=WORKLOADS, default="web")
    parser.add_argument("--pool", choices=["narrow", "broad"], default="broad")
    parser.add_argument("--capacity", choices=["od", "spot"], default="od")
    parser.add_argument("--max-pods", type=int, default=0, help="kubelet maxPods (0: ENI-limited)")
    parser.add_argument("--daemonsets", action="store_true", help="add a typical set of DaemonSets")
    parser.add_argument("--run", action="store_true", help="run every case and print a table")
    parser.add_argument("--binary", default="target/release/karpenter-rs")
    parser.add_argument("--baseline", help="another build to compare with, e.g. one sizing as upstream")
    parser.add_argument("--settle", action="store_true", help="also report the fleet after `simulate --settle`")
    parser.add_argument(
        "--replacements",
        type=int,
        default=1,
        help="with --settle, also settle with consolidations launching up to this many nodes each "
        "(`--consolidation-replacements`)",
    )
    parser.add_argument("--only", nargs="*", choices=WORKLOADS, help="run only these workloads")
    args = parser.parse_args()
    if not args.run:
        sys.stdout.write(manifest(args.workload, args.pool, args.capacity, args.max_pods, args.daemonsets))
        return
    # The pattern bound's solver, checked before any case runs rather than in a worker.
    if importlib.util.find_spec("scipy") is None:
        sys.exit("gen-cost.py --run: the pattern bound needs SciPy (HiGHS); install it with `pip install scipy`")
    header = "| workload | pool | capacity | max pods | DaemonSets "
    if args.baseline:
        header += "| baseline $/h | baseline / pattern bound "
    header += (
        "| fleet $/h | nodes | dearest node | dearest / median | dearest / max(median, its largest pod's need) | totals bound $/h | fleet / totals bound "
        "| assignment bound $/h | fleet / assignment bound | pattern bound $/h | fleet / pattern bound "
    )
    if args.baseline:
        header += "| fleet / baseline "
    if args.settle:
        header += "| settled $/h "
    if args.settle and args.replacements > 1:
        header += f"| settled, {args.replacements} replacements $/h "
    header += "| unschedulable |"
    print(header)
    print("|" + "|".join("---" if k < 5 else "---:" for k in range(header.count("|") - 1)) + "|")
    cases = [
        (workload, pool, capacity, max_pods, daemonsets)
        for workload in args.only or WORKLOADS
        for pool in ["narrow", "broad"]
        for capacity in ["od", "spot"]
        for max_pods, daemonsets in [(0, False), (110, False), (0, True)]
    ]
    # The pattern bounds (seconds to a minute each) do not depend on the binary: all of them are
    # computed beside the `simulate` runs.
    with concurrent.futures.ProcessPoolExecutor() as workers:
        patterns = [workers.submit(pattern_bound, *case) for case in cases]
        for case, pattern in zip(cases, patterns):
            print(
                run_case(args.binary, *case, args.baseline, args.settle, args.replacements, pattern),
                flush=True,
            )


if __name__ == "__main__":
    main()
