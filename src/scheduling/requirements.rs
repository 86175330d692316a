//! The requirement-set algebra the scheduler uses to decide whether a pod, a NodePool template,
//! an instance type, a planned NodeClaim and an existing node can agree on a node's labels.
//!
//! # Model
//!
//! A [`Requirement`] constrains the value of one label key. It is either a *finite* set of
//! allowed values (`In`, and `DoesNotExist` as the empty set) or a *complement* set: every value
//! except a finite list (`NotIn`, and `Exists` as the complement of nothing). A complement may
//! also carry inclusive integer bounds `gte`/`lte`: `Gt n` is stored as `gte n+1`, `Lt n` as
//! `lte n-1`, `Gte`/`Lte` as given. Once bounds are present, only values that parse as an
//! integer inside them are members; any other string is not.
//!
//! [`Requirements`] maps keys (normalized through [`labels::normalize`], so deprecated aliases
//! such as `beta.kubernetes.io/arch` land on `kubernetes.io/arch`) to requirements, and
//! [`Requirements::add`] intersects key by key.
//!
//! # Normal form
//!
//! Every operation keeps these invariants, so structurally equal requirements are equal sets
//! and `==` is meaningful:
//! * finite sets never carry bounds (intersecting with bounds filters the values instead);
//! * contradictory bounds (`gte > lte`) collapse into the empty finite set, keeping `minValues`;
//! * a bounded complement never lists an excluded value that the bounds already exclude;
//! * values are sorted and de-duplicated.
//!
//! # Performance
//!
//! The bin-packer calls these functions millions of times per batch (thousands of pods against
//! hundreds of instance types), so the representation is chosen to make the common paths cheap:
//! * values are reference-counted `Arc<str>` held in one shared, sorted `Arc<[Arc<str>]>`, so
//!   cloning a requirement (every planned NodeClaim copies its template's) costs two
//!   reference-count increments, membership is a binary search, and an intersection that keeps
//!   a whole side (the typical `Exists ∩ In [...]` or `In [400 types] ⊇ In [1 type]` case)
//!   shares that side's storage instead of allocating; the empty set holds no allocation at all;
//! * [`Requirements`] is a `Vec` sorted by key rather than a hash map: NodePools and pods define a
//!   handful of keys, so binary search and a merge-join over both sides beat hashing, iterate
//!   deterministically and clone with one allocation;
//! * [`Requirement::intersects`] and [`Requirements::is_compatible`] answer without allocating;
//!   [`Requirements::compatible`] builds its human-readable [`Incompatibility`] (with typo hints)
//!   only once a conflict has been found.
//!
//! # Upstream parity
//!
//! Semantics follow kubernetes-sigs/karpenter `pkg/scheduling/requirement.go` and
//! `requirements.go` (`Intersection`, `HasIntersection`, `Has`, `Operator`, `Compatible`,
//! `Intersects`, `labelHint`), re-derived from their documented behaviour, with these deliberate
//! differences:
//! * [`Requirement::any`] is deterministic (the smallest value, or the integer closest to the
//!   bounds) where upstream picks at random, so scheduling decisions are reproducible;
//! * [`Requirements::compatible`] reports the first incompatibility (undefined keys before
//!   disjoint values, like upstream's ordering) instead of joining every error, because callers
//!   only surface one reason per NodePool and the others would cost allocations in the hot loop;
//! * a bounded requirement (`Gt`/`Lt`/`Gte`/`Lte`, even intersected with `NotIn`) is never
//!   satisfied by a missing label, whereas upstream's operator check would let a bounded `NotIn`
//!   through; Kubernetes itself requires the label for `Gt`/`Lt`;
//! * [`Requirements::labels`] only turns single-valued `In` requirements into labels.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::apis::labels;
use crate::apis::nodeclaim::{NodeSelectorRequirementWithMinValues, Operator};

/// How many values a message lists before summarising the rest, so that a 400-instance-type
/// requirement does not flood an event.
const MAX_LISTED_VALUES: usize = 5;

/// A sorted, de-duplicated set of label values whose storage is shared between requirements, so
/// that clones and most intersections do not allocate. `None` is the empty set.
#[derive(Clone, Default, PartialEq, Eq)]
struct ValueSet(Option<Arc<[Arc<str>]>>);

impl ValueSet {
    /// The empty set, without an allocation.
    const EMPTY: Self = Self(None);

    /// Sorts and de-duplicates `values` into a set.
    fn from_unsorted(mut values: Vec<Arc<str>>) -> Self {
        values.sort_unstable();
        values.dedup();
        Self::from_sorted(values)
    }

    /// Wraps values the caller has already sorted and de-duplicated.
    fn from_sorted(values: Vec<Arc<str>>) -> Self {
        if values.is_empty() {
            Self::EMPTY
        } else {
            Self(Some(values.into()))
        }
    }

    fn as_slice(&self) -> &[Arc<str>] {
        self.0.as_deref().unwrap_or(&[])
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    fn contains(&self, value: &str) -> bool {
        self.as_slice()
            .binary_search_by(|v| (**v).cmp(value))
            .is_ok()
    }

    /// The values `keep` accepts, in order; shares this set's storage when it keeps all of them.
    fn filter(&self, mut keep: impl FnMut(&str) -> bool) -> Self {
        let values = self.as_slice();
        let Some(first_dropped) = values.iter().position(|v| !keep(v)) else {
            return self.clone();
        };
        let mut kept = values[..first_dropped].to_vec();
        kept.extend(
            values[first_dropped + 1..]
                .iter()
                .filter(|v| keep(v))
                .cloned(),
        );
        Self::from_sorted(kept)
    }

    /// The union of both sets; shares either side's storage when it already holds the other.
    fn union(&self, other: &Self) -> Self {
        let (a, b) = (self.as_slice(), other.as_slice());
        if b.is_empty() {
            return self.clone();
        }
        if a.is_empty() {
            return other.clone();
        }
        let mut merged = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            match a[i].cmp(&b[j]) {
                std::cmp::Ordering::Less => {
                    merged.push(a[i].clone());
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    merged.push(b[j].clone());
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    merged.push(a[i].clone());
                    i += 1;
                    j += 1;
                }
            }
        }
        merged.extend_from_slice(&a[i..]);
        merged.extend_from_slice(&b[j..]);
        if merged.len() == a.len() {
            self.clone()
        } else if merged.len() == b.len() {
            other.clone()
        } else {
            Self::from_sorted(merged)
        }
    }
}

impl fmt::Debug for ValueSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.as_slice()).finish()
    }
}

/// The allowed values of one label key, in the normal form described in the module docs.
///
/// This is the unit the scheduler intersects when it layers pod, NodePool, instance-type and
/// offering constraints; it mirrors upstream Karpenter's `scheduling.Requirement`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: Arc<str>,
    /// `false`: the allowed values are exactly `values`; `true`: every value except `values`.
    complement: bool,
    values: ValueSet,
    /// Inclusive lower integer bound; only ever set on complements.
    gte: Option<i64>,
    /// Inclusive upper integer bound; only ever set on complements.
    lte: Option<i64>,
    min_values: Option<u32>,
}

