//! htb's wait queues: the classes that are not CAN_SEND, by the time their mode
//! next changes.

/// One wait-queue entry: a class changes mode at `key`. `tie` is the insertion
/// number above the class's 16-bit minor, so equal keys pop in insertion order, as
/// the kernel's rb-tree gives them (wrong only after 2^48 insertions: nine years at
/// a million a second). Two words are built in registers and stored whole; a
/// three-word entry went through the stack and was copied back in pieces that
/// straddled its stores, which stalls on store forwarding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct WaitEntry {
    pub(super) key: i64,
    pub(super) tie: u64,
}

impl WaitEntry {
    pub(super) fn new(key: i64, seq: u64, minor: u32) -> WaitEntry {
        WaitEntry { key, tie: seq << 16 | (minor & 0xffff) as u64 }
    }
    pub(super) fn minor(self) -> usize {
        (self.tie & 0xffff) as usize
    }
}

/// log2 of a wait-queue block, ns: keys are grouped in blocks of ~1 µs.
const BLOCK_SHIFT: u32 = 10;
/// Far buckets: block numbers differ from the base's in bit 0 … 63 − BLOCK_SHIFT.
const FAR_BUCKETS: usize = 64 - BLOCK_SHIFT as usize;
/// `pos` of an entry held in a far bucket: the flag, the bucket, the index.
const POS_FAR: u32 = 1 << 31;
const POS_IDX_BITS: u32 = 17;

/// A level's wait queue (`q->hlevel[level].wait_pq`): the classes that are not
/// CAN_SEND, smallest (key, insertion) first — the order the kernel's rb-tree gives, equal
/// keys in insertion order. (key, tie) pairs are unique, so the minimum, the only
/// entry ever consumed in order, is exactly the rb-tree's `rb_first`.
///
/// A radix heap over ~1 µs blocks of key with a binary heap at the bottom. Entries
/// whose block is at most `base` sit in `near`, a min-heap on (key, tie); a later
/// block goes, unordered, to the far bucket numbered by the highest bit in which it
/// differs from `base`. Far entries are never compared until `near` runs dry: then
/// the lowest non-empty bucket is redistributed around its smallest block, which
/// becomes the new `base` (each entry only ever moves to a lower bucket). With
/// thousands of borrowing leaves, most waits are long (a bucket deep in debt) and are
/// erased again when the class sends: in a far bucket insert and erase are O(1),
/// where a heap of every class paid two sifts through thousands of entries.
///
/// Each queued class's place is kept in one dense array indexed by minor (`pos`,
/// [`Htb::pq_pos`]): a heap slot, or `POS_FAR | bucket << 17 | index`.
#[derive(Clone, Debug)]
pub(super) struct WaitQueue {
    pub(super) near: Vec<WaitEntry>,
    pub(super) far: [Vec<WaitEntry>; FAR_BUCKETS],
    /// Bit per non-empty far bucket.
    pub(super) far_mask: u64,
    /// The block number that divides `near` from `far`.
    pub(super) base: u64,
}

impl Default for WaitQueue {
    fn default() -> Self {
        WaitQueue { near: Vec::new(), far: std::array::from_fn(|_| Vec::new()), far_mask: 0, base: 0 }
    }
}

impl WaitQueue {
    pub(super) fn block(key: i64) -> u64 {
        key.max(0) as u64 >> BLOCK_SHIFT
    }

    /// `rb_first`: the smallest (key, tie), after pulling the nearest far bucket
    /// into `near` when it is empty.
    pub(super) fn first(&mut self, pos: &mut [u32]) -> Option<WaitEntry> {
        if self.near.is_empty() {
            if self.far_mask == 0 {
                return None;
            }
            let i = self.far_mask.trailing_zeros() as usize;
            self.far_mask &= !(1 << i);
            let mut bucket = std::mem::take(&mut self.far[i]);
            self.base = bucket.iter().map(|e| Self::block(e.key)).min().expect("marked bucket");
            for e in bucket.drain(..) {
                self.push(e, pos);
            }
            self.far[i] = bucket;
        }
        self.near.first().copied()
    }

    #[inline]
    pub(super) fn push(&mut self, e: WaitEntry, pos: &mut [u32]) {
        let b = Self::block(e.key);
        if b <= self.base {
            self.near.push(e);
            self.sift_up(self.near.len() - 1, e, pos);
        } else {
            let i = 63 - (b ^ self.base).leading_zeros() as usize;
            let v = &mut self.far[i];
            pos[e.minor()] = POS_FAR | (i as u32) << POS_IDX_BITS | v.len() as u32;
            v.push(e);
            self.far_mask |= 1 << i;
        }
    }

    /// Erase class `minor` (which must be queued).
    pub(super) fn remove(&mut self, minor: u32, pos: &mut [u32]) {
        let p = pos[minor as usize];
        if p & POS_FAR == 0 {
            self.remove_near(p as usize, pos);
            return;
        }
        let i = ((p & !POS_FAR) >> POS_IDX_BITS) as usize;
        let j = (p & ((1 << POS_IDX_BITS) - 1)) as usize;
        let v = &mut self.far[i];
        v.swap_remove(j);
        if let Some(moved) = v.get(j) {
            pos[moved.minor()] = p;
        }
        if v.is_empty() {
            self.far_mask &= !(1 << i);
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.near.len() + self.far.iter().map(Vec::len).sum::<usize>()
    }

    // The near heap.
    pub(super) fn set(&mut self, i: usize, e: WaitEntry, pos: &mut [u32]) {
        self.near[i] = e;
        pos[e.minor()] = i as u32;
    }
    /// Move `e`, which is at `i`, up to its place. (`e` is passed in, not read back:
    /// reading an entry just written piecewise stalls on store forwarding.)
    pub(super) fn sift_up(&mut self, mut i: usize, e: WaitEntry, pos: &mut [u32]) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.near[parent] <= e {
                break;
            }
            let pe = self.near[parent];
            self.set(i, pe, pos);
            i = parent;
        }
        self.set(i, e, pos);
    }
    /// Move `e`, which is at `i`, down to its place.
    pub(super) fn sift_down(&mut self, mut i: usize, e: WaitEntry, pos: &mut [u32]) {
        let n = self.near.len();
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            let r = l + 1;
            let c = if r < n && self.near[r] < self.near[l] { r } else { l };
            if e <= self.near[c] {
                break;
            }
            let ce = self.near[c];
            self.set(i, ce, pos);
            i = c;
        }
        self.set(i, e, pos);
    }
    pub(super) fn remove_near(&mut self, i: usize, pos: &mut [u32]) {
        let last = self.near.pop().expect("queued entry");
        if i < self.near.len() {
            self.sift_down(i, last, pos);
            let j = pos[last.minor()] as usize;
            self.sift_up(j, last, pos);
        }
    }
}
