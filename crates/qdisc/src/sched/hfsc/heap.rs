//! An indexed binary min-heap of classes (by minor) under a key: each class's place
//! is known, so changing its key or taking it out costs O(log n), with no
//! allocation once warm. hfsc keeps its eligible classes in two of these.

pub(super) struct Heap<K> {
    h: Vec<(K, u32)>,
    /// By minor: the class's index in `h` plus one; 0 = not in the heap.
    pos: Vec<u32>,
}

impl<K: Ord + Copy> Heap<K> {
    pub(super) fn new() -> Self {
        Heap { h: Vec::new(), pos: Vec::new() }
    }
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.h.len()
    }
    pub(super) fn contains(&self, m: u32) -> bool {
        self.pos.get(m as usize).is_some_and(|&p| p != 0)
    }
    /// The smallest key and its class.
    pub(super) fn peek(&self) -> Option<(K, u32)> {
        self.h.first().copied()
    }
    /// Every member, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (K, u32)> + '_ {
        self.h.iter().copied()
    }
    pub(super) fn clear(&mut self) {
        for &(_, m) in &self.h {
            self.pos[m as usize] = 0;
        }
        self.h.clear();
    }
    /// Put class `m` in under `k`, or move it to `k` if it is in already.
    pub(super) fn set(&mut self, m: u32, k: K) {
        if self.pos.len() <= m as usize {
            self.pos.resize(m as usize + 1, 0);
        }
        match self.pos[m as usize] {
            0 => {
                self.h.push((k, m));
                let i = self.h.len() - 1;
                self.pos[m as usize] = i as u32 + 1;
                self.up(i);
            }
            p => {
                let i = p as usize - 1;
                let old = self.h[i].0;
                self.h[i].0 = k;
                if k < old {
                    self.up(i);
                } else {
                    self.down(i);
                }
            }
        }
    }
    /// Take class `m` out, if it is in.
    pub(super) fn remove(&mut self, m: u32) {
        let Some(&p) = self.pos.get(m as usize).filter(|&&p| p != 0) else { return };
        let i = p as usize - 1;
        self.pos[m as usize] = 0;
        let last = self.h.pop().expect("a member");
        if i < self.h.len() {
            self.h[i] = last;
            self.pos[last.1 as usize] = i as u32 + 1;
            self.up(i);
            self.down(i);
        }
    }
    fn swap(&mut self, i: usize, j: usize) {
        self.h.swap(i, j);
        self.pos[self.h[i].1 as usize] = i as u32 + 1;
        self.pos[self.h[j].1 as usize] = j as u32 + 1;
    }
    fn up(&mut self, mut i: usize) {
        while i > 0 {
            let p = (i - 1) / 2;
            if self.h[p].0 <= self.h[i].0 {
                break;
            }
            self.swap(i, p);
            i = p;
        }
    }
    fn down(&mut self, mut i: usize) {
        loop {
            let l = 2 * i + 1;
            if l >= self.h.len() {
                break;
            }
            let c = if l + 1 < self.h.len() && self.h[l + 1].0 < self.h[l].0 { l + 1 } else { l };
            if self.h[i].0 <= self.h[c].0 {
                break;
            }
            self.swap(i, c);
            i = c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_minimum_through_moves_and_removals() {
        let mut h = Heap::new();
        for (m, k) in [(5u32, 50u64), (1, 10), (9, 90), (3, 30), (7, 70)] {
            h.set(m, k);
        }
        assert_eq!(h.peek(), Some((10, 1)));
        h.set(9, 5);
        assert_eq!(h.peek(), Some((5, 9)));
        h.set(9, 95);
        h.remove(1);
        assert!(!h.contains(1) && h.contains(9));
        let mut order = Vec::new();
        while let Some((k, m)) = h.peek() {
            order.push((k, m));
            h.remove(m);
        }
        assert_eq!(order, vec![(30, 3), (50, 5), (70, 7), (95, 9)]);
        assert_eq!(h.len(), 0);
    }
}
