//! `leakscope tree`: the call tree of the allocations live at a point of the trace.
//!
//! Every live allocation is followed along its filtered stack (see
//! [`Attributor::filtered`]) from the outermost frame to the innermost; equal frame paths
//! merge, so the tree is a prefix tree of stacks under a synthetic `all` root. A node's
//! *inclusive* bytes are those of every allocation whose path passes through it, its
//! *self* bytes those of the allocations whose innermost filtered frame it is.
//! Allocations with no frame left after filtering hang under one
//! [`NO_FRAME`] child of the root, so the root's own self
//! bytes are always zero.
//!
//! Stacks can be hundreds of frames deep, so nothing here recurses: the tree is built and
//! summed over node indices, and walked with explicit stacks (its JSON form too, written
//! by `render::json`).

use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};

use super::point::Point;
use crate::attribute::{Attributor, NO_FRAME, UNTRACED};
use crate::model::fxhash::FastMap;
use crate::model::{FrameId, Line, StackId, StrId};
use crate::replay::Replay;

/// Name of the synthetic root node.
pub const ROOT_NAME: &str = "all";

/// Where a frame node's code is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// File name as recorded.
    pub filename: String,
    /// Line.
    pub line: Line,
    /// Function name.
    pub function: String,
}

/// What a node stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// The synthetic `all` root.
    Root,
    /// Allocations with no frame left after filtering ([`NO_FRAME`]).
    NoFrame,
    /// A group that is not a frame: a role under `--by role`, or [`UNTRACED`] memory.
    Label,
    /// A frame.
    Frame(FrameInfo),
}

/// One node of the call tree.
#[derive(Clone, Debug)]
pub struct TreeNode {
    /// `all`, [`NO_FRAME`] or `file:line:function`.
    pub name: String,
    /// What the node stands for.
    pub kind: NodeKind,
    /// The caller's node (`None` for the root).
    pub parent: Option<NodeIndex>,
    /// Distance from the root (the root is 0).
    pub depth: u32,
    /// Inclusive bytes: every live allocation whose path passes through this node.
    pub bytes: u64,
    /// Bytes of the allocations whose innermost filtered frame is this node.
    pub self_bytes: u64,
    /// Inclusive number of allocations.
    pub blocks: u64,
    /// Number of allocations whose innermost filtered frame is this node.
    pub self_blocks: u64,
}

impl TreeNode {
    fn new(name: String, kind: NodeKind, parent: Option<NodeIndex>, depth: u32) -> TreeNode {
        TreeNode {
            name,
            kind,
            parent,
            depth,
            bytes: 0,
            self_bytes: 0,
            blocks: 0,
            self_blocks: 0,
        }
    }

    /// The frame, for frame nodes.
    pub fn frame(&self) -> Option<&FrameInfo> {
        match &self.kind {
            NodeKind::Frame(f) => Some(f),
            _ => None,
        }
    }
}

/// Identity of a child under its parent: frames merge by `(filename, name, line)`, so
/// frames that differ only in keys leakscope does not show are one node.
type ChildKey = (NodeIndex, Option<(StrId, StrId, Line)>);

/// The call tree: a petgraph [`DiGraph`] with edges caller → callee.
///
/// A node's index is always greater than its parent's, so sweeping indices downwards
/// visits children before parents.
#[derive(Clone, Debug)]
pub struct CallTree {
    graph: DiGraph<TreeNode, ()>,
    root: NodeIndex,
}

impl Default for CallTree {
    fn default() -> Self {
        CallTree::new()
    }
}

impl CallTree {
    /// A tree with only the root.
    pub fn new() -> CallTree {
        let mut graph = DiGraph::new();
        let root = graph.add_node(TreeNode::new(ROOT_NAME.into(), NodeKind::Root, None, 0));
        CallTree { graph, root }
    }

    /// The tree of the allocations live after `point.event_index`, following stacks as
    /// `attr` filters them; allocations `--focus` leaves out (`attr.key` is `None`) are
    /// not counted.
    pub fn build(replay: &Replay, point: &Point, attr: &mut Attributor) -> CallTree {
        let snap = attr.snapshot();
        let mut tree = CallTree::new();
        // Leaves by (group node, stack): under `--by role` (or a name) each role is a
        // child of the root with the stacks of its memory below it.
        let mut leaf_of: FastMap<(NodeIndex, StackId), NodeIndex> = FastMap::default();
        let mut child_of: FastMap<ChildKey, NodeIndex> = FastMap::default();
        let mut label_of: FastMap<String, NodeIndex> = FastMap::default();
        let grouped = attr.by().per_allocation();
        for i in replay.live_indices(point.event_index) {
            let l = &replay.lifetimes[i];
            let Some(key) = attr.key_of(i, l) else {
                continue;
            };
            let frames = attr.filtered(l.stack);
            let label = if grouped {
                Some(attr.site(key).label.clone())
            } else if l.before_trace() && frames.is_empty() {
                Some(UNTRACED.to_string())
            } else {
                None
            };
            let top = match label {
                None => tree.root,
                Some(name) => match label_of.get(&name) {
                    Some(&n) => n,
                    None => {
                        let n = tree.graph.add_node(TreeNode::new(
                            name.clone(),
                            NodeKind::Label,
                            Some(tree.root),
                            1,
                        ));
                        tree.graph.add_edge(tree.root, n, ());
                        label_of.insert(name, n);
                        n
                    }
                },
            };
            let leaf = match leaf_of.get(&(top, l.stack)) {
                Some(&n) => n,
                None => {
                    let n = if frames.is_empty() {
                        if top == tree.root {
                            tree.child(&mut child_of, top, None, || {
                                (NO_FRAME.to_string(), NodeKind::NoFrame)
                            })
                        } else {
                            top
                        }
                    } else {
                        // Outermost first.
                        frames.iter().rev().fold(top, |parent, &f: &FrameId| {
                            let fr = snap.frames.get(f);
                            let key = Some((fr.filename, fr.name, fr.line));
                            tree.child(&mut child_of, parent, key, || {
                                let info = FrameInfo {
                                    filename: snap.strings.get(fr.filename).to_string(),
                                    line: fr.line,
                                    function: snap.strings.get(fr.name).to_string(),
                                };
                                (
                                    format!("{}:{}:{}", info.filename, info.line, info.function),
                                    NodeKind::Frame(info),
                                )
                            })
                        })
                    };
                    leaf_of.insert((top, l.stack), n);
                    n
                }
            };
            let node = &mut tree.graph[leaf];
            node.self_bytes = node.self_bytes.saturating_add(l.bytes);
            node.self_blocks += 1;
        }
        tree.sum_up();
        tree
    }

