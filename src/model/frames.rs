//! Interned strings, frames and stacks.
//!
//! PyTorch already de-duplicates frames and stacks when it symbolizes tracebacks, so a
//! snapshot holds few distinct ones referenced many times. The loader interns them by
//! pickle identity first (free) and by content second, and everything downstream works
//! with [`StackId`]s. Stacks live in one flat buffer (`frames` + `offsets`), innermost
//! frame first, as in the file.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::ids::{FrameId, StackId, StrId};
use super::value::Extra;

/// Interned strings (frame names and file names).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Strings {
    items: Vec<Box<str>>,
    #[serde(skip)]
    index: HashMap<Box<str>, StrId>,
}

impl PartialEq for Strings {
    fn eq(&self, other: &Self) -> bool {
        self.items == other.items
    }
}

impl Strings {
    /// Returns the id of `s`, adding it if new.
    pub fn intern(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.index.get(s) {
            return id;
        }
        let id = StrId(self.items.len() as u32);
        self.items.push(s.into());
        self.index.insert(s.into(), id);
        id
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
        self.index = self
            .items
            .iter()
            .enumerate()
            .map(|(i, s)| (s.clone(), StrId(i as u32)))
            .collect();
    }
}

/// One stack frame: `{"name", "filename", "line"}` plus any extra keys (FX fields).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// Function name (`name`).
    pub name: StrId,
    /// File name (`filename`); `"??"` or `""` for native frames.
    pub filename: StrId,
    /// Line number (`line`); 0 for native frames.
    pub line: i64,
    /// Keys beyond the three standard ones, kept for exact round trips.
    pub extra: Extra,
}

/// Interned frames.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FrameTable {
    items: Vec<Frame>,
    #[serde(skip)]
    index: HashMap<Frame, FrameId>,
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StackTable {
    frames: Vec<FrameId>,
    offsets: Vec<u32>,
    #[serde(skip)]
    index: HashMap<Box<[FrameId]>, StackId>,
}

impl Default for StackTable {
    fn default() -> Self {
        let mut t = StackTable {
            frames: Vec::new(),
            offsets: vec![0],
            index: HashMap::new(),
        };
        t.intern(&[]);
        t
    }
}

impl StackTable {
    /// Returns the id of the stack made of `frames` (innermost first), adding it if new.
    pub fn intern(&mut self, frames: &[FrameId]) -> StackId {
        if let Some(&id) = self.index.get(frames) {
            return id;
        }
        let id = StackId((self.offsets.len() - 1) as u32);
        self.frames.extend_from_slice(frames);
        self.offsets.push(self.frames.len() as u32);
        self.index.insert(frames.into(), id);
        id
    }

    /// The frames of stack `id`, innermost first.
    pub fn get(&self, id: StackId) -> &[FrameId] {
        let i = id.index();
        &self.frames[self.offsets[i] as usize..self.offsets[i + 1] as usize]
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
        for i in 0..self.len() {
            let id = StackId(i as u32);
            let frames: Box<[FrameId]> = self.get(id).into();
            self.index.insert(frames, id);
        }
    }

    /// Checks that every frame id is in range and the offsets are consistent.
    pub(crate) fn check(&self, frame_count: usize) -> Result<(), String> {
        if self.offsets.first() != Some(&0) {
            return Err("stack table offsets do not start at 0".into());
        }
        if self.offsets.windows(2).any(|w| w[0] > w[1])
            || *self.offsets.last().unwrap_or(&0) as usize != self.frames.len()
        {
            return Err("stack table offsets are inconsistent".into());
        }
        if self.offsets.len() < 2 || !self.get(StackId::EMPTY).is_empty() {
            return Err("stack 0 must be the empty stack".into());
        }
        if self.frames.iter().any(|f| f.index() >= frame_count) {
            return Err("a stack refers to a frame that does not exist".into());
        }
        Ok(())
    }
}
