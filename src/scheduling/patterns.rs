//! Integer patterns: which pods to put together on one node of which instance type so that the
//! fleet costs little, found as a cutting-stock problem is solved (Gilmore and Gomory's column
//! generation) over pod shapes instead of pods.
//!
//! A *pattern* is one node of a type filled with whole pods: how many pods of each CPU / memory
//! shape it holds. The master program buys patterns (`z_p` nodes of pattern `p`): minimise
//! `sum(price_p * z_p)` subject to `sum_p pods[c,p] * z_p >= n_c` for every shape `c`. It starts
//! from one pattern per shape (the shape alone on the type cheapest per pod) and grows: the
//! program's dual values say what one pod of each shape is worth, and a node of a type whose
//! best fill is worth more than its price is a new pattern (the pricing problem, a knapsack over
//! CPU, memory and pod slots, filled greedily in several orders). Patterns mix shapes that
//! complement each other (CPU-heavy and memory-heavy batch pods on one r5a.12xlarge, where a
//! pile sized for the round's average pod leaves one resource idle) and put each kind of pod on
//! the types cheapest for it. The fractional optimum is rounded by buying its whole patterns and
//! solving again for the pods left. The scheduler uses the patterns only to group pods
//! (`scheduler::repartition`); each group is then planned by the solver itself, under every
//! hard constraint this program ignores.

use std::collections::HashSet;

use microlp::{ComparisonOp, LinearExpr, OptimizationDirection, Problem, Variable};

/// Rounds of pricing in all (each one linear program and a fill of every type): the optimum is
/// usually reached in 10-30; beyond this the patterns found are kept as they are.
const MAX_ROUNDS: usize = 60;

/// New patterns a round adds at most (the most valuable per dollar): each one is a constraint
/// of every later program.
const NEW_PER_ROUND: usize = 8;

/// Counts of a shape a fill that starts with it tries (spread over 1 up to what fits): a node
/// that pairs one CPU-heavy pod with five memory-heavy ones starts with exactly one of the first.
const FIRST_COUNTS: usize = 16;

/// The most shapes the program takes: rounds with more distinct pods keep their plan.
const MAX_SHAPES: usize = 300;

/// How often the patterns are found again under a tighter bound on node price when the plan
/// breaks the blast-radius target (`contained`): each bound lowers the median with the nodes it
/// leaves out, and 1,460 mixed pods with DaemonSets on a c/m/r pool keep it from the fifth on.
const CONTAIN_ROUNDS: usize = 8;

/// Room for float error when pods' requests are summed against a node's allocatable.
const SLACK: f64 = 1e-9;

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

/// One node to buy: its type (an index into the types given) and how many pods of each shape
/// (indexed as the shapes given) it holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pattern {
    pub node: usize,
    pub pods: Vec<usize>,
}

/// How many pods of `shape` fit in `room`.
fn fitting(room: &Amounts, shape: &Shape) -> usize {
    (0..3)
        .filter(|&r| shape.request[r] > 0.0)
        .map(|r| ((room[r] + SLACK) / shape.request[r]).floor())
        .fold(f64::INFINITY, f64::min)
        // A count of pods, at least 0; a shape that requests nothing is capped by its count.
        .clamp(0.0, usize::MAX as f64) as usize
}

/// Whether a node of `t` holds `pods` (counts per shape).
fn holds(t: &NodeType, shapes: &[Shape], pods: &[usize]) -> bool {
    (0..3).all(|r| {
        let used: f64 = shapes
            .iter()
            .zip(pods)
            .map(|(s, &n)| s.request[r] * n as f64)
            .sum();
        used <= t.allocatable[r] + SLACK
    })
}

/// Where a plan's node prices stop: types priced above `price` are bought only for a pod of a
/// shape whose `excuse` (the radius times the cheapest type that holds it alone) reaches theirs.
#[derive(Clone, Debug)]
struct Bound {
    price: f64,
    excuse: Vec<f64>,
}

impl Bound {
    /// Whether a node of price `price` may hold any pods (it is within the bound, or there is
    /// none).
    fn open(bound: Option<&Self>, price: f64) -> bool {
        bound.is_none_or(|b| price <= b.price)
    }

