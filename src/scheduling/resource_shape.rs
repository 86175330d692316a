//! Resource shapes: the round's pending pods grouped by how much memory they request per CPU (and by
//! the extended resources they need), each group with its average pod.
//!
//! New NodeClaims are sized for a typical pod (`scheduler::Solver::cost_efficient`). Sized for the
//! round's average pod, a round that mixes small CPU-bound web pods, large batch pods and
//! memory-heavy pods plans one kind of node for all of them (7 r6a.48xlarge for
//! `benches/gen-cost.py`'s mixed workload on a pool open to every x86 type), where the cheapest
//! fleet puts each kind on the types cheapest for it: web pods on t3a, batch pods on m5a / c5ad,
//! memory pods on r / x types. Grouping pods by shape lets each group's NodeClaims be sized for
//! that group's pods.
//!
//! The memory-per-CPU ratio is bucketed in powers of two, the steps between EC2's compute,
//! general-purpose, memory-optimized and x families (2, 4, 8 and 16 GiB per vCPU), so pods that
//! the same types suit share a group (and its NodeClaims) whatever their size.
//!
//! Not to be confused with `PodShape` (what a pod's spec asks of a node, shared by siblings):
//! this groups pods by the ratio of their requests only.

use std::collections::HashMap;
use std::sync::Arc;

use super::pod::Pod;
use super::resources::Resources;

/// A GiB, in bytes.
const GIB: f64 = (1u64 << 30) as f64;

/// The widest ratio bucket either way (2^±8 GiB per vCPU): pods beyond it share the extreme one.
const MAX_BUCKET: i32 = 8;

/// The round's pending pods by shape.
pub struct ResourceShapes {
    /// Each pending pod's shape (an index into `typical`).
    pub of: Vec<u32>,
    /// Each shape's average pod: CPU (millicores), memory (bytes), pod slots and ephemeral
    /// storage (bytes).
    pub typical: Vec<[f64; 4]>,
}

impl ResourceShapes {
    /// A single shape for the whole round: every NodeClaim is sized for its average pod.
    pub fn whole_round(pods: &[Pod]) -> Self {
        Self::grouped(pods, |_| (0, Vec::new()))
    }

    /// Pods grouped by their memory-per-CPU bucket and the names of the extended resources they
    /// request.
    pub fn by_ratio(pods: &[Pod]) -> Self {
        Self::grouped(pods, |p| {
            let names = p.requests.extended.iter().map(|(n, _)| n.clone()).collect();
            (ratio_bucket(&p.requests), names)
        })
    }

    fn grouped(pods: &[Pod], key: impl Fn(&Pod) -> (i32, Vec<Arc<str>>)) -> Self {
        let mut index: HashMap<(i32, Vec<Arc<str>>), u32> = HashMap::new();
        let mut sums: Vec<([f64; 4], f64)> = Vec::new();
        let of = pods
            .iter()
            .map(|p| {
                let next = sums.len() as u32;
                let shape = *index.entry(key(p)).or_insert(next);
                if shape == next {
                    sums.push(([0.0; 4], 0.0));
                }
                let (sum, count) = &mut sums[shape as usize];
                let r = &p.requests;
                for (s, amount) in
                    sum.iter_mut()
                        .zip([r.cpu, r.memory, r.pods, r.ephemeral_storage])
                {
                    *s += amount.max(0) as f64;
                }
                *count += 1.0;
                shape
            })
            .collect();
        let mut typical: Vec<[f64; 4]> = sums
            .into_iter()
            .map(|(sum, count)| sum.map(|s| s / count))
            .collect();
        if typical.is_empty() {
            typical.push([0.0; 4]);
        }
        Self { of, typical }
    }
}

/// The pod's memory per CPU, rounded to a power of two (GiB per vCPU) and clamped to
/// ±[`MAX_BUCKET`]; a pod requesting no CPU counts as the most memory-heavy, one requesting no
/// memory as the most CPU-heavy.
pub(super) fn ratio_bucket(r: &Resources) -> i32 {
    match (r.cpu > 0, r.memory > 0) {
        (false, false) => 0,
        (false, true) => MAX_BUCKET,
        (true, false) => -MAX_BUCKET,
        (true, true) => {
            let ratio = (r.memory as f64 / GIB) / (r.cpu as f64 / 1000.0);
            // Clamped as a float first: the ratio of extreme requests is finite but huge.
            ratio
                .log2()
                .round()
                .clamp(-f64::from(MAX_BUCKET), f64::from(MAX_BUCKET)) as i32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests(cpu: i64, memory_mib: i64) -> Resources {
        Resources {
            cpu,
            memory: memory_mib << 20,
            pods: 1,
            ..Resources::default()
        }
    }

    #[test]
    fn ratio_buckets_are_powers_of_two_of_gib_per_vcpu() {
        assert_eq!(ratio_bucket(&requests(1000, 1024)), 0);
        assert_eq!(ratio_bucket(&requests(1000, 2048)), 1);
        assert_eq!(ratio_bucket(&requests(500, 4096)), 3);
        assert_eq!(ratio_bucket(&requests(1000, 256)), -2);
        assert_eq!(ratio_bucket(&requests(1, 1 << 30)), MAX_BUCKET);
        assert_eq!(ratio_bucket(&requests(0, 512)), MAX_BUCKET);
        assert_eq!(ratio_bucket(&requests(250, 0)), -MAX_BUCKET);
        assert_eq!(ratio_bucket(&requests(0, 0)), 0);
    }
}
