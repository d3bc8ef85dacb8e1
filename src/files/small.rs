//! Small text files named by options (a budget, a baseline), read with a size limit so
//! that a path such as `/dev/zero` or a snapshot given by mistake is refused at once.

use std::io::Read;
use std::path::Path;

/// Largest budget or baseline read: both are a few kilobytes of text.
pub const MAX_SMALL_TEXT_BYTES: u64 = 1 << 20;

/// Why a small text file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SmallTextError {
    /// Opening or reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A directory.
    #[error("it is a directory")]
    Directory,
    /// Over [`MAX_SMALL_TEXT_BYTES`].
    #[error("it is larger than {} MiB, which no such file is", MAX_SMALL_TEXT_BYTES >> 20)]
    TooLarge,
    /// Not UTF-8.
    #[error("it is not UTF-8 text (byte {0})")]
    NotText(usize),
}

/// Reads `path` as UTF-8 text of at most [`MAX_SMALL_TEXT_BYTES`].
///
/// ```
/// assert!(leakscope::files::read_small_text("/dev/zero".as_ref()).is_err());
/// ```
pub fn read_small_text(path: &Path) -> Result<String, SmallTextError> {
    let file = std::fs::File::open(path)?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(SmallTextError::Directory);
    }
    let mut bytes = Vec::new();
    file.take(MAX_SMALL_TEXT_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_SMALL_TEXT_BYTES {
        return Err(SmallTextError::TooLarge);
    }
    String::from_utf8(bytes).map_err(|e| SmallTextError::NotText(e.utf8_error().valid_up_to()))
}
