//! An indexed binary min-heap of classes (by minor) under a key: each class's place
//! is known, so changing its key or taking it out costs O(log n), with no
//! allocation once warm. An entry that grows sinks as in Floyd's heapsort: the hole
//! goes down along the smaller children to the bottom, one comparison a level,
//! then the entry rises to its place — cheap when it belongs near the bottom, as
//! the class just served (first before, now about last) usually does. hfsc keeps
//! its eligible classes in two of these, each parent its active children by fit
//! time in one, and by virtual time in one beside a sorted run ([`super::vtree`]).
//!
//! The places live in a [`Places`] outside the heap, indexed by minor, so that all
//! the parents' heaps of one kind share one: a class is in at most one of them (its
//! parent's), and no parent carries a table as large as the highest minor.

pub(super) struct Heap<K> {
    h: Vec<(K, u32)>,
}

/// By minor: the class's index in its heap plus one; 0 = in none.
#[derive(Default)]
pub(super) struct Places(Vec<u32>);

impl Places {
    pub(super) fn contains(&self, m: u32) -> bool {
        self.0.get(m as usize).is_some_and(|&p| p != 0)
    }
    fn set(&mut self, m: u32, i: usize) {
        self.0[m as usize] = i as u32 + 1;
    }
}

impl<K: Ord + Copy> Heap<K> {
    pub(super) fn new() -> Self {
        Heap { h: Vec::new() }
    }
    pub(super) fn len(&self) -> usize {
        self.h.len()
    }
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.h.is_empty()
    }
    /// The smallest key and its class.
    pub(super) fn peek(&self) -> Option<(K, u32)> {
        self.h.first().copied()
    }
    /// Every member, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (K, u32)> + '_ {
        self.h.iter().copied()
    }
    /// The member of smallest key among those `ok` accepts: the first of them in
    /// key order. Visits only members whose keys are below the answer's (and their
    /// children), as an in-order scan of a search tree would.
    pub(super) fn first_where(&self, ok: impl Fn(u32) -> bool) -> Option<(K, u32)> {
        let top = *self.h.first()?;
        if ok(top.1) {
            return Some(top);
        }
        let mut best = None;
        for c in 1..=ARITY {
            self.search(c, &ok, &mut best);
        }
        best
    }
    fn search(&self, i: usize, ok: &impl Fn(u32) -> bool, best: &mut Option<(K, u32)>) {
        let Some(&(k, m)) = self.h.get(i) else { return };
        // A subtree's keys are all at least its root's.
        if best.is_some_and(|(b, _)| b <= k) {
            return;
        }
        if ok(m) {
            *best = Some((k, m));
            return;
        }
        for c in ARITY * i + 1..=ARITY * i + ARITY {
            self.search(c, ok, best);
        }
    }
    /// The largest key and its class (a scan of the leaves, where it is).
    pub(super) fn max(&self) -> Option<(K, u32)> {
        self.h[self.h.len().saturating_sub(1).div_ceil(ARITY)..].iter().copied().max()
    }
    pub(super) fn clear(&mut self, at: &mut Places) {
        for &(_, m) in &self.h {
            at.0[m as usize] = 0;
        }
        self.h.clear();
    }
    /// Put class `m` in under `k`, or move it to `k` if it is in already.
    pub(super) fn set(&mut self, at: &mut Places, m: u32, k: K) {
        if at.0.len() <= m as usize {
            at.0.resize(m as usize + 1, 0);
        }
        match at.0[m as usize] {
            0 => {
                self.h.push((k, m));
                let i = self.h.len() - 1;
                at.set(m, i);
                self.up(at, i);
            }
            p => {
                let i = p as usize - 1;
                let old = self.h[i].0;
                self.h[i].0 = k;
                if k < old {
                    self.up(at, i);
                } else if k > old {
                    self.down(at, i);
                }
            }
        }
    }
    /// Take class `m` out, if it is in.
    pub(super) fn remove(&mut self, at: &mut Places, m: u32) {
        let Some(&p) = at.0.get(m as usize).filter(|&&p| p != 0) else { return };
        let i = p as usize - 1;
        at.0[m as usize] = 0;
        let last = self.h.pop().expect("a member");
        if i < self.h.len() {
            self.h[i] = last;
            at.set(last.1, i);
            if i > 0 && last.0 < self.h[(i - 1) / ARITY].0 {
                self.up(at, i);
            } else {
                self.down(at, i);
            }
        }
    }
    /// Sift the entry at `i` up.
    fn up(&mut self, at: &mut Places, i: usize) {
        let x = self.h[i];
        self.rise(at, i, 0, x);
    }
    /// Sift the entry at `i` down (Floyd: the hole to the bottom, then `x` back up).
    fn down(&mut self, at: &mut Places, mut i: usize) {
        let top = i;
        let x = self.h[i];
        let h = &mut self.h[..];
        let n = h.len();
        loop {
            let l = ARITY * i + 1;
            if l >= n {
                break;
            }
            let mut c = l;
            for j in l + 1..n.min(l + ARITY) {
                if h[j].0 < h[c].0 {
                    c = j;
                }
            }
            h[i] = h[c];
            at.set(h[i].1, i);
            i = c;
        }
        self.rise(at, i, top, x);
    }
    /// Put `x` in the hole at `i`, or as far up towards `top` as its key goes: the
    /// hole moves, the entry is written once.
    fn rise(&mut self, at: &mut Places, mut i: usize, top: usize, x: (K, u32)) {
        let h = &mut self.h[..];
        while i > top {
            let p = (i - 1) / ARITY;
            if h[p].0 <= x.0 {
                break;
            }
            h[i] = h[p];
            at.set(h[i].1, i);
            i = p;
        }
        h[i] = x;
        at.set(x.1, i);
    }
}