impl Requirement {
    /// Builds the requirement a node selector expression states, so every input format (NodePool
    /// requirements, pod affinity, labels) enters the algebra through one constructor.
    ///
    /// The key is normalized with [`labels::normalize`]. `Gt`/`Lt`/`Gte`/`Lte` read their bound
    /// from the first value; a missing or non-integer bound, `Gt i64::MAX` or `Lt i64::MIN` can
    /// match no value, so they yield the empty set (API validation rejects such input anyway).
    pub fn new<I, S>(key: &str, operator: Operator, values: I, min_values: Option<u32>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Arc<str>>,
    {
        let set = |values: I| ValueSet::from_unsorted(values.into_iter().map(Into::into).collect());
        let bound = |values: I| {
            let first: Arc<str> = values.into_iter().next()?.into();
            first.parse::<i64>().ok()
        };
        let (complement, values, gte, lte) = match operator {
            Operator::In => (false, set(values), None, None),
            Operator::NotIn => (true, set(values), None, None),
            Operator::Exists => (true, ValueSet::EMPTY, None, None),
            Operator::DoesNotExist => (false, ValueSet::EMPTY, None, None),
            Operator::Gt => match bound(values).and_then(|b| b.checked_add(1)) {
                Some(gte) => (true, ValueSet::EMPTY, Some(gte), None),
                None => (false, ValueSet::EMPTY, None, None),
            },
            Operator::Gte => match bound(values) {
                Some(gte) => (true, ValueSet::EMPTY, Some(gte), None),
                None => (false, ValueSet::EMPTY, None, None),
            },
            Operator::Lt => match bound(values).and_then(|b| b.checked_sub(1)) {
                Some(lte) => (true, ValueSet::EMPTY, None, Some(lte)),
                None => (false, ValueSet::EMPTY, None, None),
            },
            Operator::Lte => match bound(values) {
                Some(lte) => (true, ValueSet::EMPTY, None, Some(lte)),
                None => (false, ValueSet::EMPTY, None, None),
            },
        };
        Self {
            key: Arc::from(labels::normalize(key)),
            complement,
            values,
            gte,
            lte,
            min_values,
        }
    }

    /// Converts one NodePool/NodeClaim requirement, keeping its `minValues` so that the
    /// instance-type flexibility it demands survives every later intersection.
    ///
    /// A negative `minValues` (rejected by validation) counts as 0; one above `u32::MAX` saturates.
    pub fn from_node_selector_requirement(
        requirement: &NodeSelectorRequirementWithMinValues,
    ) -> Self {
        Self::new(
            &requirement.key,
            requirement.operator,
            requirement.values.iter().map(String::as_str),
            requirement
                .min_values
                .map(|m| u32::try_from(m.max(0)).unwrap_or(u32::MAX)),
        )
    }

    /// The (normalized) label key, so callers can index and report by it.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The minimum number of distinct values the launched instance types must keep for this key;
    /// the largest `minValues` of every requirement intersected into this one.
    pub fn min_values(&self) -> Option<u32> {
        self.min_values
    }

    /// The inclusive lower integer bound, if a `Gt`/`Gte` applies (`Gt n` reads back as `n + 1`).
    pub fn gte(&self) -> Option<i64> {
        self.gte
    }

    /// The inclusive upper integer bound, if an `Lt`/`Lte` applies (`Lt n` reads back as `n - 1`).
    pub fn lte(&self) -> Option<i64> {
        self.lte
    }

    /// Whether a node labelled `key=value` satisfies this requirement: the test every instance
    /// type, offering and existing node is put to.
    pub fn has(&self, value: &str) -> bool {
        let listed = self.values.contains(value);
        let allowed = if self.complement { !listed } else { listed };
        allowed && within_bounds(value, self.gte, self.lte)
    }

    /// The values allowed by both requirements, with the larger `minValues`: how constraints from
    /// different sources are layered. The result keeps `self`'s key; both should share it.
    pub fn intersection(&self, other: &Self) -> Self {
        debug_assert_eq!(
            self.key, other.key,
            "intersecting requirements of different keys"
        );
        let min_values = self.min_values.max(other.min_values);
        let gte = self.gte.max(other.gte);
        let lte = match (self.lte, other.lte) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let (Some(g), Some(l)) = (gte, lte)
            && g > l
        {
            return self.nothing(min_values);
        }
        let (complement, values, gte, lte) = match (self.complement, other.complement) {
            (true, true) => {
                let excluded = self.values.union(&other.values);
                let excluded = if gte.is_some() || lte.is_some() {
                    excluded.filter(|v| within_bounds(v, gte, lte))
                } else {
                    excluded
                };
                (true, excluded, gte, lte)
            }
            (true, false) => (false, other.values.filter(|v| self.has(v)), None, None),
            (false, true) => (false, self.values.filter(|v| other.has(v)), None, None),
            (false, false) => {
                let (small, large) = if self.values.len() <= other.values.len() {
                    (&self.values, &other.values)
                } else {
                    (&other.values, &self.values)
                };
                (false, small.filter(|v| large.contains(v)), None, None)
            }
        };
        Self {
            key: self.key.clone(),
            complement,
            values,
            gte,
            lte,
            min_values,
        }
    }

    /// Whether some value satisfies both requirements; equivalent to
    /// `!self.intersection(other).is_empty_set()` but allocation-free, for the hot path.
    pub fn intersects(&self, other: &Self) -> bool {
        let gte = self.gte.max(other.gte);
        let lte = match (self.lte, other.lte) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let (Some(g), Some(l)) = (gte, lte)
            && g > l
        {
            return false;
        }
        match (self.complement, other.complement) {
            // Non-contradictory bounds always leave infinitely many spellings of some integer.
            (true, true) => true,
            (true, false) => other.values.as_slice().iter().any(|v| self.has(v)),
            (false, true) => self.values.as_slice().iter().any(|v| other.has(v)),
            (false, false) => {
                let (small, large) = if self.values.len() <= other.values.len() {
                    (&self.values, &other.values)
                } else {
                    (&other.values, &self.values)
                };
                small.as_slice().iter().any(|v| large.contains(v))
            }
        }
    }

    /// A value a new node could carry for this key, so a NodeClaim can be given a concrete label;
    /// `None` only for the empty set.
    ///
    /// Finite sets yield their smallest value. Complements yield the integer closest to the
    /// bounds (0 without bounds) that is not excluded; if every integer in a tiny bounded range is
    /// excluded, a zero-padded spelling such as `05`, which still parses into the range.
    pub fn any(&self) -> Option<String> {
        if !self.complement {
            return self.values.as_slice().first().map(|v| v.to_string());
        }
        let excluded = self.values.len();
        let low = self.gte.unwrap_or(i64::MIN);
        let high = self.lte.unwrap_or(i64::MAX);
        let start = self.gte.unwrap_or(high.min(0));
        // At most `excluded` candidates can be excluded, so `excluded + 1` on each side suffice.
        let upward = (start..=high).take(excluded + 1);
        let downward = (low..start).rev().take(excluded + 1);
        upward
            .chain(downward)
            .map(|n| n.to_string())
            .chain((1..=excluded + 1).map(|zeros| zero_padded(start, zeros)))
            .find(|candidate| !self.values.contains(candidate))
    }

    /// The number of allowed values, `None` when infinite (any complement), so callers can tell
    /// how flexible a key still is (e.g. for `minValues`).
    #[expect(
        clippy::len_without_is_empty,
        reason = "emptiness is `is_empty_set`; `len` is optional because sets can be infinite"
    )]
    pub fn len(&self) -> Option<usize> {
        (!self.complement).then(|| self.values.len())
    }

    /// Whether no value at all satisfies this requirement (including contradictory bounds), i.e.
    /// the key must be absent: upstream's `Len() == 0`.
    pub fn is_empty_set(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// The operator this set reads back as, like upstream's `Operator()`: `In` / `DoesNotExist`
    /// for non-empty / empty finite sets, `NotIn` / `Exists` for complements with / without
    /// excluded values. Bounds do not change the answer (a bounded set reads as `Exists` or
    /// `NotIn`); use [`Requirement::to_node_selector_requirements`] for the `Gte`/`Lte` form.
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (false, false) => Operator::In,
            (false, true) => Operator::DoesNotExist,
            (true, false) => Operator::NotIn,
            (true, true) => Operator::Exists,
        }
    }

    /// The listed values, sorted: the allowed values of a finite set or the excluded values of a
    /// complement (interpret them with [`Requirement::operator`]).
    pub fn values(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.values.as_slice().iter().map(|v| &**v)
    }

    /// Node selector requirements that state exactly this set, for writing NodeClaim
    /// `spec.requirements`: one entry, or several (`NotIn`, `Gte`, `Lte`) for a bounded
    /// complement, each carrying `minValues`. Re-reading them yields this requirement again.
    pub fn to_node_selector_requirements(&self) -> Vec<NodeSelectorRequirementWithMinValues> {
        let entry = |operator, values: Vec<String>| NodeSelectorRequirementWithMinValues {
            key: self.key.to_string(),
            operator,
            values,
            min_values: self.min_values.map(i64::from),
        };
        let listed = || self.values().map(str::to_owned).collect();
        if !self.complement {
            return vec![entry(self.operator(), listed())];
        }
        let mut entries = Vec::with_capacity(1);
        if !self.values.is_empty() {
            entries.push(entry(Operator::NotIn, listed()));
        }
        if let Some(gte) = self.gte {
            entries.push(entry(Operator::Gte, vec![gte.to_string()]));
        }
        if let Some(lte) = self.lte {
            entries.push(entry(Operator::Lte, vec![lte.to_string()]));
        }
        if entries.is_empty() {
            entries.push(entry(Operator::Exists, Vec::new()));
        }
        entries
    }

    /// The empty set for this key, which is what contradictory constraints reduce to.
    fn nothing(&self, min_values: Option<u32>) -> Self {
        Self {
            key: self.key.clone(),
            complement: false,
            values: ValueSet::EMPTY,
            gte: None,
            lte: None,
            min_values,
        }
    }

    /// Whether a node without this label satisfies the requirement: only `DoesNotExist` and
    /// unbounded `NotIn` (Kubernetes' rule; `Exists` and bounds need the label).
    pub fn allows_absence(&self) -> bool {
        if self.complement {
            !self.values.is_empty() && self.gte.is_none() && self.lte.is_none()
        } else {
            self.values.is_empty()
        }
    }

    /// Upstream's `Intersects` rule for one shared key: some value satisfies both, or both are
    /// satisfied by leaving the label off the node.
    pub fn coexists_with(&self, other: &Self) -> bool {
        self.intersects(other) || (self.allows_absence() && other.allows_absence())
    }
}

impl fmt::Display for Requirement {
    /// `key Operator [values]`, as upstream prints requirements in events and logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.key, Constraint(self))
    }
}

