//! Long strings held once.
//!
//! A string is borrowed from the input while parsing; the model copies it. For a file
//! that is mapped, reading a long string maps all its pages in, and copying it maps them
//! in again next to the copy: twice its size. So a long string in a file map is
//! validated and copied a chunk at a time, each chunk's pages given back once read
//! (they stay in the page cache; a later read maps them in again). Memory the caller
//! owns and decompressed input are never given back: there the input is held whole.

/// Strings at least this long are read a chunk at a time.
pub(crate) const LONG: usize = 8 << 20;
const CHUNK: usize = 4 << 20;
const PAGE: usize = 4096;

/// Gives back the whole pages inside `bytes`, part of a private read-only file map.
///
/// # Safety
/// `bytes` must lie in a private, read-only map of a file: its pages read back the same
/// after being given back.
unsafe fn give_back(bytes: &[u8]) {
    #[cfg(unix)]
    {
        let start = bytes.as_ptr() as usize;
        let from = start.next_multiple_of(PAGE);
        let to = (start + bytes.len()) & !(PAGE - 1);
        if to > from {
            // SAFETY: whole pages inside the caller's file map (see above).
            unsafe {
                libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_DONTNEED);
            }
        }
    }
    #[cfg(not(unix))]
    let _ = bytes;
}

/// Whether `bytes` are UTF-8, checked a chunk at a time; with `file_map`, each chunk's
/// pages are given back once checked. `Err` holds the offset of the first bad byte.
pub(crate) fn validate(bytes: &[u8], file_map: bool) -> Result<(), usize> {
    let mut at = 0;
    while at < bytes.len() {
        let end = (at + CHUNK).min(bytes.len());
        let checked = match std::str::from_utf8(&bytes[at..end]) {
            Ok(_) => end,
            // A character cut by the chunk's end: go on from its first byte.
            Err(e) if e.error_len().is_none() && end < bytes.len() => at + e.valid_up_to(),
            Err(e) => return Err(at + e.valid_up_to()),
        };
        if file_map {
            // SAFETY: `file_map` says `bytes` lie in a private file map.
            unsafe { give_back(&bytes[at..checked]) };
        }
        at = checked.max(at + 1);
    }
    Ok(())
}

/// A copy of `s`; with `file_map` and a long `s`, copied a chunk at a time, each chunk's
/// pages given back once copied.
pub(crate) fn copy(s: &str, file_map: bool) -> String {
    if !file_map || s.len() < LONG {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    while at < s.len() {
        let mut end = (at + CHUNK).min(s.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        out.push_str(&s[at..end]);
        // SAFETY: `file_map` says `s` lies in a private file map.
        unsafe { give_back(&s.as_bytes()[at..end]) };
        at = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunked validation agrees with `from_utf8` wherever the chunks cut, and names the
    /// first bad byte.
    #[test]
    fn chunked_validation_agrees_with_the_whole() {
        // A 4-byte character straddling every chunk boundary.
        let mut s = String::new();
        while s.len() < 3 * CHUNK {
            s.push('x');
            s.push('\u{1F600}');
        }
        assert_eq!(validate(s.as_bytes(), false), Ok(()));
        let mut bad = s.clone().into_bytes();
        let at = CHUNK + 1;
        bad[at] = 0xff;
        let whole = std::str::from_utf8(&bad).unwrap_err().valid_up_to();
        assert_eq!(validate(&bad, false), Err(whole));
        // Cut short inside the last character.
        let cut = &s.as_bytes()[..s.len() - 1];
        assert!(validate(cut, false).is_err());
        assert_eq!(copy(&s, false), s);
    }
}
