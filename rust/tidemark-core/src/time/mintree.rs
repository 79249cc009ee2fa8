//! A tournament (segment) tree that keeps the minimum of a set of slots.
//!
//! Watermark trackers keep one slot per input (partition or key). A slot holds the
//! input's watermark while the input takes part in the minimum and [`MinTree::EMPTY`]
//! while it is idle or unused. The combined watermark is then [`MinTree::min`], O(1),
//! and changing one slot is O(log n) with an early exit as soon as an ancestor's value
//! does not change (most updates stop after one or two levels, because the updated
//! input is rarely the minimum).
//!
//! Invariant: every internal node `i` holds `min(tree[2i], tree[2i + 1])`.

/// Recomputes node `i` and its ancestors from their children (`tree[2i]`,
/// `tree[2i + 1]`), stopping at the first node whose value does not change. Callers
/// pass an `i` with `2i + 1 < tree.len()` (or 0: nothing to do).
#[inline(always)]
fn propagate(tree: &mut [i64], mut i: usize) {
    assert!(2 * i + 1 < tree.len() || i == 0);
    while i >= 1 {
        // SAFETY: `2i + 1 < tree.len()` holds for the first `i` (asserted) and for
        // every smaller one, so `i`, `2i` and `2i + 1` are in bounds. This loop is the
        // hot path of every watermark update.
        #[allow(unsafe_code)]
        let (l, r, cur) = unsafe {
            (
                *tree.get_unchecked(2 * i),
                *tree.get_unchecked(2 * i + 1),
                tree.get_unchecked_mut(i),
            )
        };
        let m = l.min(r);
        if *cur == m {
            break;
        }
        *cur = m;
        i >>= 1;
    }
}

/// Brings node `i` of a [`NodeMinTree`] (`nodes`, `cap` leaves) up to date as far
/// as `bound` asks, and returns its new value. Pair nodes may lag below their leaves
/// (lazy rises); every stored value stays a lower bound of its subtree's minimum.
/// When the returned value is at most `bound`, it is the subtree's minimum and the
/// leftmost descent from `i` reaches an exact pair holding it; above `bound`, it is
/// only a (raised) lower bound, which the caller does not need to be exact.
fn settle(
    nodes: &mut [i64],
    i: usize,
    bound: i64,
    cap: usize,
    leaf: &impl Fn(usize) -> i64,
) -> i64 {
    if 2 * i >= cap {
        let l = 2 * i - cap;
        let m = leaf(l).min(leaf(l + 1));
        nodes[i] = m;
        return m;
    }
    loop {
        let (a, b) = (nodes[2 * i], nodes[2 * i + 1]);
        let m = a.min(b);
        if m > bound {
            nodes[i] = m;
            return m;
        }
        // The smaller child must come out exact, below its sibling (the left one on a
        // tie, as the descent goes left on a tie); otherwise it rose: look again.
        let (c, lim) = if a <= b {
            (2 * i, b.min(bound))
        } else {
            (2 * i + 1, (a - 1).min(bound))
        };
        let v = settle(nodes, c, lim, cap, leaf);
        if v <= lim {
            nodes[i] = v;
            return v;
        }
    }
}

/// Minimum over slots with O(1) query and O(log n) point update.
///
/// # Examples
///
/// ```
/// use tidemark_core::time::MinTree;
/// let mut t = MinTree::new();
/// t.set(0, 30);
/// t.set(5, 10);
/// t.set(2, 20);
/// assert_eq!(t.min(), 10);
/// assert_eq!(t.argmin(), Some(5));
/// t.set(5, MinTree::EMPTY);
/// assert_eq!(t.min(), 20);
/// ```
#[derive(Debug, Clone, Default)]
pub struct MinTree {
    /// Number of leaves (a power of two, or 0 before the first `set`).
    cap: usize,
    /// `tree[1]` is the root, leaves are `tree[cap..2 * cap]`; `tree[0]` is unused.
    tree: Vec<i64>,
}

impl MinTree {
    /// The value of a slot that does not take part in the minimum.
    pub const EMPTY: i64 = i64::MAX;

    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty tree with room for `n` slots before it grows.
    pub fn with_capacity(n: usize) -> Self {
        let cap = n.max(1).next_power_of_two();
        Self {
            cap,
            tree: vec![Self::EMPTY; 2 * cap],
        }
    }

    /// Number of slots the tree can hold without growing.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Bytes of memory held.
    pub fn heap_bytes(&self) -> usize {
        self.tree.capacity() * std::mem::size_of::<i64>()
    }