/// Renders a requirement without its key, e.g. `In [a b]` or `NotIn [5] and Gte 2`.
struct Constraint<'a>(&'a Requirement);

impl fmt::Display for Constraint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0;
        if r.complement {
            let mut separator = "";
            if !r.values.is_empty() {
                f.write_str("NotIn ")?;
                write_values(f, &r.values)?;
                separator = " and ";
            }
            if let Some(gte) = r.gte {
                write!(f, "{separator}Gte {gte}")?;
                separator = " and ";
            }
            if let Some(lte) = r.lte {
                write!(f, "{separator}Lte {lte}")?;
                separator = " and ";
            }
            if separator.is_empty() {
                f.write_str("Exists")?;
            }
        } else if r.values.is_empty() {
            f.write_str("DoesNotExist")?;
        } else {
            f.write_str("In ")?;
            write_values(f, &r.values)?;
        }
        if let Some(min_values) = r.min_values {
            write!(f, " (minValues {min_values})")?;
        }
        Ok(())
    }
}

/// Writes `[a b c d e and 3 others]`.
fn write_values(f: &mut fmt::Formatter<'_>, values: &ValueSet) -> fmt::Result {
    let values = values.as_slice();
    f.write_str("[")?;
    for (i, value) in values.iter().take(MAX_LISTED_VALUES).enumerate() {
        if i > 0 {
            f.write_str(" ")?;
        }
        f.write_str(value)?;
    }
    if values.len() > MAX_LISTED_VALUES {
        write!(f, " and {} others", values.len() - MAX_LISTED_VALUES)?;
    }
    f.write_str("]")
}

/// Whether `value` is an integer within the inclusive bounds; with no bounds every value is.
fn within_bounds(value: &str, gte: Option<i64>, lte: Option<i64>) -> bool {
    if gte.is_none() && lte.is_none() {
        return true;
    }
    value
        .parse::<i64>()
        .is_ok_and(|n| gte.is_none_or(|g| n >= g) && lte.is_none_or(|l| n <= l))
}

/// `n` spelled with `zeros` leading zeros after the sign (`005`, `-05`), which parses back to `n`.
fn zero_padded(n: i64, zeros: usize) -> String {
    let sign = if n < 0 { "-" } else { "" };
    format!("{sign}{}{}", "0".repeat(zeros), n.unsigned_abs())
}

/// A NodeSelectorRequirement as pods state them (`nodeSelectorTerms[].matchExpressions[]`),
/// without `minValues`; kept local so the scheduling core does not depend on pod API types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSelectorExpression {
    /// The label key.
    pub key: String,
    /// How the key relates to the values.
    pub operator: Operator,
    /// Values for In/NotIn, or one integer for Gt/Lt/Gte/Lte.
    pub values: Vec<String>,
}

/// Label keys a [`Requirements::compatible`] check lets the other side require even though this
/// side never mentions them.
///
/// A NodePool template does not list zones, architectures or instance families, yet a pod may
/// require them because instance types and offerings define them later; so template checks
/// allow the well-known labels to be undefined, while node checks allow nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowUndefined {
    /// Normalized keys, sorted for binary search.
    keys: Vec<String>,
}

impl AllowUndefined {
    /// Allows no undefined key: every key the other side requires must be defined here unless it
    /// only asks for absence. Used against concrete nodes and NodeClaims.
    pub const fn none() -> Self {
        Self { keys: Vec::new() }
    }

    /// Allows the core and AWS well-known labels, which instance types and offerings define:
    /// upstream's `AllowUndefinedWellKnownLabels`, used against NodePool templates.
    pub fn well_known_labels() -> Self {
        Self::from_keys(
            labels::WELL_KNOWN_LABELS
                .iter()
                .chain(labels::AWS_WELL_KNOWN_LABELS),
        )
    }

    /// Allows exactly `keys` (normalized), for providers or tests with their own label sets.
    pub fn from_keys<I, S>(keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut keys: Vec<String> = keys
            .into_iter()
            .map(|k| labels::normalize(k.as_ref()).to_owned())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        Self { keys }
    }

    /// Whether `key` may be left undefined.
    pub fn contains(&self, key: &str) -> bool {
        self.keys.binary_search_by(|k| k.as_str().cmp(key)).is_ok()
    }
}

/// Why two sets of requirements cannot be met by one node, with enough detail for a pod event
/// to tell the user what to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incompatibility {
    /// The other side requires a key this side never defines and that is not allowed undefined,
    /// so no node this side produces would carry it (often a typo of a well-known label).
    UndefinedKey {
        /// What the other side requires of the key.
        required: Box<Requirement>,
        /// A suggestion such as `did you mean "topology.kubernetes.io/zone"?`.
        hint: Option<String>,
    },
    /// Both sides constrain the key but no value satisfies both, and they do not both accept a
    /// missing label.
    Disjoint {
        /// What the other side requires of the key.
        required: Box<Requirement>,
        /// What this side allows for the key.
        allowed: Box<Requirement>,
        /// A suggestion such as `did you mean "amd64"?`.
        hint: Option<String>,
    },
}

impl Incompatibility {
    /// The label key the two sides disagree on.
    pub fn key(&self) -> &str {
        match self {
            Self::UndefinedKey { required, .. } | Self::Disjoint { required, .. } => required.key(),
        }
    }

    /// The message with the two sides named, e.g. with `("pod", "the NodePool")`:
    /// `key topology.kubernetes.io/zone: pod requires In [us-west-2d] but the NodePool allows
    /// In [us-east-1a us-east-1b]`. The `Display` form leaves the sides anonymous.
    pub fn describe(&self, requirer: &str, provider: &str) -> String {
        Message {
            incompatibility: self,
            roles: Some((requirer, provider)),
        }
        .to_string()
    }
}

impl fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Message {
            incompatibility: self,
            roles: None,
        }
        .fmt(f)
    }
}

impl std::error::Error for Incompatibility {}

/// Renders an [`Incompatibility`], optionally naming who requires and who provides.
struct Message<'a> {
    incompatibility: &'a Incompatibility,
    roles: Option<(&'a str, &'a str)>,
}

impl fmt::Display for Message<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hint = match self.incompatibility {
            Incompatibility::UndefinedKey { required, hint } => {
                write!(f, "key {}: ", required.key)?;
                match self.roles {
                    Some((requirer, provider)) => write!(
                        f,
                        "{requirer} requires {} but {provider} does not define the key",
                        Constraint(required)
                    )?,
                    None => write!(
                        f,
                        "requires {} but no requirement or label defines the key",
                        Constraint(required)
                    )?,
                }
                hint
            }
            Incompatibility::Disjoint {
                required,
                allowed,
                hint,
            } => {
                write!(f, "key {}: ", required.key)?;
                match self.roles {
                    Some((requirer, provider)) => write!(
                        f,
                        "{requirer} requires {} but {provider} allows {}",
                        Constraint(required),
                        Constraint(allowed)
                    )?,
                    None => write!(
                        f,
                        "requires {} but only {} is allowed",
                        Constraint(required),
                        Constraint(allowed)
                    )?,
                }
                hint
            }
        };
        match hint {
            Some(hint) => write!(f, " ({hint})"),
            None => Ok(()),
        }
    }
}

/// A conflict found without allocating; turned into an [`Incompatibility`] only when reported.
enum Conflict<'a> {
    Undefined(&'a Requirement),
    Disjoint {
        required: &'a Requirement,
        allowed: &'a Requirement,
    },
}

/// Requirements on several label keys, at most one per (normalized) key, sorted by key: the
/// combined constraints of a pod, a NodePool template, an instance type or a NodeClaim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requirements {
    /// Sorted by key, keys unique.
    by_key: Vec<Requirement>,
}

impl Requirements {
    /// No constraint at all: any node satisfies it.
    pub const fn new() -> Self {
        Self { by_key: Vec::new() }
    }

    /// The requirements of a NodePool template or NodeClaim spec, intersecting repeated keys.
    pub fn from_node_selector_requirements(
        requirements: &[NodeSelectorRequirementWithMinValues],
    ) -> Self {
        requirements
            .iter()
            .map(Requirement::from_node_selector_requirement)
            .collect()
    }