    /// Whether a pod of shape `c` needs a node so dear that it excuses one of price `price`.
    fn excuses(bound: Option<&Self>, c: usize, price: f64) -> bool {
        bound.is_some_and(|b| b.excuse[c] >= price)
    }

    /// Whether a node of price `price` may hold a pod of shape `c`.
    fn admits(bound: Option<&Self>, price: f64, c: usize) -> bool {
        Self::open(bound, price) || Self::excuses(bound, c, price)
    }

    /// Whether a node of price `price` may hold `pods` (counts per shape): it is within the
    /// bound, or one of its pods excuses it.
    fn allows(bound: Option<&Self>, price: f64, pods: &[usize]) -> bool {
        Self::open(bound, price)
            || pods
                .iter()
                .enumerate()
                .any(|(c, &n)| n > 0 && Self::excuses(bound, c, price))
    }
}

/// Nodes (patterns) that hold every pod of every shape some type holds, priced close to the
/// least such a fleet can cost; shapes no type holds are left out. The blast-radius target
/// (no node dearer than `radius` times the median node unless one of its pods needs such a
/// node alone) is kept where it can be: when the cheapest patterns break it, they are found
/// again with the types above it usable only for the pods that excuse them. `None` when a
/// program is too large or the simplex fails.
pub fn contained(types: &[NodeType], shapes: &[Shape], radius: f64) -> Option<Vec<Pattern>> {
    if shapes.len() > MAX_SHAPES {
        return None;
    }
    let kept = cheapest_holders(types, shapes);
    let need: Vec<f64> = shapes
        .iter()
        .map(|s| {
            kept.iter()
                .map(|&t| &types[t])
                .filter(|t| fitting(&t.allocatable, s) >= 1)
                .map(|t| t.price)
                .fold(f64::INFINITY, f64::min)
        })
        .collect();
    let mut plan = bought(types, &kept, shapes, None)?;
    // Only ever lowered: a bound raised again by a plan whose median fell would let the nodes
    // that broke the target back in.
    let mut cap = f64::INFINITY;
    for _ in 0..CONTAIN_ROUNDS {
        let Some(median) = median(plan.iter().map(|p| types[p.node].price).collect()) else {
            break;
        };
        let broken = plan.iter().any(|p| {
            let excused = p
                .pods
                .iter()
                .zip(&need)
                .filter(|(n, _)| **n > 0)
                .map(|(_, need)| *need)
                .fold(median, f64::max);
            types[p.node].price > radius * excused
        });
        if !broken {
            break;
        }
        cap = cap.min(radius * median);
        let bound = Bound {
            price: cap,
            excuse: need.iter().map(|n| radius * n).collect(),
        };
        plan = bought(types, &kept, shapes, Some(&bound))?;
    }
    Some(plan)
}

/// The median of `prices` (the mean of the middle two of an even count); `None` when empty.
pub fn median(mut prices: Vec<f64>) -> Option<f64> {
    prices.sort_by(f64::total_cmp);
    let n = prices.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => prices.get(n / 2).copied(),
        _ => Some((prices[n / 2 - 1] + prices[n / 2]) / 2.0),
    }
}