    fn grow(&mut self, slot: usize) {
        let new_cap = (slot + 1).next_power_of_two().max(self.cap * 2).max(2);
        let mut tree = vec![Self::EMPTY; 2 * new_cap];
        if self.cap > 0 {
            tree[new_cap..new_cap + self.cap].copy_from_slice(&self.tree[self.cap..]);
        }
        for i in (1..new_cap).rev() {
            tree[i] = tree[2 * i].min(tree[2 * i + 1]);
        }
        self.cap = new_cap;
        self.tree = tree;
    }

    /// Sets slot `slot` to `value` (use [`MinTree::EMPTY`] to take it out).
    #[inline]
    pub fn set(&mut self, slot: usize, value: i64) {
        if slot >= self.cap {
            if value == Self::EMPTY {
                return;
            }
            self.grow(slot);
        }
        let i = self.cap + slot;
        let tree = &mut self.tree[..2 * self.cap];
        if tree[i] == value {
            return;
        }
        tree[i] = value;
        propagate(tree, i >> 1);
    }

    /// Hints the CPU to bring slot `slot`'s leaf into cache before a [`Self::set`].
    #[inline]
    pub fn prefetch(&self, slot: usize) {
        crate::prefetch_at(&self.tree, self.cap + slot);
    }

    /// The value of slot `slot` ([`MinTree::EMPTY`] if never set).
    #[inline]
    pub fn get(&self, slot: usize) -> i64 {
        if slot < self.cap {
            self.tree[self.cap + slot]
        } else {
            Self::EMPTY
        }
    }

    /// The minimum over all slots ([`MinTree::EMPTY`] if none takes part).
    #[inline]
    pub fn min(&self) -> i64 {
        if self.cap == 0 {
            Self::EMPTY
        } else {
            self.tree[1]
        }
    }

    /// A slot holding the minimum (the leftmost one), or `None` if no slot takes part.
    pub fn argmin(&self) -> Option<usize> {
        if self.min() == Self::EMPTY {
            return None;
        }
        let mut i = 1;
        while i < self.cap {
            i = if self.tree[2 * i] == self.tree[i] {
                2 * i
            } else {
                2 * i + 1
            };
        }
        Some(i - self.cap)
    }

    /// Takes every slot out.
    pub fn clear(&mut self) {
        self.tree.iter_mut().for_each(|v| *v = Self::EMPTY);
    }
}

/// A [`MinTree`] whose leaves live with the caller: only the internal nodes are
/// stored (8 bytes per slot instead of 16), and every change reads leaves through a
/// function. The caller changes a leaf's value where it keeps it, then calls
/// [`Self::fix`] (or [`Self::fix_rise`]) for that slot before the next query.
///
/// Invariants:
/// - every node `i` with `2i < cap` holds the minimum of nodes `2i` and `2i + 1`;
/// - a pair node `i` (`cap / 2 <= i < cap`, over leaves `2i - cap` and `2i + 1 - cap`)
///   holds at most the smaller of its leaves. It is exact unless a leaf rose through
///   [`Self::fix_rise`] while above the minimum: such a rise is recorded lazily (the
///   node keeps the old, lower value), because it cannot change the minimum;
/// - the leftmost pair node holding the root's value is exact, so the root is the
///   minimum over the leaves and [`Self::argmin`] the leftmost leaf holding it. When a
///   change raises that pair, the pairs the descent then reaches are brought up to
///   date until the leftmost one holding the root's value is exact.
///
/// # Examples
///
/// ```
/// use tidemark_core::time::{MinTree, NodeMinTree};
/// let mut leaves = vec![30, MinTree::EMPTY, 20, 10];
/// let mut t = NodeMinTree::new();
/// for s in 0..leaves.len() {
///     t.fix(s, |i| leaves.get(i).copied().unwrap_or(MinTree::EMPTY));
/// }
/// assert_eq!(t.min(), 10);
/// leaves[3] = MinTree::EMPTY;
/// t.fix(3, |i| leaves.get(i).copied().unwrap_or(MinTree::EMPTY));
/// assert_eq!(t.min(), 20);
/// ```
#[derive(Debug, Clone, Default)]
pub struct NodeMinTree {
    /// Number of leaves (a power of two, at least 2), or 0 before the first `fix`.
    cap: usize,
    /// `nodes[1]` is the root; `nodes[0]` is unused.
    nodes: Vec<i64>,
    /// Some pair node may be below its leaves (a rise recorded lazily) since the last
    /// rebuild.
    stale: bool,
}

