//! The loader's memory bound: what a load may hold besides the input itself, as a
//! function of the input read so far.
//!
//! A real snapshot needs about half its size (the trace as 33-byte columns, the memo,
//! interned stacks), but a valid pickle can ask for far more per byte: one `EMPTY_DICT`
//! byte is a 32-byte slot, `(NNN…l` a list of 16-byte handles. So the loader counts what
//! it holds (its tables by capacity, the model it builds, every owned copy) and refuses
//! the input, naming the byte, at the first point where that count passes
//! [`allowed`]. Values the pickle discards are freed first ([`super::collect`]), so a
//! bound that counts only live data is never met by data that was thrown away.
//!
//! With the input itself (the file's pages are given back behind the parser; a
//! decompressed input is held whole), a load's peak resident memory is at most
//! `4 × input + 64 MiB`: the `+ 16 MiB` beyond [`FIXED`] covers the program, its threads
//! and the pages mapped ahead of the parser.

/// Bytes the loader may hold per byte of input read.
pub(crate) const PER_INPUT_BYTE: usize = 3;
/// Bytes the loader may hold whatever the input (tables reserved up front, small files).
pub(crate) const FIXED: usize = 48 << 20;

/// The most the loader may hold once `read` bytes of input have been read.
#[inline]
pub(crate) fn allowed(read: usize) -> usize {
    read.saturating_mul(PER_INPUT_BYTE).saturating_add(FIXED)
}

/// What a memory-bound error says: where, what was held and what was allowed.
pub(crate) fn exceeded(
    offset: Option<u64>,
    place: &str,
    held: usize,
    read: usize,
) -> crate::error::LoadErrorKind {
    crate::error::LoadErrorKind::MemoryBound {
        offset,
        place: place.to_string(),
        held: held as u64,
        allowed: allowed(read) as u64,
    }
}

/// The room left under the bound when `held` bytes are held after `read` bytes of input,
/// or the error that names the place (`offset`, `place`) where the bound was passed.
pub(crate) fn room(
    held: usize,
    read: usize,
    offset: Option<u64>,
    place: &str,
) -> Result<usize, crate::error::LoadErrorKind> {
    allowed(read)
        .checked_sub(held)
        .ok_or_else(|| exceeded(offset, place, held, read))
}
