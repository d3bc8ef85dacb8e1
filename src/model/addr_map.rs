//! The table of open allocations by address that every replay keeps.
//!
//! A replay does an insert or a remove for most events, against a table that stays small
//! (the allocations live at one moment) while millions of addresses pass through it. A
//! general hash map was the largest cost of `summary` after the load; this one is open
//! addressing with linear probing over `(address, value)` pairs, and a removal shifts the
//! entries after it back instead of leaving a tombstone, so probes stay short however
//! long the churn goes on. On the benchmark trace it takes a third less time than the
//! standard map with the project's fast hasher.
//!
//! Slots are found from a mix of the address and a per-process random seed (a bijection
//! followed by the top bits), so a crafted file cannot line its addresses up on one slot
//! without knowing the seed.

/// Marks an empty slot. The address itself is a legal key, kept outside the slots.
const EMPTY: u64 = u64::MAX;

/// A map from addresses to small copyable values.
#[derive(Clone, Debug)]
pub struct AddrMap<V: Copy> {
    slots: Vec<(u64, V)>,
    /// `64 - log2(slots.len())`: the top bits of the mixed address pick the home slot.
    shift: u32,
    len: usize,
    seed: u64,
    /// The value at address `EMPTY`, which cannot live in a slot.
    at_empty: Option<V>,
}

impl<V: Copy + Default> Default for AddrMap<V> {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

/// The murmur3 finaliser: a bijection of 64-bit words in which every input bit reaches
/// the top bits.
#[inline]
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0xadd2_u64)
}

impl<V: Copy + Default> AddrMap<V> {
    /// An empty map with room for `n` entries before it grows.
    pub fn with_capacity(n: usize) -> Self {
        let slots = (n.max(8) * 4).next_power_of_two();
        AddrMap {
            slots: vec![(EMPTY, V::default()); slots],
            shift: 64 - slots.trailing_zeros(),
            len: 0,
            seed: random_seed(),
            at_empty: None,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len + self.at_empty.is_some() as usize
    }

    /// True when the map holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    #[inline]
    fn home(&self, addr: u64) -> usize {
        (mix(addr ^ self.seed) >> self.shift) as usize
    }

    /// The slot holding `addr`, or the empty slot where it would go.
    #[inline]
    fn find(&self, addr: u64) -> (usize, bool) {
        let mask = self.mask();
        let mut i = self.home(addr);
        loop {
            let k = self.slots[i].0;
            if k == addr {
                return (i, true);
            }
            if k == EMPTY {
                return (i, false);
            }
            i = (i + 1) & mask;
        }
    }

    /// Sets `addr` to `v`, returning the value it had.
    #[inline]
    pub fn insert(&mut self, addr: u64, v: V) -> Option<V> {
        if addr == EMPTY {
            return self.at_empty.replace(v);
        }
        let (i, found) = self.find(addr);
        if found {
            return Some(std::mem::replace(&mut self.slots[i].1, v));
        }
        self.slots[i] = (addr, v);
        self.len += 1;
        // At most a quarter full, so a probe ends within a slot or two (half full was a
        // quarter slower on a real trace: longer runs, more mispredicted branches).
        if self.len * 4 > self.slots.len() {
            self.grow();
        }
        None
    }

    /// The value at `addr`.
    #[inline]
    pub fn get(&self, addr: u64) -> Option<V> {
        if addr == EMPTY {
            return self.at_empty;
        }
        let (i, found) = self.find(addr);
        found.then(|| self.slots[i].1)
    }

    /// The value at `addr`, to change in place.
    #[inline]
    pub fn get_mut(&mut self, addr: u64) -> Option<&mut V> {
        if addr == EMPTY {
            return self.at_empty.as_mut();
        }
        let (i, found) = self.find(addr);
        found.then(|| &mut self.slots[i].1)
    }

    /// True when `addr` is in the map.
    #[inline]
    pub fn contains_key(&self, addr: u64) -> bool {
        if addr == EMPTY {
            return self.at_empty.is_some();
        }
        self.find(addr).1
    }

    /// Removes `addr`, returning its value.
    #[inline]
    pub fn remove(&mut self, addr: u64) -> Option<V> {
        if addr == EMPTY {
            return self.at_empty.take();
        }
        let (mut hole, found) = self.find(addr);
        if !found {
            return None;
        }
        let out = self.slots[hole].1;
        self.len -= 1;
        // Backward shift: each later entry of the run moves into the hole unless its home
        // slot lies after the hole (cyclically), where a probe for it would not pass.
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let k = self.slots[j].0;
            if k == EMPTY {
                break;
            }
            let home = self.home(k);
            // Distance from home to j, and from the hole to j: the entry may move to the
            // hole when the hole is no further from j than its home is.
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole].0 = EMPTY;
        Some(out)
    }

    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        let n = old.len() * 2;
        self.slots = vec![(EMPTY, V::default()); n];
        self.shift = 64 - n.trailing_zeros();
        for (k, v) in old {
            if k != EMPTY {
                let (i, _) = self.find(k);
                self.slots[i] = (k, v);
            }
        }
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, V)> + '_ {
        self.slots
            .iter()
            .filter(|(k, _)| *k != EMPTY)
            .copied()
            .chain(self.at_empty.map(|v| (EMPTY, v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A long random churn of inserts and removes over a few address ranges (including
    /// the sentinel), checked step by step against `HashMap`.
    #[test]
    fn matches_a_hash_map_under_churn() {
        let mut m: AddrMap<u64> = AddrMap::default();
        let mut r: HashMap<u64, u64> = HashMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let addr = match x % 5 {
                0 => EMPTY,
                1 => (x >> 8) % 64,
                2 => 0x7f00_0000_0000 + ((x >> 8) % 4096) * 512,
                _ => (x >> 8) % 20_000,
            };
            match (x >> 40) % 3 {
                0 | 1 if step < 150_000 => assert_eq!(m.insert(addr, step), r.insert(addr, step)),
                _ => assert_eq!(m.remove(addr), r.remove(&addr)),
            }
            assert_eq!(m.get(addr), r.get(&addr).copied());
            assert_eq!(m.len(), r.len());
        }
        let mut all: Vec<(u64, u64)> = m.iter().collect();
        let mut want: Vec<(u64, u64)> = r.into_iter().collect();
        all.sort_unstable();
        want.sort_unstable();
        assert_eq!(all, want);
        if let Some(v) = m.get_mut(all[0].0) {
            *v = 7;
        }
        assert_eq!(m.get(all[0].0), Some(7));
        assert!(m.contains_key(all[0].0));
    }
}
