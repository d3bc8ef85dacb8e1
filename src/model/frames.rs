//! Interned strings, frames and stacks.
//!
//! PyTorch already de-duplicates frames and stacks when it symbolizes tracebacks, so a
//! snapshot holds few distinct ones referenced many times. The loader interns them by
//! pickle identity first (free) and by content second, and everything downstream works
//! with [`StackId`]s. Stacks live in one flat buffer (`frames` + `offsets`), innermost
//! frame first, as in the file.

use serde::{Deserialize, Serialize};

use super::error::ModelError;
use super::fxhash::FastMap;
use super::ids::{FrameId, StackId, StrId};
use super::line::Line;
use super::value::Extra;

/// Interned strings (frame names and file names), each held once: the index maps a
/// hash of the string to the first string with that hash, and `chain` links strings
/// sharing a hash (as [`StackTable`] does for stacks), so a long name is not copied into
/// the index too.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Strings {
    items: Vec<Box<str>>,
    #[serde(skip)]
    index: FastMap<u64, u32>,
    #[serde(skip)]
    chain: Vec<u32>,
    /// Bytes of the strings' text (kept up to date by `intern`).
    #[serde(skip)]
    text_bytes: usize,
}

impl PartialEq for Strings {
    fn eq(&self, other: &Self) -> bool {
        self.items == other.items
    }
}

impl Strings {
    fn hash(&self, s: &str) -> u64 {
        use std::hash::BuildHasher;
        self.index.hasher().hash_one(s)
    }

    /// Returns the id of `s`, adding it if new.
    pub fn intern(&mut self, s: &str) -> StrId {
        match self.find(s) {
            Some(id) => id,
            None => self.insert(s.into()),
        }
    }

    /// Returns the id of `s`, adding `s` itself if new (no copy).
    pub fn intern_owned(&mut self, s: String) -> StrId {
        match self.find(&s) {
            Some(id) => id,
            None => self.insert(s.into_boxed_str()),
        }
    }

    fn find(&self, s: &str) -> Option<StrId> {
        let mut at = self.index.get(&self.hash(s)).copied().unwrap_or(NO_STACK);
        while at != NO_STACK {
            if &*self.items[at as usize] == s {
                return Some(StrId(at));
            }
            at = self.chain[at as usize];
        }
        None
    }

    fn insert(&mut self, s: Box<str>) -> StrId {
        let hash = self.hash(&s);
        let head = self.index.get(&hash).copied().unwrap_or(NO_STACK);
        let id = self.items.len() as u32;
        self.text_bytes += s.len();
        self.items.push(s);
        self.chain.push(head);
        self.index.insert(hash, id);
        StrId(id)
    }

    /// Bytes held: the text once, and the tables over it.
    pub fn held_bytes(&self) -> usize {
        self.text_bytes
            + self.items.capacity() * size_of::<Box<str>>()
            + self.chain.capacity() * size_of::<u32>()
            + self.index.capacity() * (size_of::<(u64, u32)>() + 1)
    }

    /// The string behind `id`.
    pub fn get(&self, id: StrId) -> &str {
        &self.items[id.index()]
    }

    /// Number of distinct strings.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when no string was interned.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Rebuilds the lookup index after deserialization.
    pub(crate) fn rebuild_index(&mut self) {
        self.index.clear();
        self.chain.clear();
        self.text_bytes = 0;
        for i in 0..self.items.len() {
            let hash = self.hash(&self.items[i]);
            let head = self.index.insert(hash, i as u32).unwrap_or(NO_STACK);
            self.chain.push(head);
            self.text_bytes += self.items[i].len();
        }
    }
}

/// One stack frame: `{"name", "filename", "line"}` plus any extra keys (FX fields).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// Function name (`name`).
    pub name: StrId,
    /// File name (`filename`); `"??"` or `""` for native frames.
    pub filename: StrId,
    /// Line number (`line`): 0, negative or [`Line::UNKNOWN`] for many native frames.
    pub line: Line,
    /// Keys beyond the three standard ones, kept for exact round trips.
    pub extra: Extra,
}

/// Interned frames.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FrameTable {
    items: Vec<Frame>,
    #[serde(skip)]
    index: FastMap<Frame, FrameId>,
}

impl FrameTable {
    /// Returns the id of `frame`, adding it if new.
    pub fn intern(&mut self, frame: Frame) -> FrameId {
        if let Some(&id) = self.index.get(&frame) {
            return id;
        }
        let id = FrameId(self.items.len() as u32);
        self.items.push(frame.clone());
        self.index.insert(frame, id);
        id
    }

    /// The frame behind `id`.
    pub fn get(&self, id: FrameId) -> &Frame {
        &self.items[id.index()]
    }

