#!/usr/bin/env python3
"""Writes manifests reproducing the scheduling benchmark's "diverse" pod mix for `simulate`.

The output (YAML on stdout) holds a NodePool `default` without limits, its EC2NodeClass, and one
Deployment per distinct pod spec of `diverse_pods(N)` in benches/scheduling.rs: the same splitmix64
stream, seed and draw order, so the pods have the same labels, constraints and requests as the
benchmark's (names differ, and every Deployment adds its own `pod-template-hash` label).

    python3 benches/gen-diverse-manifest.py --pods 20000 > /tmp/diverse-20000.yaml
    /usr/bin/time -v target/release/karpenter-rs simulate -f /tmp/diverse-20000.yaml -o json
"""

import argparse
import sys
from collections import Counter

MASK = (1 << 64) - 1
CPU_CHOICES = [100, 250, 500, 1000, 1500]
MEMORY_CHOICES = [100, 256, 512, 1024, 2048, 4096]
LABEL_VALUES = ["a", "b", "c", "d", "e", "f", "g"]
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


class SplitMix64:
    """The benchmark's PRNG, bit for bit."""

    def __init__(self, seed):
        self.state = seed & MASK

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def pick(self, items):
        return items[self.next_u64() % len(items)]


def diverse_specs(n, seed):
    """The pod specs of diverse_pods(n), as hashable tuples, in the benchmark's draw order."""
    rng = SplitMix64(seed)

    def requests():
        return (rng.pick(CPU_CHOICES), rng.pick(MEMORY_CHOICES))

    def generic():
        value = rng.pick(LABEL_VALUES)
        return ("generic", (("my-label", value),), None) + requests()

    def spread(key):
        own = rng.pick(LABEL_VALUES)
        selected = rng.pick(LABEL_VALUES)
        return ("spread", (("my-label", own),), (key, selected)) + requests()

    def affinity():
        value = rng.pick(LABEL_VALUES)
        return ("affinity", (("my-affininity", value),), (ZONE, value)) + requests()

    def anti_affinity():
        return ("anti", (("app", "nginx"),), (HOSTNAME, "nginx")) + requests()

    per_group = n // 5
    specs = [generic() for _ in range(per_group)]
    specs += [spread(ZONE) for _ in range(per_group)]
    specs += [spread(HOSTNAME) for _ in range(per_group)]
    specs += [affinity() for _ in range(per_group)]
    specs += [anti_affinity() for _ in range(per_group)]
    specs += [generic() for _ in range(n - len(specs))]
    return specs


def pod_spec(kind, constraint, cpu, memory):
    """The pod template spec of one distinct pod."""
    spec = {
        "containers": [
            {
                "name": "app",
                "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}},
            }
        ]
    }
    if kind == "spread":
        key, selected = constraint
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"my-label": selected}},
            }
        ]
    elif kind == "affinity":
        key, value = constraint
        spec["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": key, "labelSelector": {"matchLabels": {"my-affininity": value}}}
                ]
            }
        }
    elif kind == "anti":
        key, value = constraint
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": key, "labelSelector": {"matchLabels": {"app": value}}}
                ]
            }
        }
    return spec


def documents(n, seed):
    """The NodePool, the EC2NodeClass and one Deployment per distinct pod spec."""
    yield {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["spot", "on-demand"],
                        },
                    ],
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": "default",
                    },
                }
            }
        },
    }
    yield {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-bench",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
        },
    }
    counts = Counter(diverse_specs(n, seed))
    for i, ((kind, labels, constraint, cpu, memory), replicas) in enumerate(sorted(counts.items())):
        labels = dict(labels)
        yield {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": f"{kind}-{i:05d}", "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": pod_spec(kind, constraint, cpu, memory),
                },
            },
        }


def scalar(value):
    """A YAML scalar: integers bare, strings double-quoted (every string here is plain ASCII)."""
    if isinstance(value, int):
        return str(value)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def emit(value, indent, out):
    """Block-style YAML for dicts and lists of dicts/scalars."""
    pad = "  " * indent
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                out.append(f"{pad}{key}:")
                emit(item, indent + 1, out)
            elif isinstance(item, (dict, list)):
                out.append(f"{pad}{key}: {'{}' if isinstance(item, dict) else '[]'}")
            else:
                out.append(f"{pad}{key}: {scalar(item)}")
    else:
        for item in value:
            if isinstance(item, dict):
                lines = []
                emit(item, indent + 1, lines)
                first = lines[0].lstrip()
                out.append(f"{pad}- {first}")
                out.extend(lines[1:])
            else:
                out.append(f"{pad}- {scalar(item)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20000, help="number of pods (default 20000)")
    parser.add_argument("--seed", type=int, default=42, help="PRNG seed (default 42, as the bench)")
    args = parser.parse_args()
    if args.pods < 0:
        parser.error("--pods must not be negative")
    out = []
    for doc in documents(args.pods, args.seed):
        out.append("---")
        emit(doc, 0, out)
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