    /// `key In [value]` for every label: how template labels, pod `nodeSelector`s and existing
    /// nodes' labels enter the algebra.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Self {
        labels
            .iter()
            .map(|(key, value)| Requirement::new(key, Operator::In, [value.as_str()], None))
            .collect()
    }

    /// The requirements of one node selector term (its expressions are ANDed).
    pub fn from_expressions(expressions: &[NodeSelectorExpression]) -> Self {
        expressions
            .iter()
            .map(|e| {
                Requirement::new(
                    &e.key,
                    e.operator,
                    e.values.iter().map(String::as_str),
                    None,
                )
            })
            .collect()
    }

    /// A pod's requirements: its `nodeSelector` intersected with each of `terms`.
    ///
    /// Like upstream, the caller passes the first required node-affinity term (terms are ORed, and
    /// the relaxation loop drops the first one while more remain) and, while preferences are
    /// treated as requirements, the heaviest preferred term.
    pub fn for_pod(
        node_selector: &BTreeMap<String, String>,
        terms: &[&[NodeSelectorExpression]],
    ) -> Self {
        let mut requirements = Self::from_labels(node_selector);
        for term in terms {
            requirements.add(&Self::from_expressions(term));
        }
        requirements
    }

    /// Intersects `requirement` into the one for its key (or adds it), layering a constraint.
    pub fn add_requirement(&mut self, requirement: Requirement) {
        match self.position(&requirement.key) {
            Ok(i) => self.by_key[i] = self.by_key[i].intersection(&requirement),
            Err(i) => self.by_key.insert(i, requirement),
        }
    }

    /// Intersects every requirement of `other` into this set, key by key: how a NodeClaim being
    /// planned narrows as pods are added to it.
    pub fn add(&mut self, other: &Self) {
        for requirement in &other.by_key {
            match self.position(&requirement.key) {
                Ok(i) => self.by_key[i] = self.by_key[i].intersection(requirement),
                Err(i) => self.by_key.insert(i, requirement.clone()),
            }
        }
    }

    /// The requirement for `key` (aliases are normalized), if this set constrains it.
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.position(labels::normalize(key))
            .ok()
            .map(|i| &self.by_key[i])
    }

    /// The requirements in key order.
    pub fn iter(&self) -> std::slice::Iter<'_, Requirement> {
        self.by_key.iter()
    }

    /// The number of constrained keys.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no key is constrained.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Whether a node shaped by `self` (e.g. a NodePool template) can satisfy `other` (e.g. a
    /// pod), with upstream's `Compatible` rules:
    /// * a key only `other` mentions is fine if it is in `allow_undefined` or `other` accepts the
    ///   label being absent (`NotIn`, `DoesNotExist`); otherwise it is
    ///   [`Incompatibility::UndefinedKey`], with a typo hint from the allowed and defined keys;
    /// * a key both mention must have a common value, unless both accept absence
    ///   ([`Incompatibility::Disjoint`], with a value typo hint).
    ///
    /// Undefined keys are reported before disjoint ones, first in key order. Prefer
    /// [`Requirements::is_compatible`] when the reason is not needed.
    pub fn compatible(
        &self,
        other: &Self,
        allow_undefined: &AllowUndefined,
    ) -> Result<(), Incompatibility> {
        match self.first_conflict(other, Some(allow_undefined)) {
            None => Ok(()),
            Some(conflict) => Err(self.explain(conflict, Some(allow_undefined))),
        }
    }

    /// [`Requirements::compatible`] without building the error: allocation-free for the
    /// bin-packing loop.
    pub fn is_compatible(&self, other: &Self, allow_undefined: &AllowUndefined) -> bool {
        self.first_conflict(other, Some(allow_undefined)).is_none()
    }

    /// Whether every key both sides constrain has a common value (or both accept absence); keys
    /// only one side mentions are ignored. Upstream's `Intersects`.
    pub fn intersects(&self, other: &Self) -> Result<(), Incompatibility> {
        match self.first_conflict(other, None) {
            None => Ok(()),
            Some(conflict) => Err(self.explain(conflict, None)),
        }
    }

    /// The labels a node launched for these requirements carries, as upstream's `Labels()`: for
    /// every key users may set (not [`labels::is_restricted_label`]) whose requirement the label's
    /// absence would not satisfy, one allowed value ([`Requirement::any`], deterministic). So a
    /// pod requiring `team Exists` or `team In [a b]` lands on a node that really has `team`.
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.by_key
            .iter()
            .filter(|r| !r.allows_absence() && !labels::is_restricted_label(&r.key))
            .filter_map(|r| Some((r.key.to_string(), r.any()?)))
            .collect()
    }

    /// The labels a NodeClaim carries from these requirements before it launches: as
    /// [`Requirements::labels`] without the well-known and restricted keys
    /// ([`labels::is_restricted_node_label`]), which the cloud provider sets from what it launched.
    pub fn nodeclaim_labels(&self) -> BTreeMap<String, String> {
        let mut out = self.labels();
        out.retain(|key, _| !labels::is_restricted_node_label(key));
        out
    }

    /// Whether a node carrying exactly `node_labels` satisfies every requirement; a key missing
    /// from the node satisfies only `NotIn` and `DoesNotExist`. Deprecated alias labels on the
    /// node count for their current key.
    pub fn is_compatible_labels(&self, node_labels: &BTreeMap<String, String>) -> bool {
        self.first_unmet_by_labels(node_labels).is_none()
    }

    /// The first requirement (in key order) a node carrying exactly `node_labels` fails, by the
    /// rule of [`Requirements::is_compatible_labels`].
    pub fn first_unmet_by_labels(
        &self,
        node_labels: &BTreeMap<String, String>,
    ) -> Option<&Requirement> {
        self.by_key
            .iter()
            .find(|r| match label_value(node_labels, &r.key) {
                Some(value) => !r.has(value),
                None => !r.allows_absence(),
            })
    }

    /// Node selector requirements stating exactly these requirements, in key order, for a
    /// NodeClaim's `spec.requirements`.
    pub fn to_node_selector_requirements(&self) -> Vec<NodeSelectorRequirementWithMinValues> {
        self.by_key
            .iter()
            .flat_map(Requirement::to_node_selector_requirements)
            .collect()
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.by_key.binary_search_by(|r| (*r.key).cmp(key))
    }

    /// Merge-joins both key-sorted lists. Returns the first undefined key if `allow_undefined` is
    /// given and one exists, else the first disjoint key.
    fn first_conflict<'a>(
        &'a self,
        other: &'a Self,
        allow_undefined: Option<&AllowUndefined>,
    ) -> Option<Conflict<'a>> {
        let mut mine = self.by_key.iter().peekable();
        let mut disjoint = None;
        for required in &other.by_key {
            while mine.next_if(|r| r.key < required.key).is_some() {}
            match mine.peek() {
                Some(&allowed) if allowed.key == required.key => {
                    if disjoint.is_none() && !allowed.coexists_with(required) {
                        disjoint = Some(Conflict::Disjoint { required, allowed });
                        if allow_undefined.is_none() {
                            break;
                        }
                    }
                }
                _ => {
                    if let Some(allow) = allow_undefined
                        && !allow.contains(&required.key)
                        && !required.allows_absence()
                    {
                        return Some(Conflict::Undefined(required));
                    }
                }
            }
        }
        disjoint
    }

    /// Builds the reportable error, with hints, for a conflict.
    fn explain(
        &self,
        conflict: Conflict<'_>,
        allow_undefined: Option<&AllowUndefined>,
    ) -> Incompatibility {
        match conflict {
            Conflict::Undefined(required) => {
                let allowed_keys = allow_undefined
                    .into_iter()
                    .flat_map(|a| a.keys.iter().map(String::as_str));
                let defined_keys = self.by_key.iter().map(Requirement::key);
                let hint = suggest_key(required.key(), allowed_keys.chain(defined_keys))
                    .map(|key| format!("did you mean {key:?}?"));
                Incompatibility::UndefinedKey {
                    required: Box::new(required.clone()),
                    hint,
                }
            }
            Conflict::Disjoint { required, allowed } => Incompatibility::Disjoint {
                required: Box::new(required.clone()),
                allowed: Box::new(allowed.clone()),
                hint: suggest_value(required, allowed),
            },
        }
    }
}

impl FromIterator<Requirement> for Requirements {
    /// Collects requirements, intersecting those that share a key.
    fn from_iter<T: IntoIterator<Item = Requirement>>(iter: T) -> Self {
        let mut requirements = Self::new();
        for requirement in iter {
            requirements.add_requirement(requirement);
        }
        requirements
    }
}

impl<'a> IntoIterator for &'a Requirements {
    type Item = &'a Requirement;
    type IntoIter = std::slice::Iter<'a, Requirement>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl fmt::Display for Requirements {
    /// `key1 In [a], key2 Exists`, in key order, for events and logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.by_key.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

/// The node's value for `key`, also looking under the deprecated aliases of `key`.
fn label_value<'l>(node_labels: &'l BTreeMap<String, String>, key: &str) -> Option<&'l str> {
    node_labels
        .get(key)
        .or_else(|| {
            labels::NORMALIZED_LABELS
                .iter()
                .filter(|(_, current)| *current == key)
                .find_map(|(alias, _)| node_labels.get(*alias))
        })
        .map(String::as_str)
}

/// The part of a label key after its `prefix/`, if any.
fn label_name(key: &str) -> &str {
    key.split_once('/').map_or(key, |(_, name)| name)
}

/// How many edits still count as a typo of `intended`: a fifth of its length, at least one.
fn typo_budget(intended: &str) -> usize {
    (intended.len() / 5).max(1)
}

