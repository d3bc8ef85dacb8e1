//! Why a model read from an untrusted cache cannot be used.

/// A model whose ids or columns do not hold together (a corrupt cache file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The stack table's offsets do not start at 0, decrease, or overrun its frames.
    #[error("stack table offsets are inconsistent")]
    StackOffsets,
    /// Stack 0 is not the empty stack.
    #[error("stack 0 must be the empty stack")]
    EmptyStack,
    /// A stack refers to a frame that does not exist.
    #[error("a stack refers to a frame that does not exist")]
    StackFrame,
    /// A frame refers to a string that does not exist.
    #[error("a frame refers to a string that does not exist")]
    FrameString,
    /// A trace's columns have different lengths.
    #[error("trace columns have different lengths")]
    TraceColumns,
    /// An event refers to a stack that does not exist.
    #[error("an event refers to a stack that does not exist")]
    EventStack,
    /// An event refers to a meta record that does not exist.
    #[error("an event refers to a meta record that does not exist")]
    EventMeta,
    /// An event has an action code no name was given.
    #[error("an event has an unknown action code")]
    EventAction,
    /// A segment refers to a stack that does not exist.
    #[error("a segment refers to a stack that does not exist")]
    SegmentStack,
    /// A block refers to a stack that does not exist.
    #[error("a block refers to a stack that does not exist")]
    BlockStack,
}
