//! The fractional assignment of pod shapes to instance types: the linear program whose optimum
//! is the cheapest fleet if pods could be split and nodes bought in fractions.
//!
//! Pods of shape `c` (`n_c` of them) are assigned to types, `y[c,t]` pods of `c` on type `t`,
//! and `x[t]` nodes of `t` are bought: minimise `sum(price_t * x_t)` subject to
//! `sum_t y[c,t] = n_c` and, per type and resource, `sum_c y[c,t] * request[c] <= x_t *
//! allocatable[t]`. Its optimum mixes shapes that complement each other on one type (CPU-heavy
//! and memory-heavy batch pods together fill an r5a.12xlarge in both) and puts each kind of pod
//! on the types cheapest for it, which a greedy pile sized for the round's average pod does not.
//! The scheduler uses the assignment only to group pods (`scheduler::repartition`); each group
//! is then planned by the solver itself, under every hard constraint this program ignores.

use microlp::{ComparisonOp, LinearExpr, OptimizationDirection, Problem};

/// The most `y[c,t]` variables a program may have: beyond it the simplex costs more than the
/// round's own solves (rounds of hundreds of distinct pod shapes on a pool of hundreds of
/// undominated types), and the caller keeps its plan.
const MAX_VARIABLES: usize = 20_000;

/// Resources per node or pod, in units near 1: CPU cores, memory GiB, pod slots.
pub type Amounts = [f64; 3];

/// An instance type as the program sees it.
#[derive(Clone, Copy, Debug)]
pub struct NodeType {
    /// Its price per hour.
    pub price: f64,
    /// What pods may use of it (DaemonSets taken off).
    pub allocatable: Amounts,
}

/// Pods of one shape.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// One pod's requests.
    pub request: Amounts,
    /// How many pods have it.
    pub count: usize,
}

/// How many pods of `shape` one node of `t` holds.
fn most(t: &NodeType, shape: &Shape) -> f64 {
    (0..3)
        .filter(|&r| shape.request[r] > 0.0)
        .map(|r| (t.allocatable[r] / shape.request[r]).floor())
        .fold(f64::INFINITY, f64::min)
}

/// Per shape, how many of its pods the optimum puts on each type, as `(index into types, pods)`
/// pairs whose pods sum to the shape's count (the program's values rounded by largest
/// remainder); a shape that fits no type gets no pair. `None` when the program is too large or
/// the simplex fails.
pub fn assign(types: &[NodeType], shapes: &[Shape]) -> Option<Vec<Vec<(usize, usize)>>> {
    let fits = |t: &NodeType, s: &Shape| (0..3).all(|r| s.request[r] <= t.allocatable[r]);
    let kept = undominated(types, shapes);
    // (shape, index into `kept`) for every shape and type that fits it.
    let kept_types = &kept;
    let pairs: Vec<(usize, usize)> = shapes
        .iter()
        .enumerate()
        .flat_map(|(c, s)| {
            (0..kept_types.len())
                .filter(move |&k| fits(&types[kept_types[k]], s))
                .map(move |k| (c, k))
        })
        .collect();
    if pairs.len() > MAX_VARIABLES {
        return None;
    }
    let mut problem = Problem::new(OptimizationDirection::Minimize);
    let nodes: Vec<_> = kept
        .iter()
        .map(|&t| problem.add_var(types[t].price, (0.0, f64::INFINITY)))
        .collect();
    let assigned: Vec<_> = pairs
        .iter()
        .map(|_| problem.add_var(0.0, (0.0, f64::INFINITY)))
        .collect();
    for (c, shape) in shapes.iter().enumerate() {
        let mut demand = LinearExpr::empty();
        let mut any = false;
        for (&(pc, _), &y) in pairs.iter().zip(&assigned) {
            if pc == c {
                demand.add(y, 1.0);
                any = true;
            }
        }
        if any {
            problem.add_constraint(demand, ComparisonOp::Eq, shape.count as f64);
        }
    }
    for (&(c, k), &y) in pairs.iter().zip(&assigned) {
        // Pods are whole: a node holds at most `most` pods of one shape, however much room
        // is left over (a 4-core pod fills a node of 7.9 cores alone).
        let mut slots = LinearExpr::empty();
        slots.add(y, 1.0);
        slots.add(nodes[k], -most(&types[kept[k]], &shapes[c]));
        problem.add_constraint(slots, ComparisonOp::Le, 0.0);
    }
    for (k, &t) in kept.iter().enumerate() {
        for r in 0..3 {
            let mut used = LinearExpr::empty();
            used.add(nodes[k], -types[t].allocatable[r]);
            for (&(c, pk), &y) in pairs.iter().zip(&assigned) {
                if pk == k && shapes[c].request[r] > 0.0 {
                    used.add(y, shapes[c].request[r]);
                }
            }
            problem.add_constraint(used, ComparisonOp::Le, 0.0);
        }
    }
    let solution = problem.solve().ok()?;
    let mut out: Vec<Vec<(usize, f64)>> = vec![Vec::new(); shapes.len()];
    for (&(c, k), &y) in pairs.iter().zip(&assigned) {
        let value = *solution.var_value(y);
        if value > 1e-6 {
            out[c].push((kept[k], value));
        }
    }
    Some(
        out.into_iter()
            .zip(shapes)
            .map(|(values, shape)| rounded(values, shape.count))
            .collect(),
    )
}