impl NodeMinTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes of memory held.
    pub fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<i64>()
    }

    /// The minimum over all leaves ([`MinTree::EMPTY`] if none takes part).
    #[inline]
    pub fn min(&self) -> i64 {
        if self.cap == 0 {
            MinTree::EMPTY
        } else {
            self.nodes[1]
        }
    }

    /// Rebuilds with room for at least `n` leaves (and at least twice the current
    /// room: it grows by doubling), reading every leaf.
    fn rebuild(&mut self, n: usize, leaf: impl Fn(usize) -> i64) {
        self.fill(n.next_power_of_two().max(self.cap * 2).max(2), leaf);
    }

    /// Recomputes the whole tree from the leaves `0..n` (a bulk load: O(n), where a
    /// [`Self::fix`] per leaf costs O(n log n) and regrows the tree as it goes).
    pub fn build(&mut self, n: usize, leaf: impl Fn(usize) -> i64) {
        self.fill(n.next_power_of_two().max(self.cap).max(2), leaf);
    }

    /// Recomputes every node for `cap` leaves (a power of two), reading every leaf.
    fn fill(&mut self, cap: usize, leaf: impl Fn(usize) -> i64) {
        let mut nodes = vec![MinTree::EMPTY; cap];
        for (i, node) in nodes.iter_mut().enumerate().skip(cap / 2) {
            *node = leaf(2 * i - cap).min(leaf(2 * i + 1 - cap));
        }
        for i in (1..cap / 2).rev() {
            nodes[i] = nodes[2 * i].min(nodes[2 * i + 1]);
        }
        self.cap = cap;
        self.nodes = nodes;
        self.stale = false;
    }

    /// Restores the invariants after leaf `slot` changed: O(log n), stopping at the
    /// first node whose value does not change; plus, when the change raised the pair
    /// holding the minimum and rises were recorded lazily, one depth-first pass that
    /// brings up to date the lagging pairs a descent then reaches. `leaf(i)` must give leaf `i`'s value
    /// ([`MinTree::EMPTY`] for slots that take no part, including ones past the end).
    #[inline]
    pub fn fix(&mut self, slot: usize, leaf: impl Fn(usize) -> i64) {
        if slot >= self.cap {
            self.rebuild(slot + 1, leaf);
            return;
        }
        let first = slot & !1;
        let m = leaf(first).min(leaf(first + 1));
        let i = (self.cap + slot) >> 1;
        let nodes = &mut self.nodes[..self.cap];
        let (prev, root) = (nodes[i], nodes[1]);
        if prev == m {
            return;
        }
        nodes[i] = m;
        propagate(nodes, i >> 1);
        if self.stale && prev == root && m > prev {
            // A pair holding the minimum rose: the pair now holding the root's value
            // may be one whose rise was recorded lazily.
            self.settle_root(&leaf);
        }
    }

    /// [`Self::fix`] for a leaf that rose from `old`, its value before the rise. A
    /// leaf above the minimum changes nothing the tree answers: when the node over its
    /// pair is not above `old`, the rise is recorded lazily (no node is written, the
    /// sibling is not read); only a leaf at the minimum, or under a pair node above
    /// it (set while the leaf took no part), is fixed at once.
    #[inline]
    pub fn fix_rise(&mut self, slot: usize, old: i64, leaf: impl Fn(usize) -> i64) {
        if slot < self.cap {
            let node = self.nodes[(self.cap + slot) >> 1];
            if node <= old && old > self.nodes[1] {
                debug_assert!(leaf(slot) >= old, "the leaf rose");
                // Only a pair whose minimum was this leaf falls behind.
                self.stale |= node == old;
                return;
            }
        }
        self.fix(slot, leaf)
    }

    /// Restores the last invariant (see the type's docs): brings up to date the pairs
    /// a leftmost descent would reach, in one depth-first pass (each node on their
    /// paths is visited once, where a descent from the root per lagging pair walked
    /// the whole path down and back up for each).
    #[cold]
    fn settle_root(&mut self, leaf: &impl Fn(usize) -> i64) {
        let cap = self.cap;
        settle(&mut self.nodes[..cap], 1, MinTree::EMPTY, cap, leaf);
    }

    /// Hints the CPU to bring the node above leaf `slot` into cache before a
    /// [`Self::fix`].
    #[inline]
    pub fn prefetch(&self, slot: usize) {
        crate::prefetch_at(&self.nodes, (self.cap + slot) >> 1);
    }

    /// The leftmost leaf holding the minimum, or `None` if no leaf takes part.
    pub fn argmin(&self, leaf: impl Fn(usize) -> i64) -> Option<usize> {
        if self.min() == MinTree::EMPTY {
            return None;
        }
        let mut i = 1;
        while i < self.cap / 2 {
            i = if self.nodes[2 * i] <= self.nodes[2 * i + 1] {
                2 * i
            } else {
                2 * i + 1
            };
        }
        let l = 2 * i - self.cap;
        Some(if leaf(l) <= leaf(l + 1) { l } else { l + 1 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn matches_naive_minimum(ops in proptest::collection::vec((0usize..300, prop_oneof![Just(MinTree::EMPTY), -1000i64..1000]), 1..400)) {
            let mut t = MinTree::with_capacity(4);
            let mut naive = vec![MinTree::EMPTY; 300];
            for (slot, v) in ops {
                t.set(slot, v);
                naive[slot] = v;
                let m = naive.iter().copied().min().unwrap();
                prop_assert_eq!(t.min(), m);
                match t.argmin() {
                    None => prop_assert_eq!(m, MinTree::EMPTY),
                    Some(s) => {
                        prop_assert_eq!(naive[s], m);
                        prop_assert_eq!(s, naive.iter().position(|&x| x == m).unwrap());
                    }
                }
                prop_assert_eq!(t.get(slot), v);
            }
        }
    }

    /// The tree's minimum and argmin against the leaves' own.
    fn matches_naive(t: &NodeMinTree, leaves: &[i64]) -> Result<(), TestCaseError> {
        let m = leaves.iter().copied().min().unwrap();
        prop_assert_eq!(t.min(), m);
        match t.argmin(|i| leaves.get(i).copied().unwrap_or(MinTree::EMPTY)) {
            None => prop_assert_eq!(m, MinTree::EMPTY),
            Some(s) => prop_assert_eq!(s, leaves.iter().position(|&x| x == m).unwrap()),
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn node_tree_matches_naive_minimum(ops in proptest::collection::vec((0usize..300, prop_oneof![Just(MinTree::EMPTY), -1000i64..1000]), 1..400)) {
            let mut t = NodeMinTree::new();
            let mut leaves: Vec<i64> = Vec::new();
            for (slot, v) in ops {
                if leaves.len() <= slot {
                    leaves.resize(slot + 1, MinTree::EMPTY);
                }
                leaves[slot] = v;
                t.fix(slot, |i| leaves.get(i).copied().unwrap_or(MinTree::EMPTY));
                matches_naive(&t, &leaves)?;
            }
        }

        #[test]
        fn node_tree_rises_match_naive_minimum(ops in proptest::collection::vec((0usize..200, 0i64..50), 1..600)) {
            // Leaves only rise (the keyed tracker's common case), through `fix_rise`.
            let mut t = NodeMinTree::new();
            let mut leaves = vec![MinTree::EMPTY; 200];
            for (slot, up) in ops {
                let old = leaves[slot];
                if old == MinTree::EMPTY {
                    leaves[slot] = up;
                    t.fix(slot, |i| leaves.get(i).copied().unwrap_or(MinTree::EMPTY));
                } else {
                    leaves[slot] = old + up;
                    t.fix_rise(slot, old, |i| leaves.get(i).copied().unwrap_or(MinTree::EMPTY));
                }
                prop_assert_eq!(t.min(), leaves.iter().copied().min().unwrap());
            }
        }

        #[test]
        fn node_tree_lazy_rises_with_other_changes_match_naive(
            ops in proptest::collection::vec(
                (0usize..64, 0u8..6, 0i64..40, -50i64..50),
                1..800,
            )
        ) {
            // Rises through `fix_rise` (most of them lazy), mixed with arbitrary
            // changes through `fix`: leaves taken out, put back lower, raised in full.
            let mut t = NodeMinTree::new();
            let mut leaves = vec![MinTree::EMPTY; 64];
            for (slot, kind, up, put) in ops {
                let old = leaves[slot];
                if kind < 4 && old != MinTree::EMPTY {
                    // A rise by `up`.
                    leaves[slot] = old + up;
                    t.fix_rise(slot, old, |i| leaves.get(i).copied().unwrap_or(MinTree::EMPTY));
                } else {
                    // Put (back) at any value, or taken out (idle, removed).
                    leaves[slot] = if kind == 5 { MinTree::EMPTY } else { put };
                    t.fix(slot, |i| leaves.get(i).copied().unwrap_or(MinTree::EMPTY));
                }
                matches_naive(&t, &leaves)?;
            }
        }
    }

    #[test]
    fn empty_tree() {
        let t = MinTree::new();
        assert_eq!(t.min(), MinTree::EMPTY);
        assert_eq!(t.argmin(), None);
        assert_eq!(t.get(7), MinTree::EMPTY);
    }
}