/// The patterns bought: the master program's optimum over the patterns found (`generate`), its
/// whole patterns kept (or, when none is whole, one node of the one most bought), again for the
/// pods left until none is. A pattern cut short by the pods left is moved to the cheapest type
/// that holds what is left of it.
fn bought(
    types: &[NodeType],
    kept: &[usize],
    shapes: &[Shape],
    bound: Option<&Bound>,
) -> Option<Vec<Pattern>> {
    let allowed = |t: usize, c: usize| Bound::admits(bound, types[t].price, c);
    let mut demand: Vec<usize> = shapes
        .iter()
        .enumerate()
        .map(|(c, s)| {
            let held = kept
                .iter()
                .any(|&t| allowed(t, c) && fitting(&types[t].allocatable, s) >= 1);
            if held { s.count } else { 0 }
        })
        .collect();
    let mut found: Vec<Pattern> = Vec::new();
    let mut rounds = MAX_ROUNDS;
    let mut bought = Vec::new();
    while demand.iter().any(|&d| d > 0) {
        found = capped(types, found, &demand, bound);
        for (c, s) in shapes.iter().enumerate() {
            if demand[c] == 0 {
                continue;
            }
            // The shape alone on the type cheapest per pod that may hold it.
            let alone = kept
                .iter()
                .filter(|&&t| allowed(t, c))
                .map(|&t| (t, fitting(&types[t].allocatable, s).min(demand[c])))
                .filter(|(_, n)| *n > 0)
                .min_by(|a, b| {
                    (types[a.0].price / a.1 as f64).total_cmp(&(types[b.0].price / b.1 as f64))
                });
            if let Some((t, n)) = alone {
                let mut pods = vec![0; shapes.len()];
                pods[c] = n;
                let pattern = Pattern { node: t, pods };
                if !found.contains(&pattern) {
                    found.push(pattern);
                }
            }
        }
        let bought_now = generate(types, kept, shapes, &demand, &mut found, bound, &mut rounds)?;
        let mut took = false;
        for (pattern, z) in found.iter().zip(&bought_now) {
            // A whole count of nodes, small: `z` covers at most every pod.
            let whole = (z + 1e-6).floor().clamp(0.0, usize::MAX as f64) as usize;
            for _ in 0..whole {
                if let Some(node) = take(types, kept, shapes, pattern, &mut demand, bound) {
                    bought.push(node);
                    took = true;
                }
            }
        }
        if !took {
            let most = found
                .iter()
                .zip(&bought_now)
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(p, _)| p.clone())?;
            bought.push(take(types, kept, shapes, &most, &mut demand, bound)?);
        }
    }
    Some(bought)
}

/// One node of `pattern` holding what is left of its pods (`demand`, reduced by them), on the
/// cheapest kept type that holds them; `None` when none of its pods is left, or when the pod
/// that excused its node under `bound` is not.
fn take(
    types: &[NodeType],
    kept: &[usize],
    shapes: &[Shape],
    pattern: &Pattern,
    demand: &mut [usize],
    bound: Option<&Bound>,
) -> Option<Pattern> {
    let pods: Vec<usize> = pattern
        .pods
        .iter()
        .zip(demand.iter())
        .map(|(&n, &d)| n.min(d))
        .collect();
    let own = types[pattern.node].price;
    if pods.iter().all(|&n| n == 0) || !Bound::allows(bound, own, &pods) {
        return None;
    }
    for (d, n) in demand.iter_mut().zip(&pods) {
        *d -= n;
    }
    // A cheaper node is within the bound too, or excused by the pod that excused this one.
    let node = kept
        .iter()
        .copied()
        .filter(|&t| types[t].price < own && holds(&types[t], shapes, &pods))
        .min_by(|&a, &b| types[a].price.total_cmp(&types[b].price).then(a.cmp(&b)))
        .unwrap_or(pattern.node);
    Some(Pattern { node, pods })
}

/// `found` with every count capped at the pods left; empty and repeated patterns dropped, and
/// those whose node no pod left excuses under `bound`.
fn capped(
    types: &[NodeType],
    found: Vec<Pattern>,
    demand: &[usize],
    bound: Option<&Bound>,
) -> Vec<Pattern> {
    let mut seen = HashSet::new();
    found
        .into_iter()
        .map(|p| Pattern {
            node: p.node,
            pods: p.pods.iter().zip(demand).map(|(&n, &d)| n.min(d)).collect(),
        })
        .filter(|p| {
            p.pods.iter().any(|&n| n > 0)
                && Bound::allows(bound, types[p.node].price, &p.pods)
                && seen.insert(p.clone())
        })
        .collect()
}

