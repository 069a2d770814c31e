//! htb's class storage: pages of consecutive minors, the kernel's class hash
//! (dump order), and the ordered minor sets rows and feeds are made of.

use super::*;

/// Classes are stored inline in pages of this many consecutive minors, allocated
/// when a class first uses them: a tree of consecutive classids is consecutive
/// memory, which the prefetcher follows as the round robin walks it, and a lone
/// class at a high minor costs one page, not a table of every minor.
pub(super) const PAGE: usize = 64;

/// A page of classes: a bit per slot that holds one, and the slots (vacant ones hold
/// [`Class::vacant`]). Presence is a bit in the page's first line, not a niche the
/// compiler would put in some cold field of every class.
pub(super) struct ClassPage {
    pub(super) present: u64,
    pub(super) slots: [Class; PAGE],
}

impl ClassPage {
    pub(super) fn new() -> Box<ClassPage> {
        Box::new(ClassPage { present: 0, slots: std::array::from_fn(|_| Class::vacant()) })
    }
    pub(super) fn get(&self, i: usize) -> Option<&Class> {
        (self.present >> i & 1 != 0).then(|| &self.slots[i])
    }
    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut Class> {
        (self.present >> i & 1 != 0).then(|| &mut self.slots[i])
    }
    /// The classes held.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Class> {
        let present = self.present;
        self.slots.iter_mut().enumerate().filter(move |(i, _)| present >> i & 1 != 0).map(|(_, c)| c)
    }
}

/// An ordered set of class minors (0..=0xFFFF) — the kernel's per-row/per-feed
/// rb-trees keyed by classid (one qdisc's classes share the major, so minor order is
/// classid order). Three levels of bitmaps: `top` marks the non-empty pages, each
/// page's `mid` its non-empty words, and the words hold one bit per minor. Pages
/// (4096 minors, 520 bytes) are allocated on first use and kept, so a warm set never
/// allocates; successor queries are a few `trailing_zeros`.
#[derive(Clone, Debug, Default)]
pub(crate) struct MinorSet {
    top: u16,
    len: u32,
    pages: [Option<Box<MinorPage>>; 16],
}

#[derive(Clone, Debug)]
struct MinorPage {
    pub(super) mid: u64,
    pub(super) words: [u64; 64],
}

/// Bits of `w` at positions ≥ `from` (`from` may be 64: none).
fn bits_from(w: u64, from: u32) -> u64 {
    if from >= 64 {
        0
    } else {
        w & (!0u64 << from)
    }
}

impl MinorSet {
    pub(super) fn split(x: u32) -> (usize, usize, u32) {
        debug_assert!(x <= 0xFFFF);
        ((x >> 12) as usize, ((x >> 6) & 63) as usize, x & 63)
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len as usize
    }
    #[cfg(test)]
    pub(super) fn contains(&self, x: u32) -> bool {
        let (p, w, b) = Self::split(x);
        self.pages[p].as_ref().is_some_and(|pg| pg.words[w] >> b & 1 != 0)
    }
    pub(crate) fn insert(&mut self, x: u32) {
        let (p, w, b) = Self::split(x);
        let pg = self.pages[p].get_or_insert_with(|| Box::new(MinorPage { mid: 0, words: [0; 64] }));
        if pg.words[w] >> b & 1 == 0 {
            self.len += 1;
            pg.words[w] |= 1 << b;
            pg.mid |= 1 << w;
            self.top |= 1 << p;
        }
    }
    pub(crate) fn remove(&mut self, x: u32) {
        let (p, w, b) = Self::split(x);
        let Some(pg) = self.pages[p].as_mut() else { return };
        if pg.words[w] >> b & 1 == 0 {
            return;
        }
        self.len -= 1;
        pg.words[w] &= !(1 << b);
        if pg.words[w] == 0 {
            pg.mid &= !(1 << w);
            if pg.mid == 0 {
                self.top &= !(1 << p);
            }
        }
    }
    /// The smallest member of page `p` (which must be non-empty).
    pub(super) fn page_first(&self, p: usize) -> u32 {
        let pg = self.pages[p].as_ref().expect("marked page");
        let w = pg.mid.trailing_zeros();
        ((p as u32) << 12) | (w << 6) | pg.words[w as usize].trailing_zeros()
    }
    /// `rb_first`.
    pub(crate) fn first(&self) -> Option<u32> {
        (self.top != 0).then(|| self.page_first(self.top.trailing_zeros() as usize))
    }
    /// The smallest member ≥ `x` (`htb_id_find_next_upper`).
    pub(crate) fn ceil(&self, x: u32) -> Option<u32> {
        if x > 0xFFFF {
            return None;
        }
        let (p, w, b) = Self::split(x);
        if let Some(pg) = self.pages[p].as_ref() {
            let in_word = bits_from(pg.words[w], b);
            if in_word != 0 {
                return Some((x & !63) | in_word.trailing_zeros());
            }
            let words = bits_from(pg.mid, w as u32 + 1);
            if words != 0 {
                let w2 = words.trailing_zeros();
                return Some(((p as u32) << 12) | (w2 << 6) | pg.words[w2 as usize].trailing_zeros());
            }
        }
        let pages = bits_from(self.top as u64, p as u32 + 1);
        (pages != 0).then(|| self.page_first(pages.trailing_zeros() as usize))
    }
    /// `rb_next`: the member after `x`.
    pub(crate) fn next_after(&self, x: u32) -> Option<u32> {
        self.ceil(x + 1)
    }
}