    /// The child of `parent` with `key`, added (named by `make`) when new.
    fn child(
        &mut self,
        index: &mut FastMap<ChildKey, NodeIndex>,
        parent: NodeIndex,
        key: Option<(StrId, StrId, Line)>,
        make: impl FnOnce() -> (String, NodeKind),
    ) -> NodeIndex {
        if let Some(&n) = index.get(&(parent, key)) {
            return n;
        }
        let (name, kind) = make();
        let depth = self.graph[parent].depth + 1;
        let n = self
            .graph
            .add_node(TreeNode::new(name, kind, Some(parent), depth));
        self.graph.add_edge(parent, n, ());
        index.insert((parent, key), n);
        n
    }

    /// Inclusive sums from the self sums: children have higher indices than their parents.
    fn sum_up(&mut self) {
        for n in self.graph.node_indices() {
            let node = &mut self.graph[n];
            node.bytes = node.self_bytes;
            node.blocks = node.self_blocks;
        }
        for i in (1..self.graph.node_count()).rev() {
            let n = NodeIndex::new(i);
            let (bytes, blocks, parent) = {
                let node = &self.graph[n];
                (node.bytes, node.blocks, node.parent)
            };
            if let Some(p) = parent {
                self.graph[p].bytes = self.graph[p].bytes.saturating_add(bytes);
                self.graph[p].blocks += blocks;
            }
        }
    }

    /// The root (`all`).
    pub fn root(&self) -> NodeIndex {
        self.root
    }

    /// A node.
    pub fn node(&self, n: NodeIndex) -> &TreeNode {
        &self.graph[n]
    }

    /// The underlying graph (edges caller → callee).
    pub fn graph(&self) -> &DiGraph<TreeNode, ()> {
        &self.graph
    }

    /// Number of nodes, the root included.
    pub fn len(&self) -> usize {
        self.graph.node_count()
    }

    /// True when the tree is only its root (nothing live, or nothing in focus).
    pub fn is_empty(&self) -> bool {
        self.graph.node_count() <= 1
    }

    /// Greatest node depth (0 when the tree is only its root).
    pub fn depth(&self) -> u32 {
        self.graph
            .node_weights()
            .map(|n| n.depth)
            .max()
            .unwrap_or(0)
    }

    /// The callees of `n`, largest inclusive bytes first (ties by name).
    pub fn children(&self, n: NodeIndex) -> Vec<NodeIndex> {
        let mut c: Vec<NodeIndex> = self
            .graph
            .neighbors_directed(n, Direction::Outgoing)
            .collect();
        c.sort_by(|&a, &b| {
            let (a, b) = (&self.graph[a], &self.graph[b]);
            b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name))
        });
        c
    }

    /// The nodes from the root's first child down to `n` (empty for the root).
    pub fn path(&self, n: NodeIndex) -> Vec<NodeIndex> {
        let mut p = Vec::with_capacity(self.graph[n].depth as usize);
        let mut cur = n;
        while let Some(parent) = self.graph[cur].parent {
            p.push(cur);
            cur = parent;
        }
        p.reverse();
        p
    }

    /// Every node in depth-first preorder, children largest first (no recursion).
    pub fn preorder(&self) -> Vec<NodeIndex> {
        let mut out = Vec::with_capacity(self.len());
        let mut stack = vec![self.root];
        while let Some(n) = stack.pop() {
            out.push(n);
            stack.extend(self.children(n).into_iter().rev());
        }
        out
    }
}

/// The call tree of one device at a point.
#[derive(Clone, Debug)]
pub struct DeviceTree {
    /// Device.
    pub device: i64,
    /// The point.
    pub at: Point,
    /// Σ bytes in the tree: the root's inclusive bytes (equals `at.requested_bytes` unless
    /// `--focus` leaves some allocations out).
    pub total_bytes: u64,
    /// Σ allocations in the tree.
    pub total_blocks: u64,
    /// The tree.
    pub tree: CallTree,
}

/// The call tree of the allocations live at `point`.
pub fn tree(replay: &Replay, point: Point, attr: &mut Attributor) -> DeviceTree {
    let tree = CallTree::build(replay, &point, attr);
    let root = tree.node(tree.root());
    DeviceTree {
        device: replay.device,
        total_bytes: root.bytes,
        total_blocks: root.blocks,
        at: point,
        tree,
    }
}
