//! The instance-type options a planned NodeClaim keeps while pods are packed onto it.

use fixedbitset::FixedBitSet;

/// A set of a pool's instance types, stored as positions in the pool's price order.
///
/// A large solve keeps thousands of planned NodeClaims, each with hundreds of options until the
/// final truncation; one bit per instance type instead of four bytes per option keeps that
/// small (20,000 pods: 20 MB of option lists become well under 1 MB). Iterating positions in
/// ascending order still yields the cheapest type first, which the truncation relies on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeSet {
    ranks: FixedBitSet,
}

impl TypeSet {
    /// The types of `order` (a pool's instance-type indices, cheapest first) that pass `keep`.
    pub fn from_order(order: &[u32], mut keep: impl FnMut(u32) -> bool) -> Self {
        let mut ranks = FixedBitSet::with_capacity(order.len());
        for (rank, &t) in order.iter().enumerate() {
            if keep(t) {
                ranks.insert(rank);
            }
        }
        Self { ranks }
    }

    /// The instance-type indices in the set, cheapest first; `order` is the pool's price order
    /// the set was built from.
    pub fn types<'a>(&'a self, order: &'a [u32]) -> impl Iterator<Item = u32> + 'a {
        self.ranks.ones().map(move |rank| order[rank])
    }

    /// The instance-type indices in the set in the order of `ranks` (positions in `order`, the
    /// pool's price order the set was built from, ordered some other way: by the prices in one
    /// zone, say).
    pub fn types_in<'a>(
        &'a self,
        ranks: &'a [u32],
        order: &'a [u32],
    ) -> impl Iterator<Item = u32> + 'a {
        ranks
            .iter()
            .filter(|&&rank| self.ranks.contains(rank as usize))
            .map(move |&rank| order[rank as usize])
    }

    /// The subset whose types pass `keep`.
    pub fn filter(&self, order: &[u32], mut keep: impl FnMut(u32) -> bool) -> Self {
        let mut ranks = FixedBitSet::with_capacity(self.ranks.len());
        for rank in self.ranks.ones() {
            if keep(order[rank]) {
                ranks.insert(rank);
            }
        }
        Self { ranks }
    }

    /// The types in both sets; both must come from the same price order. A bitwise AND: where a
    /// requirement set's compatible types are already known (memoized per pool), this replaces
    /// a pass that compares every option's labels and offerings again.
    pub fn intersection(&self, other: &Self) -> Self {
        let mut ranks = self.ranks.clone();
        ranks.intersect_with(&other.ranks);
        Self { ranks }
    }

    /// Whether no type is left.
    pub fn is_empty(&self) -> bool {
        self.ranks.is_clear()
    }
}

#[cfg(test)]
mod tests {
    use super::TypeSet;

    #[test]
    fn iterates_in_price_order_and_filters() {
        // Type 2 is cheapest, then 0, then 3, then 1.
        let order = [2, 0, 3, 1];
        let set = TypeSet::from_order(&order, |t| t != 3);
        assert_eq!(set.types(&order).collect::<Vec<_>>(), vec![2, 0, 1]);
        let odd = set.filter(&order, |t| t % 2 == 1);
        assert_eq!(odd.types(&order).collect::<Vec<_>>(), vec![1]);
        assert!(!odd.is_empty());
        assert!(odd.filter(&order, |_| false).is_empty());
        assert!(TypeSet::default().is_empty());
        let cheap = TypeSet::from_order(&order, |t| t == 2 || t == 1);
        assert_eq!(
            set.intersection(&cheap).types(&order).collect::<Vec<_>>(),
            vec![2, 1]
        );
        assert!(
            odd.intersection(&TypeSet::from_order(&order, |t| t == 0))
                .is_empty()
        );
        // Ranked by other prices: type 1 (rank 3), 3 (rank 2, not in the set), 2, then 0.
        assert_eq!(
            set.types_in(&[3, 2, 0, 1], &order).collect::<Vec<_>>(),
            vec![1, 2, 0]
        );
    }
}