    /// Number of distinct frames.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Bytes held by the frames and their index (each frame is kept in both; a frame's
    /// extra keys are counted by whoever built them).
    pub fn held_bytes(&self) -> usize {
        self.items.capacity() * size_of::<Frame>()
            + self.index.capacity() * (size_of::<(Frame, FrameId)>() + 1)
    }

    /// True when there is no frame.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// All frames, indexable by [`FrameId`].
    pub fn iter(&self) -> impl Iterator<Item = &Frame> {
        self.items.iter()
    }

    pub(crate) fn rebuild_index(&mut self) {
        self.index = self
            .items
            .iter()
            .enumerate()
            .map(|(i, f)| (f.clone(), FrameId(i as u32)))
            .collect();
    }
}

/// Interned stacks in one flat buffer. Stack 0 is the empty stack.
///
/// The index maps a hash of the frame ids to the first stack with that hash, and
/// `chain` links stacks sharing a hash; the stacks themselves are never copied into it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StackTable {
    frames: Vec<FrameId>,
    offsets: Vec<u32>,
    #[serde(skip)]
    index: FastMap<u64, u32>,
    #[serde(skip)]
    chain: Vec<u32>,
}

impl PartialEq for StackTable {
    fn eq(&self, other: &Self) -> bool {
        self.frames == other.frames && self.offsets == other.offsets
    }
}

const NO_STACK: u32 = u32::MAX;

/// Hash of a run of frame ids: four independent multiply lanes, so a 40-frame stack
/// costs a dozen dependent steps instead of forty.
#[inline]
pub fn hash_frames(frames: &[FrameId]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut lanes = [frames.len() as u64, 1, 2, 3];
    let mut chunks = frames.chunks_exact(4);
    for c in &mut chunks {
        for (lane, f) in lanes.iter_mut().zip(c) {
            *lane = (lane.rotate_left(5) ^ f.0 as u64).wrapping_mul(K);
        }
    }
    for (lane, f) in lanes.iter_mut().zip(chunks.remainder()) {
        *lane = (lane.rotate_left(5) ^ f.0 as u64).wrapping_mul(K);
    }
    lanes
        .iter()
        .fold(0u64, |h, &l| (h.rotate_left(23) ^ l).wrapping_mul(K))
}

impl Default for StackTable {
    fn default() -> Self {
        let mut t = StackTable {
            frames: Vec::new(),
            offsets: vec![0],
            index: FastMap::default(),
            chain: Vec::new(),
        };
        t.intern(&[]);
        t
    }
}

impl StackTable {
    /// Returns the id of the stack made of `frames` (innermost first), adding it if new.
    pub fn intern(&mut self, frames: &[FrameId]) -> StackId {
        let hash = hash_frames(frames);
        let head = self.index.get(&hash).copied().unwrap_or(NO_STACK);
        let mut at = head;
        while at != NO_STACK {
            if self.get(StackId(at)) == frames {
                return StackId(at);
            }
            at = self.chain[at as usize];
        }
        let id = StackId((self.offsets.len() - 1) as u32);
        self.frames.extend_from_slice(frames);
        self.offsets.push(self.frames.len() as u32);
        self.chain.push(head);
        self.index.insert(hash, id.0);
        id
    }

    /// The frames of stack `id`, innermost first.
    pub fn get(&self, id: StackId) -> &[FrameId] {
        let i = id.index();
        &self.frames[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// Bytes held by the stacks and their index.
    pub fn held_bytes(&self) -> usize {
        (self.frames.capacity() + self.offsets.capacity() + self.chain.capacity())
            * size_of::<u32>()
            + self.index.capacity() * (size_of::<(u64, u32)>() + 1)
    }

    /// Number of stacks, the empty one included.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Always false: the empty stack is always present.
    pub fn is_empty(&self) -> bool {
        false
    }

    pub(crate) fn rebuild_index(&mut self) {
        self.index.clear();
        self.chain.clear();
        for i in 0..self.len() {
            let hash = hash_frames(self.get(StackId(i as u32)));
            let head = self.index.insert(hash, i as u32).unwrap_or(NO_STACK);
            self.chain.push(head);
        }
    }

    /// Checks that every frame id is in range and the offsets are consistent.
    pub(crate) fn check(&self, frame_count: usize) -> Result<(), ModelError> {
        if self.offsets.first() != Some(&0)
            || self.offsets.windows(2).any(|w| w[0] > w[1])
            || *self.offsets.last().unwrap_or(&0) as usize != self.frames.len()
        {
            return Err(ModelError::StackOffsets);
        }
        if self.offsets.len() < 2 || !self.get(StackId::EMPTY).is_empty() {
            return Err(ModelError::EmptyStack);
        }
        if self.frames.iter().any(|f| f.index() >= frame_count) {
            return Err(ModelError::StackFrame);
        }
        Ok(())
    }
}
