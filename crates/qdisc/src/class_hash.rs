//! The kernel's `Qdisc_class_hash` (net/sched/sch_api.c), which fixes the order
//! `tc class show` lists a classful qdisc's classes in (htb, drr).

/// The kernel's `Qdisc_class_hash` as far as its iteration order goes: buckets of
/// classids, newest first within a bucket, doubling when the load passes 3/4.
#[derive(Clone, Debug)]
pub(crate) struct ClassHash {
    pub(crate) buckets: Vec<Vec<u32>>,
    pub(crate) elems: usize,
}

impl ClassHash {
    /// `qdisc_class_hash_init`: four buckets.
    pub(crate) fn new() -> Self {
        ClassHash { buckets: vec![Vec::new(); 4], elems: 0 }
    }
    /// `qdisc_class_hash`.
    pub(crate) fn hash(id: u32, mask: u32) -> usize {
        let mut id = id;
        id ^= id >> 8;
        id ^= id >> 4;
        (id & mask) as usize
    }
    pub(crate) fn mask(&self) -> u32 {
        self.buckets.len() as u32 - 1
    }
    /// `qdisc_class_hash_insert`: at the head of its bucket.
    pub(crate) fn insert(&mut self, id: u32) {
        let b = Self::hash(id, self.mask());
        self.buckets[b].insert(0, id);
        self.elems += 1;
    }
    pub(crate) fn remove(&mut self, id: u32) {
        let b = Self::hash(id, self.mask());
        if let Some(i) = self.buckets[b].iter().position(|&x| x == id) {
            self.buckets[b].remove(i);
            self.elems -= 1;
        }
    }
    /// `qdisc_class_hash_grow`: old buckets in order, each chain head first, every
    /// entry pushed onto the head of its new bucket.
    pub(crate) fn grow(&mut self) {
        if self.elems * 4 <= self.buckets.len() * 3 {
            return;
        }
        let nsize = self.buckets.len() * 2;
        let nmask = nsize as u32 - 1;
        let mut nb: Vec<Vec<u32>> = vec![Vec::new(); nsize];
        for b in &self.buckets {
            for &id in b {
                nb[Self::hash(id, nmask)].push(id);
            }
        }
        for b in nb.iter_mut() {
            b.reverse();
        }
        self.buckets = nb;
    }
    pub(crate) fn walk(&self) -> impl Iterator<Item = u32> + '_ {
        self.buckets.iter().flatten().copied()
    }
}