/// Column generation over `found` for the pods `demand`: the dual of the master program is
/// solved (its optimum is the pods' worth per shape; microlp gives no duals of a primal), every
/// type priced, and the patterns worth more than their node added, while any is and rounds are
/// left. Returns the master program's optimum: nodes bought per pattern of `found`.
fn generate(
    types: &[NodeType],
    kept: &[usize],
    shapes: &[Shape],
    demand: &[usize],
    found: &mut Vec<Pattern>,
    bound: Option<&Bound>,
    rounds: &mut usize,
) -> Option<Vec<f64>> {
    let wanted: Vec<usize> = (0..shapes.len()).filter(|&c| demand[c] > 0).collect();
    let row = |vars: &[Variable], p: &Pattern| {
        let mut expr = LinearExpr::empty();
        for (k, &c) in wanted.iter().enumerate() {
            if p.pods[c] > 0 {
                expr.add(vars[k], p.pods[c] as f64);
            }
        }
        expr
    };
    let mut dual = Problem::new(OptimizationDirection::Maximize);
    let worth: Vec<Variable> = wanted
        .iter()
        .map(|&c| dual.add_var(demand[c] as f64, (0.0, f64::INFINITY)))
        .collect();
    for p in found.iter() {
        dual.add_constraint(row(&worth, p), ComparisonOp::Le, types[p.node].price);
    }
    let mut solution = dual.solve().ok()?;
    while *rounds > 0 {
        *rounds -= 1;
        let mut values = vec![0.0; shapes.len()];
        for (k, &c) in wanted.iter().enumerate() {
            values[c] = *solution.var_value(worth[k]);
        }
        let fresh = priced(types, kept, shapes, demand, &values, bound, found);
        if fresh.is_empty() {
            break;
        }
        for p in fresh {
            solution = solution
                .add_constraint(row(&worth, &p), ComparisonOp::Le, types[p.node].price)
                .ok()?;
            found.push(p);
        }
    }
    let mut master = Problem::new(OptimizationDirection::Minimize);
    let nodes: Vec<Variable> = found
        .iter()
        .map(|p| master.add_var(types[p.node].price, (0.0, f64::INFINITY)))
        .collect();
    for &c in &wanted {
        let mut covered = LinearExpr::empty();
        for (p, &z) in found.iter().zip(&nodes) {
            if p.pods[c] > 0 {
                covered.add(z, p.pods[c] as f64);
            }
        }
        master.add_constraint(covered, ComparisonOp::Ge, demand[c] as f64);
    }
    let optimum = master.solve().ok()?;
    Some(nodes.iter().map(|&z| *optimum.var_value(z)).collect())
}

/// The pricing problem: per kept type, the best of several greedy fills with pods worth
/// `values` (per shape), and of those worth more than their node's price the
/// [`NEW_PER_ROUND`] most valuable per dollar not yet `found`.
fn priced(
    types: &[NodeType],
    kept: &[usize],
    shapes: &[Shape],
    demand: &[usize],
    values: &[f64],
    bound: Option<&Bound>,
    found: &[Pattern],
) -> Vec<Pattern> {
    let worth =
        |pods: &[usize]| -> f64 { pods.iter().zip(values).map(|(&n, v)| n as f64 * v).sum() };
    let mut fresh: Vec<(f64, Pattern)> = Vec::new();
    for &t in kept {
        let node = &types[t];
        // No fill is worth more than the best value per unit of any one resource allows.
        let ceiling = (0..3)
            .map(|r| {
                shapes
                    .iter()
                    .zip(values)
                    .filter(|(s, _)| s.request[r] > 0.0)
                    .map(|(s, v)| v / s.request[r])
                    .fold(0.0, f64::max)
                    * node.allocatable[r]
            })
            .fold(f64::INFINITY, f64::min);
        if ceiling <= node.price * (1.0 + 1e-9) {
            continue;
        }
        let open = Bound::open(bound, node.price);
        let share = |c: usize, r: usize| shapes[c].request[r] / node.allocatable[r].max(SLACK);
        let keys: [&dyn Fn(usize) -> f64; 4] = [
            &|c| (0..3).map(|r| share(c, r)).fold(0.0, f64::max),
            &|c| share(c, 0),
            &|c| share(c, 1),
            &|c| (0..3).map(|r| share(c, r)).sum(),
        ];
        let useful: Vec<usize> = (0..shapes.len())
            .filter(|&c| demand[c] > 0 && fitting(&node.allocatable, &shapes[c]) >= 1)
            .collect();
        let orders: Vec<Vec<usize>> = keys
            .iter()
            .map(|key| {
                let mut order = useful.clone();
                let score = |c: usize| values[c] / key(c).max(SLACK);
                order.sort_by(|&a, &b| score(b).total_cmp(&score(a)).then(a.cmp(&b)));
                order
            })
            .collect();
        let mut best: Option<(f64, Vec<usize>)> = None;
        let mut consider = |pods: Vec<usize>| {
            let w = worth(&pods);
            if best.as_ref().is_none_or(|(b, _)| w > *b) {
                best = Some((w, pods));
            }
        };
        if open {
            for order in &orders {
                consider(fill(node, shapes, demand, None, order));
            }
        }
        for &c in &useful {
            if values[c] <= 0.0 || !Bound::admits(bound, node.price, c) {
                continue;
            }
            let most = fitting(&node.allocatable, &shapes[c]).min(demand[c]);
            let mut counts: Vec<usize> = (1..=FIRST_COUNTS)
                .map(|i| (i * most).div_ceil(FIRST_COUNTS))
                .collect();
            counts.dedup();
            for k in counts {
                consider(fill(node, shapes, demand, Some((c, k)), &orders[0]));
            }
        }
        if let Some((w, pods)) = best
            && w > node.price * (1.0 + 1e-6)
        {
            let pattern = Pattern { node: t, pods };
            if !found.contains(&pattern) {
                fresh.push((w / node.price.max(SLACK), pattern));
            }
        }
    }
    fresh.sort_by(|a, b| b.0.total_cmp(&a.0));
    fresh
        .into_iter()
        .take(NEW_PER_ROUND)
        .map(|(_, p)| p)
        .collect()
}

