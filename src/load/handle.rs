//! The loader's value handle: what the pickle machine's stack, memo and containers
//! hold. Its own file because both the machine and the memo's word encoding read it.

/// A handle to a value: scalars inline, containers and strings as indices into [`Heap`].
// A 4-byte tag: with a 1-byte one, reads of the tag as a word right after it was stored
// as a byte could not be forwarded from the store and stalled (measured on every event).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(u32)]
pub(crate) enum Value {
    None,
    // Booleans as two payload-free variants: a `bool` payload at byte 1 made every copy
    // of a handle two overlapping stores, and the loads after them stalled.
    True,
    False,
    Int(i64),
    /// Index into [`Heap::bigs`]: an integer beyond `i64`.
    Big(u32),
    Float(f64),
    /// Index into [`Heap::strs`].
    Str(u32),
    /// A string inside the input, validated as UTF-8 when read: `offset << 16 | len`
    /// (short strings, which are most of a snapshot's, need no table entry).
    Span(u64),
    /// Index into [`Heap::bytes`].
    Bytes(u32),
    List(u32),
    Dict(u32),
    /// Index into [`Heap::tuple_spans`].
    Tuple(u32),
    /// A frame dict already interned by the builder.
    Frame(crate::model::FrameId),
    /// A frames list decoded by the fast path: only its interned stack (a ticket) exists.
    Stack(crate::model::StackId),
    /// A trace entry decoded straight into [`Heap::pending`] (index), waiting for the
    /// APPENDS that puts it in its list.
    Event(u32),
    /// A trace entry the fast path already appended to its trace (the APPENDS skips it).
    Appended,
    /// A trace entry already turned into a record; a later memo reference to it is an error.
    Gone,
}