/// The types some cheapest fractional fleet may need: a type is left out when another holds at
/// least as much of every resource per dollar and every shape the first one fits (of two alike,
/// the first listed stays). Among the sizes of one family, which cost the same per resource,
/// only the largest stays; the program's size is no NodeClaim's size anyway.
fn undominated(types: &[NodeType], shapes: &[Shape]) -> Vec<usize> {
    let fitting = |t: &NodeType| -> Vec<bool> {
        shapes
            .iter()
            .map(|s| (0..3).all(|r| s.request[r] <= t.allocatable[r]))
            .collect()
    };
    let usable: Vec<(usize, Amounts, Vec<bool>)> = types
        .iter()
        .enumerate()
        .filter(|(_, t)| t.price.is_finite() && t.price > 0.0)
        .map(|(i, t)| (i, t.allocatable.map(|a| a / t.price), fitting(t)))
        .filter(|(_, _, fits)| fits.contains(&true))
        .collect();
    usable
        .iter()
        .filter(|(a, per_a, fits_a)| {
            !usable.iter().any(|(b, per_b, fits_b)| {
                b != a
                    && fits_a.iter().zip(fits_b).all(|(fa, fb)| !fa || *fb)
                    && (0..3).all(|r| per_b[r] >= per_a[r])
                    && (per_b != per_a || fits_b != fits_a || b < a)
            })
        })
        .map(|(i, _, _)| *i)
        .collect()
}

/// `count` pods shared out in proportion to the fractional `values` (per type): each type gets
/// its value rounded down, and the pods left over go to the largest remainders (the earlier
/// type on a tie).
fn rounded(values: Vec<(usize, f64)>, count: usize) -> Vec<(usize, usize)> {
    let total: f64 = values.iter().map(|(_, v)| v).sum();
    if total <= 0.0 {
        return Vec::new();
    }
    let scale = count as f64 / total;
    let mut shares: Vec<(usize, usize, f64)> = values
        .iter()
        .map(|&(t, v)| {
            let exact = v * scale;
            // In [0, count]: `exact` is a share of `count`.
            let whole = exact.floor().clamp(0.0, count as f64) as usize;
            (t, whole, exact - whole as f64)
        })
        .collect();
    let given: usize = shares.iter().map(|s| s.1).sum();
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| shares[b].2.total_cmp(&shares[a].2).then(a.cmp(&b)));
    for &k in order.iter().cycle().take(count.saturating_sub(given)) {
        shares[k].1 += 1;
    }
    shares
        .into_iter()
        .filter(|s| s.1 > 0)
        .map(|(t, pods, _)| (t, pods))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(price: f64, cpu: f64, memory: f64) -> NodeType {
        NodeType {
            price,
            allocatable: [cpu, memory, cpu * 10.0],
        }
    }

    fn shape(cpu: f64, memory: f64, count: usize) -> Shape {
        Shape {
            request: [cpu, memory, 1.0],
            count,
        }
    }

    #[test]
    fn complementary_shapes_share_the_type_that_suits_their_mix() {
        // A compute type (2 GiB per core), a memory type (8 GiB per core) and a general type
        // (4 GiB per core) priced above the mix of the other two.
        let types = [
            node(1.0, 48.0, 96.0),
            node(1.3, 48.0, 384.0),
            node(1.3, 48.0, 192.0),
        ];
        // CPU-heavy pods (16 cores, 4 GiB) and memory-heavy ones (2 cores, 60 GiB): the memory
        // type's nodes, bought for the memory-heavy pods, have cores to spare for CPU-heavy
        // pods, and the compute type's, bought for those, memory to spare for memory-heavy ones.
        // The general type suits neither kind nor the mix.
        let shapes = [shape(16.0, 4.0, 30), shape(2.0, 60.0, 30)];
        let assignment = assign(&types, &shapes).expect("solves");
        let on = |c: usize, t: usize| {
            assignment[c]
                .iter()
                .find(|(ty, _)| *ty == t)
                .map_or(0, |(_, n)| *n)
        };
        assert_eq!(on(0, 2) + on(1, 2), 0, "{assignment:?}");
        assert_eq!(assignment[0].iter().map(|(_, n)| n).sum::<usize>(), 30);
        assert_eq!(assignment[1].iter().map(|(_, n)| n).sum::<usize>(), 30);
        for t in [0, 1] {
            assert!(on(0, t) > 0 && on(1, t) > 0, "{assignment:?}");
        }
    }

    #[test]
    fn a_shape_no_type_fits_gets_no_type() {
        let types = [node(1.0, 4.0, 16.0)];
        let shapes = [shape(8.0, 1.0, 3), shape(1.0, 1.0, 5)];
        let assignment = assign(&types, &shapes).expect("solves");
        assert!(assignment[0].is_empty());
        assert_eq!(assignment[1], vec![(0, 5)]);
    }

    #[test]
    fn rounding_keeps_every_pod() {
        let shares = rounded(vec![(0, 1.5), (3, 1.5), (7, 1.0)], 4);
        assert_eq!(shares.iter().map(|s| s.1).sum::<usize>(), 4);
        assert_eq!(shares, vec![(0, 2), (3, 1), (7, 1)]);
    }

    #[test]
    fn of_a_family_only_the_largest_size_stays() {
        let types = [
            node(1.0, 8.0, 32.0),
            node(2.0, 16.0, 64.0),
            node(3.0, 8.0, 16.0),
        ];
        let shapes = [shape(1.0, 2.0, 10), shape(12.0, 2.0, 1)];
        assert_eq!(undominated(&types, &shapes), vec![1]);
    }
}
