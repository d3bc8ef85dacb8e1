//! Frames-list bodies already decoded, recognised by their bytes. Real files write a fresh
//! frames list per event, but its body (memo references to the same frame dicts) repeats
//! for every event from the same call site, so a match stands for the whole decode. This
//! sits on the parser's critical path for most of a file's bytes, so finding a body's end
//! and hashing it avoid serial chains of dependent loads, and a match is decided by the
//! table slot alone: length and a 128-bit hash, no second read of the bytes.
//!
//! Why a hash match is enough: two bodies of the same length that differ in one 8-byte
//! word always hash apart (each lane is a chain of bijections, and each fold is a
//! bijection of any one lane), and for bodies that differ more the two 64-bit folds
//! collide together with a chance near 2^-128 per pair. A crafted file can aim for a
//! collision; all it gets is a wrong stack for its own events, which it could as well
//! have written as frames. Comparing the bytes instead cost a tenth of the parse (the
//! stored bodies do not stay in cache).

use crate::model::StackId;

/// Most bodies remembered (a few thousand distinct stacks is typical; a crafted file of
/// many distinct bodies gets no more, so the table stays bounded: 12 MiB).
const MAX_COUNT: usize = 1 << 18;
/// Slots probed at most per look-up: a crafted file whose bodies share hash bits gets
/// misses (a full decode each), never long probe chains.
const MAX_PROBES: usize = 16;

/// A body's identity: its length and two 64-bit folds of its hash lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BodyKey {
    h1: u64,
    h2: u64,
    len: u32,
}

/// A slot of the table (`len` 0: empty; bodies are never empty).
#[derive(Clone, Copy)]
struct Slot {
    key: BodyKey,
    id: StackId,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            key: BodyKey {
                h1: 0,
                h2: 0,
                len: 0,
            },
            id: StackId::EMPTY,
        }
    }
}

/// The cache: an open-addressing table keyed by [`BodyKey`] (one probe, usually, into a
/// table that stays in cache).
#[derive(Default)]
pub(crate) struct ListBodies {
    slots: Vec<Slot>,
    count: usize,
}

impl ListBodies {
    /// Bytes the table holds.
    pub fn held_bytes(&self) -> usize {
        self.slots.capacity() * size_of::<Slot>()
    }

    #[inline]
    fn home(&self, k: &BodyKey) -> usize {
        // The hash's high bits are its best mixed.
        (k.h1 >> 32) as usize & (self.slots.len() - 1)
    }