/// The key the user most likely meant: one with the same name after the prefix, then one that
/// contains the typed key, then the closest within the typo budget; ties go to the smallest key.
fn suggest_key<'c>(typed: &str, candidates: impl Iterator<Item = &'c str>) -> Option<&'c str> {
    let name = label_name(typed);
    candidates
        .filter(|candidate| *candidate != typed)
        .filter_map(|candidate| {
            let rank = if label_name(candidate) == name {
                0
            } else if typed.len() >= 3 && candidate.contains(typed) {
                1
            } else {
                2
            };
            let distance = typo_distance(typed, candidate);
            (rank < 2 || distance <= typo_budget(candidate)).then_some((rank, distance, candidate))
        })
        .min()
        .map(|(_, _, candidate)| candidate)
}

/// A hint for a disjoint key: the allowed value closest to a required one (case-insensitive
/// equality first), or a reminder that bounded keys only take integers.
fn suggest_value(required: &Requirement, allowed: &Requirement) -> Option<String> {
    if required.complement {
        return None;
    }
    if allowed.complement {
        let bounded = allowed.gte.is_some() || allowed.lte.is_some();
        let non_integer = required.values().any(|v| v.parse::<i64>().is_err());
        return (bounded && non_integer).then(|| "values of this key must be integers".to_owned());
    }
    required
        .values()
        .find_map(|typed| {
            allowed
                .values()
                .filter_map(|candidate| {
                    if candidate.eq_ignore_ascii_case(typed) {
                        return Some((0, candidate));
                    }
                    let distance = typo_distance(typed, candidate);
                    (distance <= typo_budget(candidate)).then_some((distance, candidate))
                })
                .min()
        })
        .map(|(_, candidate)| format!("did you mean {candidate:?}?"))
}

