//! Frames-list bodies already decoded, recognised by their bytes. Real files write a fresh
//! frames list per event, but its body (memo references to the same frame dicts) repeats
//! for every event from the same call site, so a byte match stands for the whole decode.
//! This sits on the parser's critical path for most of a file's bytes, so both finding a
//! body's end and hashing it avoid serial chains of dependent loads.

use crate::model::StackId;

/// Most bytes of bodies remembered, and most bodies (a few thousand distinct stacks of a
/// few hundred bytes each is typical; a crafted file of tiny distinct bodies gets no more
/// than this, so the cache's own overhead stays bounded too).
const MAX_BYTES: usize = 16 << 20;
const MAX_COUNT: usize = 1 << 18;
/// Slots probed at most per look-up: a crafted file whose bodies share hash bits gets
/// misses (a full decode each), never long probe chains.
const MAX_PROBES: usize = 16;

/// A slot of the table: the body's hash, its span in the arena (`len` 0: empty), its stack.
#[derive(Clone, Copy)]
struct Slot {
    hash: u64,
    start: u32,
    len: u32,
    id: StackId,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            hash: 0,
            start: 0,
            len: 0,
            id: StackId::EMPTY,
        }
    }
}

/// The cache: an open-addressing table of body hashes (one probe, usually, into a table
/// that stays in cache), the bodies' bytes in one arena for the exact comparison.
#[derive(Default)]
pub(crate) struct ListBodies {
    slots: Vec<Slot>,
    count: usize,
    arena: Vec<u8>,
}

impl ListBodies {
    #[inline]
    fn home(&self, h: u64) -> usize {
        // The hash's high bits are its best mixed.
        (h >> 32) as usize & (self.slots.len() - 1)
    }

    /// The stack of a body seen before, or the body's hash for [`ListBodies::insert`].
    #[inline]
    pub fn get(&self, body: &[u8]) -> Result<StackId, u64> {
        let h = body_hash(body);
        if self.slots.is_empty() {
            return Err(h);
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(h);
        for _ in 0..MAX_PROBES {
            let s = self.slots[i];
            if s.len == 0 {
                break;
            }
            if s.hash == h {
                if self.arena.get(s.start as usize..(s.start + s.len) as usize) == Some(body) {
                    return Ok(s.id);
                }
                break;
            }
            i = (i + 1) & mask;
        }
        Err(h)
    }

    /// Remembers `body` (hash `h` from [`ListBodies::get`]) as `id`, while within bounds.
    /// A different body with the same hash keeps its place: the newcomer is simply
    /// decoded each time, which is slower but exact.
    pub fn insert(&mut self, h: u64, body: &[u8], id: StackId) {
        if body.is_empty() || self.arena.len() + body.len() > MAX_BYTES || self.count >= MAX_COUNT {
            return;
        }
        if (self.count + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(h);
        for _ in 0..MAX_PROBES {
            let s = &mut self.slots[i];
            if s.len == 0 {
                *s = Slot {
                    hash: h,
                    start: self.arena.len() as u32,
                    len: body.len() as u32,
                    id,
                };
                self.arena.extend_from_slice(body);
                self.count += 1;
                return;
            }
            if s.hash == h {
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
        for s in old.into_iter().filter(|s| s.len != 0) {
            let mut i = self.home(s.hash);
            for _ in 0..MAX_PROBES {
                if self.slots[i].len == 0 {
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
        self.arena.clear();
    }
}

/// The offset of the `APPENDS` that ends a body of `BINGET`/`LONG_BINGET`s starting at
/// `p`, or `None` when anything else comes first (or the body is empty).
#[inline]
pub(crate) fn body_end(data: &[u8], p: usize) -> Option<usize> {
    let mut q = long_binget_run(data, p);
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
/// loads do not depend on each other. (A 64-byte SSE2 version measured no faster.)
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

/// A hash of a whole body in eight independent lanes, folded without a serial chain (a
/// single multiply-rotate chain would cost its latency per 8 bytes).
#[inline]
pub(crate) fn body_hash(b: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
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
    let mixed = (lanes[0] ^ u64::from_le_bytes(last))
        .wrapping_add(lanes[1].rotate_left(7))
        .wrapping_add(lanes[2].rotate_left(15) ^ lanes[3].rotate_left(23))
        .wrapping_add(lanes[4].rotate_left(31) ^ lanes[5].rotate_left(39))
        .wrapping_add(lanes[6].rotate_left(47) ^ lanes[7].rotate_left(55));
    let h = mixed.wrapping_mul(K);
    h ^ (h >> 29)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eight-at-a-time path and the one-at-a-time path must find the same end.
    #[test]
    fn body_end_matches_a_plain_walk() {
        let plain = |d: &[u8], p: usize| -> Option<usize> {
            let mut q = p;
            loop {
                match *d.get(q)? {
                    b'h' => q += 2,
                    b'j' => q += 5,
                    b'e' if q > p => return Some(q),
                    _ => return None,
                }
            }
        };
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
    fn a_different_body_with_a_colliding_slot_is_not_taken_for_another() {
        let mut c = ListBodies::default();
        let a = [b'j', 1, 0, 0, 0];
        let b = [b'j', 2, 0, 0, 0];
        let ha = c.get(&a).unwrap_err();
        c.insert(ha, &a, StackId(3));
        assert_eq!(c.get(&a), Ok(StackId(3)));
        // Put a's entry where b's hash leads, under b's hash: b must not read back as a's
        // stack (the bytes differ), and a, no longer under its own hash, is a miss.
        let hb = body_hash(&b);
        let entry = *c.slots.iter().find(|s| s.len != 0).unwrap();
        c.slots.iter_mut().for_each(|s| *s = Slot::default());
        let home = c.home(hb);
        c.slots[home] = Slot { hash: hb, ..entry };
        assert!(c.get(&b).is_err());
        assert!(c.get(&a).is_err());
    }
}