/// A node of `t` filled greedily: `first` (a shape and a count) first, then pods of each shape
/// in `order`, as many as fit and are left.
fn fill(
    t: &NodeType,
    shapes: &[Shape],
    demand: &[usize],
    first: Option<(usize, usize)>,
    order: &[usize],
) -> Vec<usize> {
    let mut room = t.allocatable;
    let mut pods = vec![0; shapes.len()];
    let mut put = |c: usize, most: usize| {
        let n = most
            .min(demand[c] - pods[c])
            .min(fitting(&room, &shapes[c]));
        pods[c] += n;
        for (left, need) in room.iter_mut().zip(shapes[c].request) {
            *left -= need * n as f64;
        }
    };
    if let Some((c, k)) = first {
        put(c, k);
    }
    for &c in order {
        put(c, usize::MAX);
    }
    pods
}

/// The types a cheapest fleet may use: a type is left out when another costs no more and holds
/// at least as much of every resource (of two alike, the first listed stays), or when it holds
/// no pod of any shape.
fn cheapest_holders(types: &[NodeType], shapes: &[Shape]) -> Vec<usize> {
    let usable: Vec<usize> = (0..types.len())
        .filter(|&t| {
            let ty = &types[t];
            ty.price.is_finite()
                && ty.price >= 0.0
                && shapes.iter().any(|s| fitting(&ty.allocatable, s) >= 1)
        })
        .collect();
    usable
        .iter()
        .copied()
        .filter(|&a| {
            let ta = &types[a];
            !usable.iter().any(|&b| {
                let tb = &types[b];
                b != a
                    && tb.price <= ta.price
                    && (0..3).all(|r| tb.allocatable[r] >= ta.allocatable[r])
                    && (tb.price < ta.price || tb.allocatable != ta.allocatable || b < a)
            })
        })
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

    /// Every pod of a held shape is in exactly one node, and every node holds its pods.
    fn assert_covers(types: &[NodeType], shapes: &[Shape], plan: &[Pattern], held: &[bool]) {
        for (c, s) in shapes.iter().enumerate() {
            let placed: usize = plan.iter().map(|p| p.pods[c]).sum();
            assert_eq!(placed, if held[c] { s.count } else { 0 }, "shape {c}");
        }
        for p in plan {
            assert!(holds(&types[p.node], shapes, &p.pods), "{p:?}");
        }
    }

    fn cost(types: &[NodeType], plan: &[Pattern]) -> f64 {
        plan.iter().map(|p| types[p.node].price).sum()
    }

    #[test]
    fn complementary_pods_share_a_node() {
        // A compute type (2 GiB per core), a memory type (8 GiB per core) and a general type
        // (4 GiB per core) priced above the mix of the other two.
        let types = [
            node(1.0, 48.0, 96.0),
            node(1.3, 48.0, 384.0),
            node(1.3, 48.0, 192.0),
        ];
        // CPU-heavy pods (16 cores, 4 GiB) and memory-heavy ones (2 cores, 60 GiB). Alone, the
        // first take 3 per compute node (10 nodes, $10) and the second 6 per memory node (5
        // nodes, $6.5); one CPU-heavy pod and five memory-heavy ones fill a memory node in both.
        let shapes = [shape(16.0, 4.0, 30), shape(2.0, 60.0, 30)];
        let plan = contained(&types, &shapes, 4.0).expect("solves");
        assert_covers(&types, &shapes, &plan, &[true, true]);
        assert!(plan.iter().all(|p| p.node != 2), "{plan:?}");
        assert!(
            plan.iter().any(|p| p.pods[0] > 0 && p.pods[1] > 0),
            "{plan:?}"
        );
        assert!(cost(&types, &plan) < 16.5 - 1e-9, "{plan:?}");
    }

    #[test]
    fn a_shape_no_type_holds_gets_no_node() {
        let types = [node(1.0, 4.0, 16.0)];
        let shapes = [shape(8.0, 1.0, 3), shape(1.0, 1.0, 5)];
        let plan = contained(&types, &shapes, 4.0).expect("solves");
        assert_covers(&types, &shapes, &plan, &[false, true]);
        assert_eq!(plan.len(), 2, "{plan:?}");
    }

    #[test]
    fn a_type_another_beats_in_price_and_room_is_left_out() {
        let types = [
            node(1.0, 8.0, 32.0),
            node(0.9, 16.0, 64.0),
            node(3.0, 8.0, 16.0),
            node(3.0, 64.0, 16.0),
        ];
        let shapes = [shape(1.0, 2.0, 10), shape(12.0, 2.0, 1)];
        assert_eq!(cheapest_holders(&types, &shapes), vec![1, 3]);
    }

    #[test]
    fn a_left_over_pod_gets_the_cheapest_node_that_holds_it() {
        let types = [node(1.0, 8.0, 64.0), node(0.2, 1.0, 8.0)];
        // 17 one-core pods: two full 8-core nodes and the last pod on a 1-core node.
        let plan = contained(&types, &[shape(1.0, 1.0, 17)], 4.0).expect("solves");
        assert_covers(&types, &[shape(1.0, 1.0, 17)], &plan, &[true]);
        assert!((cost(&types, &plan) - 2.2).abs() < 1e-9, "{plan:?}");
    }

    #[test]
    fn no_node_dearer_than_the_radius_allows_unless_a_pod_needs_it() {
        // A giant type, cheapest per pod for CPU-heavy pods, and a small one, cheapest for
        // memory-heavy pods; one pod only the giant holds.
        let types = [node(18.0, 400.0, 400.0), node(1.0, 20.0, 80.0)];
        let shapes = [
            shape(1.0, 4.0, 400),
            shape(4.0, 1.0, 100),
            shape(300.0, 1.0, 1),
        ];
        let plan = contained(&types, &shapes, 4.0).expect("solves");
        assert_covers(&types, &shapes, &plan, &[true, true, true]);
        // Unbounded, the CPU-heavy pods would fill a giant ($18 for what 20 small nodes hold)
        // 18 times the median node's price; bounded, only the pod that needs a giant gets one.
        let giants: Vec<&Pattern> = plan.iter().filter(|p| p.node == 0).collect();
        assert_eq!(giants.len(), 1, "{plan:?}");
        assert_eq!(giants[0].pods[2], 1, "{plan:?}");
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![4.0, 1.0, 2.0, 8.0]), Some(3.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(Vec::new()), None);
    }
}