/// Children per entry (the searches and `max` are written for any).
const ARITY: usize = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_minimum_through_moves_and_removals() {
        let mut h = Heap::new();
        let mut at = Places::default();
        for (m, k) in [(5u32, 50u64), (1, 10), (9, 90), (3, 30), (7, 70)] {
            h.set(&mut at, m, k);
        }
        assert_eq!(h.peek(), Some((10, 1)));
        assert_eq!(h.max(), Some((90, 9)));
        h.set(&mut at, 9, 5);
        assert_eq!(h.peek(), Some((5, 9)));
        assert_eq!(h.max(), Some((70, 7)));
        h.set(&mut at, 9, 95);
        h.remove(&mut at, 1);
        assert!(!at.contains(1) && at.contains(9));
        let mut order = Vec::new();
        while let Some((k, m)) = h.peek() {
            order.push((k, m));
            h.remove(&mut at, m);
        }
        assert_eq!(order, vec![(30, 3), (50, 5), (70, 7), (95, 9)]);
        assert_eq!(h.len(), 0);
        assert_eq!(h.max(), None);
    }

    #[test]
    fn first_where_is_the_first_accepted_in_key_order() {
        // Keys 0..40 under minors 100..140, put in scrambled; accept the minors
        // that are multiples of 7 above 110: the smallest such key is 12 (minor 112).
        let mut h = Heap::new();
        let mut at = Places::default();
        for i in 0..40u32 {
            let k = (i * 17) % 40;
            h.set(&mut at, 100 + k, k as u64);
        }
        let ok = |m: u32| m > 110 && m.is_multiple_of(7);
        assert_eq!(h.first_where(ok), Some((12, 112)));
        assert_eq!(h.first_where(|m| m == 100), Some((0, 100)));
        assert_eq!(h.first_where(|_| false), None);
        // Against a sorted scan, for every threshold.
        for t in 100..141 {
            let want = h.iter().filter(|&(_, m)| m >= t && m.is_multiple_of(3)).min();
            assert_eq!(h.first_where(|m| m >= t && m.is_multiple_of(3)), want, "threshold {t}");
        }
    }
}