    /// The stack of a body seen before, or the body's key for [`ListBodies::insert`].
    #[inline]
    pub fn get(&self, body: &[u8]) -> Result<StackId, BodyKey> {
        let k = body_key(body);
        if self.slots.is_empty() {
            return Err(k);
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(&k);
        for _ in 0..MAX_PROBES {
            let s = self.slots[i];
            if s.key.len == 0 {
                break;
            }
            if s.key == k {
                return Ok(s.id);
            }
            i = (i + 1) & mask;
        }
        Err(k)
    }

    /// Remembers the body with key `k` (from [`ListBodies::get`]) as `id`, while within
    /// bounds and within [`MAX_PROBES`] of its home slot.
    pub fn insert(&mut self, k: BodyKey, id: StackId) {
        if k.len == 0 || self.count >= MAX_COUNT {
            return;
        }
        if (self.count + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(&k);
        for _ in 0..MAX_PROBES {
            let s = &mut self.slots[i];
            if s.key.len == 0 {
                *s = Slot { key: k, id };
                self.count += 1;
                return;
            }
            if s.key == k {
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Doubles the table (from 1,024 slots), placing every entry again.
    fn grow(&mut self) {
        let n = (self.slots.len() * 2).max(1024);
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); n]);
        let mask = n - 1;
        self.count = 0;
        for s in old.into_iter().filter(|s| s.key.len != 0) {
            let mut i = self.home(&s.key);
            for _ in 0..MAX_PROBES {
                if self.slots[i].key.len == 0 {
                    self.slots[i] = s;
                    self.count += 1;
                    break;
                }
                i = (i + 1) & mask;
            }
        }
    }

    /// Forgets everything (a memo slot the bodies may refer to was overwritten).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.count = 0;
    }
}

/// The offset of the `APPENDS` that ends a body of `BINGET`/`LONG_BINGET`s starting at
/// `p`, or `None` when anything else comes first (or the body is empty).
#[inline]
pub(crate) fn body_end(data: &[u8], p: usize) -> Option<usize> {
    walk_to_appends(data, p, long_binget_run(data, p))
}

/// The opcode-by-opcode rest of [`body_end`], from `q` on the opcode grid of a body that
/// starts at `p`.
#[inline]
fn walk_to_appends(data: &[u8], p: usize, mut q: usize) -> Option<usize> {
    loop {
        match *data.get(q)? {
            b'h' => q += 2,
            b'j' => q += 5,
            b'e' if q > p => return Some(q),
            _ => return None,
        }
    }
}

/// Skips the run of LONG_BINGETs (5 bytes each) from `p`, eight opcodes at a time;
/// returns an offset on the opcode grid at or before the first opcode that is not one.
/// A one-opcode step waits on each load to know where the next opcode is; these eight
/// loads do not depend on each other. (Measured no faster: a 64-byte SSE2 version, and
/// a bit mask saying which of the last eight broke the run.)
#[inline]
fn long_binget_run(data: &[u8], p: usize) -> usize {
    let mut q = p;
    while let Some(w) = data.get(q..q + 40) {
        let miss = (w[0] ^ b'j')
            | (w[5] ^ b'j')
            | (w[10] ^ b'j')
            | (w[15] ^ b'j')
            | (w[20] ^ b'j')
            | (w[25] ^ b'j')
            | (w[30] ^ b'j')
            | (w[35] ^ b'j');
        if miss != 0 {
            break;
        }
        q += 40;
    }
    q
}

/// The key of a body: eight independent hash lanes (a single multiply-rotate chain would
/// cost its latency per 8 bytes), folded two different ways.
#[inline]
pub(crate) fn body_key(b: &[u8]) -> BodyKey {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let word = |c: &[u8]| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
    let mut lanes = [
        b.len() as u64,
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
        0x082e_fa98_ec4e_6c89,
        0x4528_21e6_38d0_1377,
        0xbe54_66cf_34e9_0c6c,
        0xc0ac_29b7_c97c_50dd,
    ];
    let mut blocks = b.chunks_exact(64);
    for c in &mut blocks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            *lane = (*lane ^ word(&c[i * 8..])).wrapping_mul(K).rotate_left(29);
        }
    }
    let rest = blocks.remainder();
    let mut words = rest.chunks_exact(8);
    for (c, lane) in (&mut words).zip(lanes.iter_mut()) {
        *lane = (*lane ^ word(c)).wrapping_mul(K).rotate_left(29);
    }
    let tail = words.remainder();
    let mut last = [0u8; 8];
    last[..tail.len()].copy_from_slice(tail);
    let last = u64::from_le_bytes(last);
    // Each fold takes every lane (and the tail word) through a bijection and combines
    // them with additions and xors, so a change in any one of them changes both folds.
    let a = (lanes[0] ^ last)
        .wrapping_add(lanes[1].rotate_left(7))
        .wrapping_add(lanes[2].rotate_left(15) ^ lanes[3].rotate_left(23))
        .wrapping_add(lanes[4].rotate_left(31) ^ lanes[5].rotate_left(39))
        .wrapping_add(lanes[6].rotate_left(47) ^ lanes[7].rotate_left(55))
        .wrapping_mul(K);
    let c = (lanes[7] ^ last.rotate_left(17))
        .wrapping_add(lanes[6].rotate_left(11) ^ lanes[5].rotate_left(37))
        .wrapping_add(lanes[4].rotate_left(3))
        .wrapping_add(lanes[3].rotate_left(53) ^ lanes[2].rotate_left(29))
        .wrapping_add(lanes[1].rotate_left(43) ^ lanes[0].rotate_left(19))
        .wrapping_mul(K2);
    BodyKey {
        h1: a ^ (a >> 29),
        h2: c ^ (c >> 31),
        len: b.len() as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eight-at-a-time path and the one-at-a-time path must find the same end.
    #[test]
    fn body_end_matches_a_plain_walk() {
        let plain = |d: &[u8], p: usize| walk_to_appends(d, p, p);
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for case in 0..4000 {
            let mut d = Vec::new();
            let n = next() % 100;
            // Some bodies all LONG_BINGETs (the long runs), some mixed.
            let short_every = [0, 3, 7, 40][case % 4];
            for _ in 0..n {
                if short_every > 0 && next() % short_every == 0 {
                    d.extend([b'h', next() as u8]);
                } else {
                    d.push(b'j');
                    d.extend((next() % 300).to_le_bytes());
                }
            }
            match next() % 4 {
                0 => {}
                1 => d.push(b'u'),
                _ => d.push(b'e'),
            }
            d.extend([b'u', b'e', b'j']);
            let cut = (next() as usize) % (d.len() + 1);
            for data in [&d[..], &d[..cut]] {
                assert_eq!(body_end(data, 0), plain(data, 0), "{data:?}");
            }
        }
    }

    #[test]
    fn bodies_that_differ_in_one_word_never_share_a_key() {
        // Every single-byte change of a realistic body (LONG_BINGETs) changes the key.
        let mut body = Vec::new();
        for i in 0..45u32 {
            body.push(b'j');
            body.extend((400 + 3 * i).to_le_bytes());
        }
        let k = body_key(&body);
        for at in 0..body.len() {
            for bit in 0..8 {
                let mut b = body.clone();
                b[at] ^= 1 << bit;
                let kb = body_key(&b);
                assert_ne!(kb.h1, k.h1, "byte {at} bit {bit}");
                assert_ne!(kb.h2, k.h2, "byte {at} bit {bit}");
            }
        }
        // And a length change alone changes it too.
        assert_ne!(body_key(&body[..body.len() - 5]), k);
    }

    #[test]
    fn the_table_finds_what_it_holds_and_misses_the_rest() {
        let mut c = ListBodies::default();
        let bodies: Vec<Vec<u8>> = (0..5000u32)
            .map(|i| {
                let mut b = vec![b'j'];
                b.extend(i.to_le_bytes());
                b.extend([b'h', (i % 251) as u8]);
                b
            })
            .collect();
        for (i, b) in bodies.iter().enumerate() {
            let k = c.get(b).unwrap_err();
            c.insert(k, StackId(i as u32 + 1));
        }
        for (i, b) in bodies.iter().enumerate() {
            assert_eq!(c.get(b), Ok(StackId(i as u32 + 1)));
        }
        assert!(c.get(&[b'j', 0xff, 0xff, 0xff, 0xff]).is_err());
        c.clear();
        assert!(c.get(&bodies[0]).is_err());
    }
}
