#!/usr/bin/env python3
"""Writes manifests of many NodePools that each carry their own taint, for `simulate --disruption`.

Each NodePool `pool-P` taints its nodes `team=pool-P:NoSchedule` and consolidates underutilized
nodes at once (budget 50%). Each has three existing m5.xlarge Nodes (with their NodeClaims) holding
one pod each, and a Deployment whose pending replicas make up the rest of the pool's share of
`--pods`. Every pod tolerates only its own pool's taint, so pods can move only within their pool:
the disruption engine has three candidates per pool, and every rescheduling simulation sees all the
pools and all the other nodes.

    python3 benches/gen-tainted-pools.py --pools 100 --pods 1000 > /tmp/tainted-100.yaml
    target/release/karpenter-rs simulate -f /tmp/tainted-100.yaml --disruption \\
        --now 2026-11-23T10:00:00Z
"""

import argparse
import sys

NODES_PER_POOL = 3
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
NODECLASS = """apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: c}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: c}}]
"""


def toleration(pool):
    return f"[{{key: team, operator: Equal, value: {pool}, effect: NoSchedule}}]"


def nodepool(pool):
    return f"""apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {pool}}}
spec:
  disruption: {{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s, budgets: [{{nodes: "50%"}}]}}
  template:
    spec:
      expireAfter: Never
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      taints: [{{key: team, value: {pool}, effect: NoSchedule}}]
      requirements:
        - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
        - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}}
"""


def node(pool, name, zone):
    return f"""apiVersion: v1
kind: Node
metadata:
  name: {name}
  creationTimestamp: "2026-11-01T00:00:00Z"
  labels:
    kubernetes.io/hostname: {name}
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    topology.kubernetes.io/zone: {zone}
    node.kubernetes.io/instance-type: m5.xlarge
    karpenter.sh/capacity-type: on-demand
    karpenter.sh/nodepool: {pool}
    karpenter.sh/initialized: "true"
    karpenter.k8s.aws/instance-category: m
    karpenter.k8s.aws/instance-family: m5
spec:
  providerID: aws:///{zone}/i-{name}
  taints: [{{key: team, value: {pool}, effect: NoSchedule}}]
status:
  allocatable: {{cpu: "3920m", memory: "14162Mi", pods: "58"}}
  conditions: [{{type: Ready, status: "True"}}]
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: {name}
  creationTimestamp: "2026-11-01T00:00:00Z"
  labels: {{karpenter.sh/nodepool: {pool}}}
spec:
  requirements: [{{key: karpenter.sh/nodepool, operator: In, values: [{pool}]}}]
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  taints: [{{key: team, value: {pool}, effect: NoSchedule}}]
status:
  nodeName: {name}
  providerID: aws:///{zone}/i-{name}
"""


def bound_pod(pool, name, node_name):
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, labels: {{app: {pool}}}}}
spec:
  nodeName: {node_name}
  tolerations: {toleration(pool)}
  containers: [{{name: c, image: i, resources: {{requests: {{cpu: 250m, memory: 512Mi}}}}}}]
status: {{phase: Running}}
"""


def deployment(pool, replicas):
    return f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: {pool}, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {pool}}}}}
  template:
    metadata: {{labels: {{app: {pool}}}}}
    spec:
      tolerations: {toleration(pool)}
      containers: [{{name: c, image: i, resources: {{requests: {{cpu: 250m, memory: 512Mi}}}}}}]
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=100)
    parser.add_argument("--pods", type=int, default=1000, help="pods in all, bound and pending")
    args = parser.parse_args()
    docs = [NODECLASS]
    for p in range(args.pools):
        pool = f"pool-{p}"
        share = args.pods // args.pools + (1 if p < args.pods % args.pools else 0)
        docs.append(nodepool(pool))
        bound = min(share, NODES_PER_POOL)
        for n in range(NODES_PER_POOL):
            name = f"{pool}-node-{n}"
            docs.append(node(pool, name, ZONES[(p + n) % len(ZONES)]))
            if n < bound:
                docs.append(bound_pod(pool, f"{pool}-bound-{n}", name))
        if share > bound:
            docs.append(deployment(pool, share - bound))
    sys.stdout.write("---\n".join(docs))


if __name__ == "__main__":
    main()