/// Edit distance counting insertions, deletions, substitutions and swaps of adjacent characters
/// (optimal string alignment), over bytes since label keys and values are ASCII.
fn typo_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut before_previous = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let substitution = previous[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut best = substitution.min(previous[j] + 1).min(current[j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before_previous[j - 2] + 1);
            }
            current[j] = best;
        }
        std::mem::swap(&mut before_previous, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(operator: Operator, values: &[&str]) -> Requirement {
        Requirement::new("key", operator, values.iter().copied(), None)
    }

    fn keyed(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement::new(key, operator, values.iter().copied(), None)
    }

    fn set(requirements: Vec<Requirement>) -> Requirements {
        requirements.into_iter().collect()
    }

    /// One requirement per operator, with values chosen so that pairs overlap partially.
    fn fixtures() -> Vec<(&'static str, Requirement)> {
        vec![
            ("In [1 5 A]", req(Operator::In, &["A", "5", "1", "5"])),
            ("NotIn [5 B]", req(Operator::NotIn, &["B", "5"])),
            ("Exists", req(Operator::Exists, &[])),
            ("DoesNotExist", req(Operator::DoesNotExist, &[])),
            ("Gt 1", req(Operator::Gt, &["1"])),
            ("Lt 9", req(Operator::Lt, &["9"])),
            ("Gte 5", req(Operator::Gte, &["5"])),
            ("Lte 5", req(Operator::Lte, &["5"])),
        ]
    }

    /// Expected `row ∩ column`, in fixture order, written out from the semantics.
    const INTERSECTIONS: [[&str; 8]; 8] = [
        // In [1 5 A] ∩ …
        [
            "In [1 5 A]",
            "In [1 A]",
            "In [1 5 A]",
            "DoesNotExist",
            "In [5]",
            "In [1 5]",
            "In [5]",
            "In [1 5]",
        ],
        // NotIn [5 B] ∩ … (B is not an integer, so bounds drop it from the excluded list)
        [
            "In [1 A]",
            "NotIn [5 B]",
            "NotIn [5 B]",
            "DoesNotExist",
            "NotIn [5] and Gte 2",
            "NotIn [5] and Lte 8",
            "NotIn [5] and Gte 5",
            "NotIn [5] and Lte 5",
        ],
        // Exists ∩ …
        [
            "In [1 5 A]",
            "NotIn [5 B]",
            "Exists",
            "DoesNotExist",
            "Gte 2",
            "Lte 8",
            "Gte 5",
            "Lte 5",
        ],
        // DoesNotExist ∩ …
        [
            "DoesNotExist",
            "DoesNotExist",
            "DoesNotExist",
            "DoesNotExist",
            "DoesNotExist",
            "DoesNotExist",
            "DoesNotExist",
            "DoesNotExist",
        ],
        // Gt 1 (Gte 2) ∩ …
        [
            "In [5]",
            "NotIn [5] and Gte 2",
            "Gte 2",
            "DoesNotExist",
            "Gte 2",
            "Gte 2 and Lte 8",
            "Gte 5",
            "Gte 2 and Lte 5",
        ],
        // Lt 9 (Lte 8) ∩ …
        [
            "In [1 5]",
            "NotIn [5] and Lte 8",
            "Lte 8",
            "DoesNotExist",
            "Gte 2 and Lte 8",
            "Lte 8",
            "Gte 5 and Lte 8",
            "Lte 5",
        ],
        // Gte 5 ∩ …
        [
            "In [5]",
            "NotIn [5] and Gte 5",
            "Gte 5",
            "DoesNotExist",
            "Gte 5",
            "Gte 5 and Lte 8",
            "Gte 5",
            "Gte 5 and Lte 5",
        ],
        // Lte 5 ∩ …
        [
            "In [1 5]",
            "NotIn [5] and Lte 5",
            "Lte 5",
            "DoesNotExist",
            "Gte 2 and Lte 5",
            "Lte 5",
            "Gte 5 and Lte 5",
            "Lte 5",
        ],
    ];

    const PROBES: [&str; 12] = ["0", "1", "2", "5", "05", "+5", "8", "9", "10", "A", "B", ""];

    /// Expected members among `PROBES`, per fixture.
    const MEMBERS: [&[&str]; 8] = [
        &["1", "5", "A"],
        &["0", "1", "2", "05", "+5", "8", "9", "10", "A", ""],
        &PROBES,
        &[],
        &["2", "5", "05", "+5", "8", "9", "10"],
        &["0", "1", "2", "5", "05", "+5", "8"],
        &["5", "05", "+5", "8", "9", "10"],
        &["0", "1", "2", "5", "05", "+5"],
    ];

    #[test]
    fn intersection_table_covers_every_operator_pair() {
        let fixtures = fixtures();
        for (i, (left_name, left)) in fixtures.iter().enumerate() {
            for (j, (right_name, right)) in fixtures.iter().enumerate() {
                let result = left.intersection(right);
                assert_eq!(
                    result.to_string(),
                    format!("key {}", INTERSECTIONS[i][j]),
                    "{left_name} ∩ {right_name}"
                );
                assert_eq!(
                    left.intersects(right),
                    !result.is_empty_set(),
                    "{left_name} ∩ {right_name}"
                );
                for probe in PROBES {
                    assert_eq!(
                        result.has(probe),
                        left.has(probe) && right.has(probe),
                        "{left_name} ∩ {right_name} has {probe:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn has_table_covers_every_operator() {
        for ((name, requirement), members) in fixtures().iter().zip(MEMBERS) {
            for probe in PROBES {
                assert_eq!(
                    requirement.has(probe),
                    members.contains(&probe),
                    "{name} has {probe:?}"
                );
            }
        }
    }

    #[test]
    fn operators_read_back_like_upstream() {
        let expected = [
            (Operator::In, vec![(Operator::In, vec!["1", "5", "A"])]),
            (Operator::NotIn, vec![(Operator::NotIn, vec!["5", "B"])]),
            (Operator::Exists, vec![(Operator::Exists, vec![])]),
            (
                Operator::DoesNotExist,
                vec![(Operator::DoesNotExist, vec![])],
            ),
            (Operator::Exists, vec![(Operator::Gte, vec!["2"])]),
            (Operator::Exists, vec![(Operator::Lte, vec!["8"])]),
            (Operator::Exists, vec![(Operator::Gte, vec!["5"])]),
            (Operator::Exists, vec![(Operator::Lte, vec!["5"])]),
        ];
        for ((name, requirement), (operator, selectors)) in fixtures().iter().zip(expected) {
            assert_eq!(requirement.operator(), operator, "{name}");
            let written: Vec<_> = requirement
                .to_node_selector_requirements()
                .into_iter()
                .map(|r| (r.operator, r.values))
                .collect();
            let selectors: Vec<_> = selectors
                .into_iter()
                .map(|(op, values)| {
                    (
                        op,
                        values.into_iter().map(str::to_owned).collect::<Vec<_>>(),
                    )
                })
                .collect();
            assert_eq!(written, selectors, "{name}");
        }
        let bounded = req(Operator::NotIn, &["3"]).intersection(&req(Operator::Gt, &["1"]));
        assert_eq!(bounded.operator(), Operator::NotIn);
        let ops: Vec<_> = bounded
            .to_node_selector_requirements()
            .iter()
            .map(|r| r.operator)
            .collect();
        assert_eq!(ops, [Operator::NotIn, Operator::Gte]);
    }

    #[test]
    fn bounds_reject_non_integer_values() {
        let gt = req(Operator::Gt, &["1"]);
        for value in ["abc", "2.5", "", "1e3", " 3", "0x10"] {
            assert!(!gt.has(value), "{value:?}");
        }
        assert!(gt.has("+3"));
        assert!(gt.has("003"));
        assert!(!req(Operator::Lte, &["5"]).has("five"));
        // Values that are not integers never survive intersection with bounds.
        let filtered =
            req(Operator::In, &["large", "4", "16"]).intersection(&req(Operator::Gte, &["8"]));
        assert_eq!(filtered.to_string(), "key In [16]");
    }

    #[test]
    fn malformed_or_unsatisfiable_bounds_match_nothing() {
        for (operator, values) in [
            (Operator::Gt, vec!["abc"]),
            (Operator::Lt, vec!["1.5"]),
            (Operator::Gte, vec![]),
            (Operator::Lte, vec![""]),
        ] {
            let r = req(operator, &values);
            assert!(r.is_empty_set(), "{operator:?} {values:?}");
            assert_eq!(r.any(), None);
        }
        let max = i64::MAX.to_string();
        let min = i64::MIN.to_string();
        assert!(req(Operator::Gt, &[&max]).is_empty_set());
        assert!(req(Operator::Lt, &[&min]).is_empty_set());
        assert!(req(Operator::Gte, &[&max]).has(&max));
        assert!(req(Operator::Lte, &[&min]).has(&min));
        assert_eq!(
            req(Operator::Gt, &["5", "7"]).gte(),
            Some(6),
            "the first value is the bound"
        );
    }

    #[test]
    fn contradictory_bounds_collapse_to_does_not_exist_keeping_min_values() {
        let gt5 = Requirement::new("key", Operator::Gt, ["5"], Some(2));
        let lt5 = Requirement::new("key", Operator::Lt, ["5"], Some(3));
        let empty = gt5.intersection(&lt5);
        assert!(empty.is_empty_set());
        assert_eq!(empty.operator(), Operator::DoesNotExist);
        assert_eq!(empty.min_values(), Some(3));
        assert!(!gt5.intersects(&lt5));
        // Gt 5 and Lt 6 leave no integer either.
        assert!(gt5.intersection(&req(Operator::Lt, &["6"])).is_empty_set());
        // Gte 5 and Lte 5 leave exactly 5.
        let five = req(Operator::Gte, &["5"]).intersection(&req(Operator::Lte, &["5"]));
        assert!(five.has("5") && !five.has("4") && !five.has("6"));
        assert_eq!(five.any().as_deref(), Some("5"));
        assert_eq!((five.gte(), five.lte()), (Some(5), Some(5)));
    }

    #[test]
    fn min_values_survive_intersections() {
        let a = Requirement::new("key", Operator::In, ["a", "b", "c"], Some(2));
        let b = Requirement::new("key", Operator::Exists, Vec::<String>::new(), None);
        let c = Requirement::new("key", Operator::NotIn, ["c"], Some(1));
        assert_eq!(a.intersection(&b).min_values(), Some(2));
        assert_eq!(b.intersection(&a).min_values(), Some(2));
        assert_eq!(a.intersection(&c).min_values(), Some(2));
        assert_eq!(b.intersection(&c).min_values(), Some(1));
        assert_eq!(b.min_values(), None);
        let api = |min_values| NodeSelectorRequirementWithMinValues {
            key: "key".into(),
            operator: Operator::Exists,
            values: vec![],
            min_values,
        };
        let merged =
            Requirements::from_node_selector_requirements(&[api(Some(3)), api(Some(5)), api(None)]);
        assert_eq!(merged.get("key").and_then(Requirement::min_values), Some(5));
        assert_eq!(
            Requirement::from_node_selector_requirement(&api(Some(-1))).min_values(),
            Some(0)
        );
        assert_eq!(a.to_string(), "key In [a b c] (minValues 2)");
    }

    #[test]
    fn any_is_deterministic_and_a_member() {
        assert_eq!(req(Operator::In, &["b", "a"]).any().as_deref(), Some("a"));
        assert_eq!(req(Operator::Exists, &[]).any().as_deref(), Some("0"));
        assert_eq!(
            req(Operator::NotIn, &["0", "1"]).any().as_deref(),
            Some("2")
        );
        assert_eq!(req(Operator::Gte, &["10"]).any().as_deref(), Some("10"));
        assert_eq!(req(Operator::Lt, &["-2"]).any().as_deref(), Some("-3"));
        assert_eq!(req(Operator::DoesNotExist, &[]).any(), None);
        let pinned = req(Operator::NotIn, &["5"])
            .intersection(&req(Operator::Gte, &["5"]))
            .intersection(&req(Operator::Lte, &["5"]));
        assert!(!pinned.is_empty_set());
        assert_eq!(pinned.any().as_deref(), Some("05"));
        let negative = req(Operator::NotIn, &["-4"])
            .intersection(&req(Operator::Gte, &["-4"]))
            .intersection(&req(Operator::Lte, &["-4"]));
        assert_eq!(negative.any().as_deref(), Some("-04"));
        assert!(negative.has("-04"));
    }

    #[test]
    fn len_distinguishes_finite_and_infinite_sets() {
        assert_eq!(req(Operator::In, &["a", "b", "a"]).len(), Some(2));
        assert_eq!(req(Operator::DoesNotExist, &[]).len(), Some(0));
        assert_eq!(req(Operator::NotIn, &["a"]).len(), None);
        assert_eq!(req(Operator::Gt, &["1"]).len(), None);
        assert_eq!(
            req(Operator::NotIn, &["b", "a"])
                .values()
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
    }

    #[test]
    fn long_value_lists_are_summarised() {
        let many = req(Operator::In, &["a", "b", "c", "d", "e", "f", "g"]);
        assert_eq!(many.to_string(), "key In [a b c d e and 2 others]");
    }

    #[test]
    fn keys_are_normalized_everywhere() {
        let node_selector: BTreeMap<String, String> = [
            ("failure-domain.beta.kubernetes.io/zone", "us-east-1a"),
            ("failure-domain.beta.kubernetes.io/region", "us-east-1"),
            ("beta.kubernetes.io/arch", "amd64"),
            ("beta.kubernetes.io/os", "linux"),
            ("beta.kubernetes.io/instance-type", "m5.large"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let requirements = Requirements::from_labels(&node_selector);
        let keys: Vec<_> = requirements.iter().map(Requirement::key).collect();
        assert_eq!(
            keys,
            [
                labels::ARCH,
                labels::OS,
                labels::INSTANCE_TYPE,
                labels::REGION,
                labels::ZONE
            ]
        );
        assert!(
            requirements
                .get("beta.kubernetes.io/arch")
                .is_some_and(|r| r.has("amd64"))
        );
        assert!(AllowUndefined::from_keys(["beta.kubernetes.io/os"]).contains(labels::OS));
    }

    #[test]
    fn add_intersects_per_key() {
        let mut nodepool = set(vec![
            keyed(labels::ZONE, Operator::In, &["a", "b", "c"]),
            keyed(labels::ARCH, Operator::In, &["amd64"]),
        ]);
        let pod = set(vec![
            keyed(labels::ZONE, Operator::NotIn, &["a"]),
            keyed("example.com/team", Operator::In, &["x"]),
        ]);
        nodepool.add(&pod);
        assert_eq!(
            nodepool.to_string(),
            "example.com/team In [x], kubernetes.io/arch In [amd64], topology.kubernetes.io/zone In [b c]"
        );
        assert_eq!(nodepool.len(), 3);
        nodepool.add_requirement(keyed(labels::ZONE, Operator::In, &["c", "d"]));
        assert_eq!(
            nodepool
                .get(labels::ZONE)
                .map(ToString::to_string)
                .as_deref(),
            Some("topology.kubernetes.io/zone In [c]")
        );
    }

    #[test]
    fn for_pod_layers_node_selector_and_terms() {
        let node_selector = BTreeMap::from([(labels::ARCH.to_owned(), "amd64".to_owned())]);
        let expression = |values: &[&str]| NodeSelectorExpression {
            key: labels::ZONE.to_owned(),
            operator: Operator::In,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        };
        let required = [expression(&["a", "b"])];
        let preferred = [expression(&["b"])];
        let pod = Requirements::for_pod(&node_selector, &[&required, &preferred]);
        assert_eq!(
            pod.to_string(),
            "kubernetes.io/arch In [amd64], topology.kubernetes.io/zone In [b]"
        );
        assert_eq!(
            Requirements::for_pod(&BTreeMap::new(), &[]),
            Requirements::new()
        );
    }

    #[test]
    fn compatibility_of_undefined_keys() {
        let nodepool = set(vec![keyed(labels::ARCH, Operator::In, &["amd64"])]);
        let none = AllowUndefined::none();
        let well_known = AllowUndefined::well_known_labels();
        let cases = [
            // (pod requirement, allowed with none, allowed with well-known)
            (
                keyed("example.com/team", Operator::In, &["a"]),
                false,
                false,
            ),
            (
                keyed("example.com/team", Operator::Exists, &[]),
                false,
                false,
            ),
            (
                keyed("example.com/team", Operator::Gt, &["1"]),
                false,
                false,
            ),
            (
                keyed("example.com/team", Operator::NotIn, &["a"]),
                true,
                true,
            ),
            (
                keyed("example.com/team", Operator::DoesNotExist, &[]),
                true,
                true,
            ),
            (
                keyed(labels::ZONE, Operator::In, &["us-west-2d"]),
                false,
                true,
            ),
            (
                keyed(labels::INSTANCE_FAMILY, Operator::In, &["m5"]),
                false,
                true,
            ),
            (
                keyed(
                    "failure-domain.beta.kubernetes.io/zone",
                    Operator::In,
                    &["a"],
                ),
                false,
                true,
            ),
            (
                keyed(labels::HOSTNAME, Operator::In, &["node-1"]),
                false,
                false,
            ),
        ];
        for (requirement, with_none, with_well_known) in cases {
            let pod = set(vec![requirement.clone()]);
            assert_eq!(
                nodepool.compatible(&pod, &none).is_ok(),
                with_none,
                "{requirement} / none"
            );
            assert_eq!(
                nodepool.is_compatible(&pod, &none),
                with_none,
                "{requirement} / none"
            );
            assert_eq!(
                nodepool.compatible(&pod, &well_known).is_ok(),
                with_well_known,
                "{requirement} / well-known"
            );
            assert!(
                nodepool.intersects(&pod).is_ok(),
                "undefined keys never fail intersects"
            );
        }
        let err = nodepool
            .compatible(
                &set(vec![keyed("example.com/team", Operator::In, &["a"])]),
                &well_known,
            )
            .unwrap_err();
        assert_eq!(err.key(), "example.com/team");
        assert_eq!(
            err.to_string(),
            "key example.com/team: requires In [a] but no requirement or label defines the key"
        );
        assert_eq!(
            err.describe("pod", "NodePool default"),
            "key example.com/team: pod requires In [a] but NodePool default does not define the key"
        );
    }

    #[test]
    fn compatibility_of_shared_keys() {
        let zone = |operator, values: &[&str]| keyed(labels::ZONE, operator, values);
        let cases = [
            // (NodePool, pod, compatible)
            (
                zone(Operator::In, &["a", "b"]),
                zone(Operator::In, &["b", "c"]),
                true,
            ),
            (
                zone(Operator::In, &["a", "b"]),
                zone(Operator::In, &["c"]),
                false,
            ),
            (
                zone(Operator::In, &["a"]),
                zone(Operator::NotIn, &["a"]),
                false,
            ),
            (
                zone(Operator::In, &["a"]),
                zone(Operator::DoesNotExist, &[]),
                false,
            ),
            (
                zone(Operator::Exists, &[]),
                zone(Operator::DoesNotExist, &[]),
                false,
            ),
            (
                zone(Operator::DoesNotExist, &[]),
                zone(Operator::In, &["a"]),
                false,
            ),
            (
                zone(Operator::DoesNotExist, &[]),
                zone(Operator::Exists, &[]),
                false,
            ),
            // Both sides accept a node without the label.
            (
                zone(Operator::DoesNotExist, &[]),
                zone(Operator::DoesNotExist, &[]),
                true,
            ),
            (
                zone(Operator::DoesNotExist, &[]),
                zone(Operator::NotIn, &["a"]),
                true,
            ),
            (
                zone(Operator::NotIn, &["a"]),
                zone(Operator::DoesNotExist, &[]),
                true,
            ),
            (
                zone(Operator::NotIn, &["a"]),
                zone(Operator::NotIn, &["a"]),
                true,
            ),
            // Bounds.
            (
                zone(Operator::Gt, &["5"]),
                zone(Operator::Lt, &["3"]),
                false,
            ),
            (zone(Operator::Gt, &["5"]), zone(Operator::Lt, &["7"]), true),
            (
                zone(Operator::Gte, &["5"]),
                zone(Operator::Lte, &["5"]),
                true,
            ),
            (
                zone(Operator::In, &["4", "8"]),
                zone(Operator::Gt, &["4"]),
                true,
            ),
            (
                zone(Operator::In, &["4"]),
                zone(Operator::Gt, &["4"]),
                false,
            ),
        ];
        let well_known = AllowUndefined::well_known_labels();
        for (nodepool, pod, compatible) in cases {
            let (nodepool_set, pod_set) = (set(vec![nodepool.clone()]), set(vec![pod.clone()]));
            let context = format!("{nodepool} vs {pod}");
            assert_eq!(
                nodepool_set.compatible(&pod_set, &well_known).is_ok(),
                compatible,
                "{context}"
            );
            assert_eq!(
                nodepool_set.intersects(&pod_set).is_ok(),
                compatible,
                "{context}"
            );
            assert_eq!(
                pod_set.intersects(&nodepool_set).is_ok(),
                compatible,
                "{context} (swapped)"
            );
        }
    }

    #[test]
    fn disjoint_values_produce_an_actionable_message() {
        let nodepool = set(vec![keyed(
            labels::ZONE,
            Operator::In,
            &["us-east-1b", "us-east-1a"],
        )]);
        let pod = set(vec![keyed(labels::ZONE, Operator::In, &["us-west-2d"])]);
        let err = nodepool
            .compatible(&pod, &AllowUndefined::well_known_labels())
            .unwrap_err();
        assert_eq!(
            err.describe("pod", "the NodePool"),
            "key topology.kubernetes.io/zone: pod requires In [us-west-2d] but the NodePool allows In [us-east-1a us-east-1b]"
        );
        assert_eq!(
            err.to_string(),
            "key topology.kubernetes.io/zone: requires In [us-west-2d] but only In [us-east-1a us-east-1b] is allowed"
        );
        let dne = set(vec![keyed("example.com/gpu", Operator::DoesNotExist, &[])]);
        let wants = set(vec![keyed("example.com/gpu", Operator::In, &["true"])]);
        assert_eq!(
            dne.intersects(&wants).unwrap_err().to_string(),
            "key example.com/gpu: requires In [true] but only DoesNotExist is allowed"
        );
    }

    #[test]
    fn undefined_keys_are_reported_before_disjoint_ones() {
        let nodepool = set(vec![keyed("a.example.com/x", Operator::In, &["1"])]);
        let pod = set(vec![
            keyed("a.example.com/x", Operator::In, &["2"]),
            keyed("b.example.com/y", Operator::In, &["1"]),
        ]);
        let err = nodepool
            .compatible(&pod, &AllowUndefined::none())
            .unwrap_err();
        assert!(matches!(err, Incompatibility::UndefinedKey { .. }), "{err}");
        assert_eq!(err.key(), "b.example.com/y");
        let err = nodepool.intersects(&pod).unwrap_err();
        assert!(matches!(err, Incompatibility::Disjoint { .. }), "{err}");
    }

    #[test]
    fn key_hints_suggest_well_known_and_defined_keys() {
        let nodepool = set(vec![keyed("example.com/team", Operator::In, &["a"])]);
        let well_known = AllowUndefined::well_known_labels();
        let hint = |key: &str, allow: &AllowUndefined| match nodepool
            .compatible(&set(vec![keyed(key, Operator::In, &["x"])]), allow)
        {
            Err(Incompatibility::UndefinedKey { hint, .. }) => hint,
            other => panic!("{key}: {other:?}"),
        };
        let did_you_mean = |key: &str| Some(format!("did you mean {key:?}?"));
        assert_eq!(
            hint("topology.kubernetes.io/zonee", &well_known),
            did_you_mean(labels::ZONE)
        );
        assert_eq!(hint("zone", &well_known), did_you_mean(labels::ZONE));
        assert_eq!(
            hint("example.org/zone", &well_known),
            did_you_mean(labels::ZONE)
        );
        assert_eq!(
            hint("karpenter.k8s.aws/instance-famliy", &well_known),
            did_you_mean(labels::INSTANCE_FAMILY)
        );
        assert_eq!(
            hint("kubernetes.io/arc", &well_known),
            did_you_mean(labels::ARCH)
        );
        assert_eq!(
            hint("example.com/tema", &well_known),
            did_you_mean("example.com/team")
        );
        assert_eq!(
            hint("team", &AllowUndefined::none()),
            did_you_mean("example.com/team")
        );
        assert_eq!(hint("example.com/unrelated-label", &well_known), None);
        // Well-known labels only hint when they are in the allowed set.
        assert_eq!(
            hint("topology.kubernetes.io/zonee", &AllowUndefined::none()),
            None
        );
        let err = nodepool
            .compatible(
                &set(vec![keyed(
                    "topology.kubernetes.io/zonee",
                    Operator::In,
                    &["x"],
                )]),
                &well_known,
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "key topology.kubernetes.io/zonee: requires In [x] but no requirement or label defines the key \
             (did you mean \"topology.kubernetes.io/zone\"?)"
        );
    }

    #[test]
    fn value_hints_suggest_close_values() {
        let nodepool = set(vec![
            keyed(labels::ARCH, Operator::In, &["amd64", "arm64"]),
            keyed(labels::CAPACITY_TYPE, Operator::In, &["on-demand", "spot"]),
            keyed(labels::INSTANCE_CPU, Operator::Gt, &["4"]),
        ]);
        let hint = |key: &str, values: &[&str]| match nodepool.intersects(&set(vec![keyed(
            key,
            Operator::In,
            values,
        )])) {
            Err(Incompatibility::Disjoint { hint, .. }) => hint,
            other => panic!("{key}: {other:?}"),
        };
        assert_eq!(
            hint(labels::ARCH, &["amd46"]),
            Some("did you mean \"amd64\"?".to_owned())
        );
        assert_eq!(
            hint(labels::ARCH, &["ARM64"]),
            Some("did you mean \"arm64\"?".to_owned())
        );
        assert_eq!(hint(labels::ARCH, &["s390x"]), None);
        assert_eq!(
            hint(labels::CAPACITY_TYPE, &["ondemand"]),
            Some("did you mean \"on-demand\"?".to_owned())
        );
        assert_eq!(
            hint(labels::INSTANCE_CPU, &["four"]),
            Some("values of this key must be integers".to_owned())
        );
        assert_eq!(hint(labels::INSTANCE_CPU, &["2"]), None);
    }

    #[test]
    fn labels_give_every_required_user_settable_key_a_value() {
        let requirements = set(vec![
            keyed(labels::ZONE, Operator::In, &["us-east-1a"]),
            keyed(labels::ARCH, Operator::In, &["amd64", "arm64"]),
            keyed(labels::HOSTNAME, Operator::In, &["node-1"]),
            keyed(labels::NODEPOOL, Operator::In, &["default"]),
            keyed("karpenter.sh/custom", Operator::In, &["x"]),
            keyed(labels::CAPACITY_TYPE, Operator::In, &["spot"]),
            keyed("example.com/team", Operator::In, &["a"]),
            keyed("example.com/tier", Operator::NotIn, &["b"]),
            keyed("example.com/cpu", Operator::Gte, &["4"]),
            keyed("example.com/gone", Operator::DoesNotExist, &[]),
        ]);
        // Restricted keys and requirements the label's absence satisfies (NotIn, DoesNotExist)
        // give no label; every other requirement gives one allowed value.
        let expected = BTreeMap::from(
            [
                (labels::ARCH, "amd64"),
                (labels::CAPACITY_TYPE, "spot"),
                ("example.com/cpu", "4"),
                ("example.com/team", "a"),
                (labels::NODEPOOL, "default"),
                (labels::ZONE, "us-east-1a"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
        assert_eq!(requirements.labels(), expected);
    }

    #[test]
    fn node_labels_satisfy_requirements() {
        let requirements = set(vec![
            keyed(labels::ARCH, Operator::In, &["amd64"]),
            keyed("example.com/team", Operator::NotIn, &["a"]),
            keyed("example.com/gpu", Operator::DoesNotExist, &[]),
        ]);
        let node = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert!(requirements.is_compatible_labels(&node(&[(labels::ARCH, "amd64")])));
        assert!(requirements.is_compatible_labels(&node(&[("beta.kubernetes.io/arch", "amd64")])));
        assert!(
            requirements
                .is_compatible_labels(&node(&[(labels::ARCH, "amd64"), ("example.com/team", "b")]))
        );
        assert!(
            !requirements
                .is_compatible_labels(&node(&[(labels::ARCH, "amd64"), ("example.com/team", "a")]))
        );
        assert!(!requirements.is_compatible_labels(&node(&[
            (labels::ARCH, "amd64"),
            ("example.com/gpu", "true")
        ])));
        assert!(!requirements.is_compatible_labels(&node(&[(labels::ARCH, "arm64")])));
        assert!(!requirements.is_compatible_labels(&node(&[])));
        let exists = set(vec![keyed("example.com/ssd", Operator::Exists, &[])]);
        assert!(!exists.is_compatible_labels(&node(&[])));
        let bounded = set(vec![
            keyed("example.com/cpu", Operator::NotIn, &["3"]).intersection(&keyed(
                "example.com/cpu",
                Operator::Gt,
                &["1"],
            )),
        ]);
        assert!(
            !bounded.is_compatible_labels(&node(&[])),
            "bounds need the label"
        );
        assert!(bounded.is_compatible_labels(&node(&[("example.com/cpu", "4")])));
        assert!(Requirements::new().is_compatible_labels(&node(&[])));
    }

    #[test]
    fn node_selector_requirements_round_trip() {
        let requirements = set(vec![
            keyed(labels::ZONE, Operator::In, &["a", "b"]),
            Requirement::new("example.com/cpu", Operator::NotIn, ["3", "x"], Some(2))
                .intersection(&keyed("example.com/cpu", Operator::Gt, &["1"]))
                .intersection(&keyed("example.com/cpu", Operator::Lt, &["9"])),
            keyed("example.com/gone", Operator::DoesNotExist, &[]),
            keyed("example.com/any", Operator::Exists, &[]),
        ]);
        let written = requirements.to_node_selector_requirements();
        assert_eq!(written.len(), 6);
        assert_eq!(
            Requirements::from_node_selector_requirements(&written),
            requirements
        );
    }

    #[test]
    fn typo_distance_counts_swaps_as_one_edit() {
        assert_eq!(typo_distance("", "abc"), 3);
        assert_eq!(typo_distance("abc", ""), 3);
        assert_eq!(typo_distance("kitten", "sitting"), 3);
        assert_eq!(typo_distance("amd46", "amd64"), 1);
        assert_eq!(typo_distance("zone", "zone"), 0);
    }

    const POOL: [&str; 11] = ["0", "1", "2", "5", "05", "9", "10", "-1", "a", "b", ""];

    fn arb_requirement() -> impl Strategy<Value = Requirement> {
        let operator = prop::sample::select(vec![
            Operator::In,
            Operator::NotIn,
            Operator::Exists,
            Operator::DoesNotExist,
            Operator::Gt,
            Operator::Lt,
            Operator::Gte,
            Operator::Lte,
        ]);
        let values = prop::collection::vec(prop::sample::select(POOL.to_vec()), 0..5);
        (operator, values, -3i64..12, prop::option::of(1u32..5)).prop_map(
            |(operator, values, bound, min_values)| match operator {
                Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                    Requirement::new("key", operator, [bound.to_string()], min_values)
                }
                _ => Requirement::new("key", operator, values, min_values),
            },
        )
    }

    /// Small intersections of generated requirements, so bounded complements with exclusions
    /// and empty sets are common.
    fn arb_layered() -> impl Strategy<Value = Requirement> {
        prop::collection::vec(arb_requirement(), 1..4).prop_map(|layers| {
            let mut layers = layers.into_iter();
            let first = layers.next().unwrap_or_else(|| req(Operator::Exists, &[]));
            layers.fold(first, |acc, r| acc.intersection(&r))
        })
    }

    fn arb_probe() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(POOL.to_vec()).prop_map(str::to_owned),
            (-20i64..20).prop_map(|n| n.to_string()),
        ]
    }

    proptest! {
        #[test]
        fn intersection_is_membership_conjunction(
            a in arb_layered(),
            b in arb_layered(),
            probes in prop::collection::vec(arb_probe(), 1..16),
        ) {
            let both = a.intersection(&b);
            for probe in &probes {
                prop_assert_eq!(both.has(probe), a.has(probe) && b.has(probe), "probe {:?}", probe);
            }
        }

        #[test]
        fn intersection_is_commutative(a in arb_layered(), b in arb_layered()) {
            prop_assert_eq!(a.intersection(&b), b.intersection(&a));
        }

        #[test]
        fn intersection_is_associative(
            a in arb_layered(),
            b in arb_layered(),
            c in arb_layered(),
            probes in prop::collection::vec(arb_probe(), 1..16),
        ) {
            let left = a.intersection(&b).intersection(&c);
            let right = a.intersection(&b.intersection(&c));
            for probe in &probes {
                prop_assert_eq!(left.has(probe), right.has(probe), "probe {:?}", probe);
            }
            prop_assert_eq!(left, right);
        }

        #[test]
        fn intersects_agrees_with_intersection(a in arb_layered(), b in arb_layered()) {
            prop_assert_eq!(a.intersects(&b), !a.intersection(&b).is_empty_set());
        }

        #[test]
        fn any_is_a_member_of_every_non_empty_set(r in arb_layered()) {
            match r.any() {
                Some(value) => prop_assert!(r.has(&value), "{} does not have {:?}", r, value),
                None => prop_assert!(r.is_empty_set(), "{} has no value", r),
            }
        }

        #[test]
        fn node_selector_requirements_round_trip_exactly(r in arb_layered()) {
            let written = r.to_node_selector_requirements();
            let read = Requirements::from_node_selector_requirements(&written);
            prop_assert_eq!(read.get("key"), Some(&r));
        }
    }
}
