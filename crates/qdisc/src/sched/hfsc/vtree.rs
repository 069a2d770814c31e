//! A parent's vt tree: its active children ordered by (vt, insertion number).
//!
//! Link sharing serves the child of smallest vt and moves it by the bytes sent;
//! among siblings of equal curves that moves it past all the others, so that the
//! order goes round. The tree is a sorted run (a ring, ascending) that takes every
//! child whose key is above its last, and an indexed heap ([`Heap`]) for the others:
//! the round costs a pop at the front and a push at the back, whatever the number
//! of children, and any other order is the heap's O(log n).
//!
//! A child leaving the run is only forgotten (its entry goes stale: [`VtAt`] no
//! longer names that entry's insertion number); the run drops stale entries when
//! they reach either end, so its first and last entries are always live, and is
//! compacted when stale entries make up most of it.

use std::collections::VecDeque;

use super::heap::{Heap, Places};

/// (vt, insertion number): unique, so any order of them is the rb-tree's.
type Key = (u64, u64);

pub(super) struct VtTree {
    heap: Heap<Key>,
    run: VecDeque<(Key, u32)>,
    /// Live entries in `run`.
    live: usize,
}

/// Where each class is, for all the parents' vt trees (a class is in at most its
/// parent's): its place in a heap, or the insertion number of its live run entry.
#[derive(Default)]
pub(super) struct VtAt {
    heap: Places,
    run: Vec<u64>,
}

impl VtAt {
    fn in_run(&self, m: u32) -> bool {
        self.run.get(m as usize).is_some_and(|&s| s != 0)
    }
    fn is_live(&self, (k, m): (Key, u32)) -> bool {
        self.run[m as usize] == k.1
    }
}

impl VtTree {
    pub(super) fn new() -> Self {
        VtTree { heap: Heap::new(), run: VecDeque::new(), live: 0 }
    }
    pub(super) fn len(&self) -> usize {
        self.heap.len() + self.live
    }
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Put class `m` in under `k` (insertion numbers only grow), or move it there.
    pub(super) fn set(&mut self, at: &mut VtAt, m: u32, k: Key) {
        debug_assert_ne!(k.1, 0, "insertion numbers start at 1");
        if self.run.back().is_none_or(|b| b.0 < k) {
            self.remove(at, m);
            if at.run.len() <= m as usize {
                at.run.resize(m as usize + 1, 0);
            }
            at.run[m as usize] = k.1;
            self.run.push_back((k, m));
            self.live += 1;
        } else if at.heap.contains(m) {
            self.heap.set(&mut at.heap, m, k);
        } else {
            self.remove(at, m);
            self.heap.set(&mut at.heap, m, k);
        }
    }

    /// Take class `m` out, if it is in.
    pub(super) fn remove(&mut self, at: &mut VtAt, m: u32) {
        if at.heap.contains(m) {
            self.heap.remove(&mut at.heap, m);
            return;
        }
        if !at.in_run(m) {
            return;
        }
        at.run[m as usize] = 0;
        self.live -= 1;
        while self.run.front().is_some_and(|&e| !at.is_live(e)) {
            self.run.pop_front();
        }
        while self.run.back().is_some_and(|&e| !at.is_live(e)) {
            self.run.pop_back();
        }
        if self.run.len() > 2 * self.live + 32 {
            self.run.retain(|&e| at.is_live(e));
        }
    }

    /// The smallest key and its class.
    #[cfg(test)]
    fn first(&self) -> Option<(Key, u32)> {
        match (self.heap.peek(), self.run.front()) {
            (Some(h), Some(&r)) => Some(h.min(r)),
            (h, r) => h.or(r.copied()),
        }
    }

    /// The member of smallest key among those `ok` accepts (`vttree_firstfit`).
    pub(super) fn first_where(&self, at: &VtAt, ok: impl Fn(u32) -> bool) -> Option<(Key, u32)> {
        let h = self.heap.first_where(&ok);
        let r =
            self.run.iter().take_while(|e| h.is_none_or(|h| e.0 < h.0)).find(|&&e| at.is_live(e) && ok(e.1)).copied();
        r.or(h)
    }

    /// The largest key and its class (`rb_last`).
    pub(super) fn last(&self) -> Option<(Key, u32)> {
        self.heap.max().max(self.run.back().copied())
    }

    pub(super) fn clear(&mut self, at: &mut VtAt) {
        self.heap.clear(&mut at.heap);
        for &e in &self.run {
            if at.is_live(e) {
                at.run[e.1 as usize] = 0;
            }
        }
        self.run.clear();
        self.live = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn orders_as_a_search_tree_through_random_moves() {
        // Against a BTreeSet of (key, minor): moves that mostly go past the last
        // (the round) and sometimes land inside, removals, first, first-fit, last.
        let mut s = 7u64;
        let mut rnd = move |n: u64| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 33) % n
        };
        let mut t = VtTree::new();
        let mut at = VtAt::default();
        let mut want: BTreeSet<(Key, u32)> = BTreeSet::new();
        let mut key_of = vec![None; 64];
        let mut seq = 0u64;
        for step in 0..20_000 {
            let m = rnd(64) as u32;
            if let Some(k) = key_of[m as usize].take() {
                want.remove(&(k, m));
            }
            match rnd(10) {
                0..=1 => t.remove(&mut at, m),
                r => {
                    seq += 1;
                    let top = want.last().map_or(0, |e| e.0 .0);
                    let vt = if r < 8 { top + rnd(3) } else { top.saturating_sub(rnd(50)) };
                    t.set(&mut at, m, (vt, seq));
                    key_of[m as usize] = Some((vt, seq));
                    want.insert(((vt, seq), m));
                }
            }
            assert_eq!(t.len(), want.len(), "step {step}");
            assert_eq!(t.first(), want.first().copied(), "step {step}");
            assert_eq!(t.last(), want.last().copied(), "step {step}");
            let odd = |m: u32| m % 2 == 1;
            assert_eq!(t.first_where(&at, odd), want.iter().find(|e| odd(e.1)).copied(), "step {step}");
            assert!(t.run.len() <= 2 * t.live + 32);
        }
        t.clear(&mut at);
        assert!(t.is_empty() && t.first().is_none());
        assert!((0..64).all(|m| !at.in_run(m) && !at.heap.contains(m)));
    }
}
