//! A fast multiply-rotate hasher for interning tables, whose keys are short runs of
//! small integers (frame ids) and short strings. SipHash cost a tenth of the load time.
//! Each table starts from a per-process random seed, so a crafted file cannot aim for
//! collisions it can compute in advance.

use std::hash::{BuildHasher, Hasher};

const K: u64 = 0x517c_c1b7_2722_0a95;

/// The hasher state.
#[derive(Clone, Copy)]
pub struct FastHasher {
    hash: u64,
}

impl FastHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.hash = (self.hash.rotate_left(5) ^ w).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            self.add(u64::from_le_bytes(a));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut a = [0u8; 8];
            a[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(a) ^ ((rest.len() as u64) << 56));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // A final avalanche so the low bits hashbrown uses depend on every input bit.
        let mut h = self.hash;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 33)
    }
}

/// Builds [`FastHasher`]s from a seed chosen once per table.
#[derive(Clone, Copy)]
pub struct FastState {
    seed: u64,
}

impl Default for FastState {
    fn default() -> Self {
        // RandomState is seeded from the OS once per process; borrow its randomness.
        let seed = std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64);
        FastState { seed }
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;

    #[inline]
    fn build_hasher(&self) -> FastHasher {
        FastHasher { hash: self.seed }
    }
}

/// A `HashMap` with [`FastState`].
pub type FastMap<K, V> = std::collections::HashMap<K, V, FastState>;

/// A `HashSet` with [`FastState`].
pub type FastSet<K> = std::collections::HashSet<K, FastState>;
