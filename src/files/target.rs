//! Where an output really goes, decided before anything is written. Only a regular file
//! (or a new name) is written through a temporary renamed over it; a character device, a
//! FIFO or standard output is opened and written in place, since renaming over one would
//! replace a node the tool does not own (run as root, `-o /dev/null` would otherwise turn
//! the machine's `/dev/null` into a file). A symlink is followed and kept; one that leads
//! nowhere is refused rather than replaced.

use std::path::{Path, PathBuf};

use super::OutputError;

/// The name that means standard output for every writer.
pub const STDOUT_NAME: &str = "-";

/// What an output path turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Standard output: `-`, or a path that leads to this process's standard output
    /// (`/dev/stdout`, `/proc/self/fd/1`, a link to either, or the file stdout goes to).
    Stdout,
    /// A regular file, or a name that does not exist yet: written whole through a
    /// temporary beside `real` (the path with every symlink followed).
    Regular {
        /// Where the file is (symlinks followed), so the link itself is kept.
        real: PathBuf,
    },
    /// A character device or FIFO: opened and written through, never replaced.
    Stream {
        /// The path as given (opening it follows any link).
        path: PathBuf,
        /// What it is, for messages: "character device" or "FIFO".
        kind: &'static str,
    },
}

/// Finds where writing `output` lands. Refuses (a usage error naming the reason) a
/// directory, a block device, a socket that is not standard output, and a symlink that
/// cannot be followed (dangling or a loop).
pub fn resolve(output: &Path) -> Result<Target, OutputError> {
    if output.as_os_str() == STDOUT_NAME {
        return Ok(Target::Stdout);
    }
    let refused = |why: String| OutputError::Refused {
        output: output.to_path_buf(),
        why,
    };
    match std::fs::metadata(output) {
        Ok(m) => {
            if is_stdout(&m) {
                return Ok(Target::Stdout);
            }
            let ft = m.file_type();
            if ft.is_file() {
                let linked = std::fs::symlink_metadata(output)
                    .map(|l| l.file_type().is_symlink())
                    .unwrap_or(false);
                let real = if linked {
                    std::fs::canonicalize(output).map_err(|source| OutputError::Io {
                        path: output.to_path_buf(),
                        source,
                    })?
                } else {
                    output.to_path_buf()
                };
                return Ok(Target::Regular { real });
            }
            if ft.is_dir() {
                return Err(refused("it is a directory; name a file".into()));
            }
            use crate::load::SpecialFile;
            match SpecialFile::of(&ft) {
                Some(SpecialFile::CharDevice) => Ok(Target::Stream {
                    path: output.to_path_buf(),
                    kind: "character device",
                }),
                Some(SpecialFile::Fifo) => Ok(Target::Stream {
                    path: output.to_path_buf(),
                    kind: "FIFO",
                }),
                Some(SpecialFile::BlockDevice) => Err(refused(
                    "it is a block device; name a regular file, a character device, a FIFO or - for standard output".into(),
                )),
                Some(SpecialFile::Socket) => Err(refused(
                    "it is a socket, which cannot be opened as a file; name a regular file or - for standard output".into(),
                )),
                _ => Err(refused("it is not a regular file".into())),
            }
        }
        Err(e) => match unfollowable(output, &e) {
            Some(refusal) => Err(refusal),
            None if e.kind() == std::io::ErrorKind::NotFound => Ok(Target::Regular {
                real: output.to_path_buf(),
            }),
            None => Err(OutputError::Io {
                path: output.to_path_buf(),
                source: e,
            }),
        },
    }
}

/// Where a directory of outputs (the Parquet tables) goes: the directory itself with
/// symlinks followed (the link kept), or a new name. Refuses `-`, a path that exists
/// and is no directory, and a link that leads nowhere.
pub fn resolve_dir(output: &Path) -> Result<PathBuf, OutputError> {
    let refused = |why: &str| OutputError::Refused {
        output: output.to_path_buf(),
        why: why.into(),
    };
    if output.as_os_str() == STDOUT_NAME {
        return Err(refused(
            "the tables are several files and cannot go to standard output; name a directory",
        ));
    }
    match std::fs::metadata(output) {
        Ok(m) if m.is_dir() => std::fs::canonicalize(output).map_err(|source| OutputError::Io {
            path: output.to_path_buf(),
            source,
        }),
        Ok(_) => Err(refused(
            "it exists and is not a directory; name a directory",
        )),
        Err(e) => match unfollowable(output, &e) {
            Some(refusal) => Err(refusal),
            None if e.kind() == std::io::ErrorKind::NotFound => Ok(output.to_path_buf()),
            None => Err(OutputError::Io {
                path: output.to_path_buf(),
                source: e,
            }),
        },
    }
}

/// The refusal for `output` when it is a symlink that `e` says cannot be followed.
fn unfollowable(output: &Path, e: &std::io::Error) -> Option<OutputError> {
    let linked = std::fs::symlink_metadata(output)
        .map(|l| l.file_type().is_symlink())
        .unwrap_or(false);
    if !linked {
        return None;
    }
    let to = std::fs::read_link(output)
        .map(|t| t.display().to_string())
        .unwrap_or_else(|_| "?".into());
    let why = if is_loop(e) {
        format!("it is a symbolic link to {to} in a loop of links; name the file itself")
    } else if e.kind() == std::io::ErrorKind::NotFound {
        format!(
            "it is a symbolic link to {to}, which does not exist; name the file itself, or create it first"
        )
    } else {
        format!("it is a symbolic link to {to}, which cannot be followed ({e})")
    };
    Some(OutputError::Refused {
        output: output.to_path_buf(),
        why,
    })
}

fn is_loop(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::ELOOP)
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// The (device, inode) standard output is open on, if it is open.
#[cfg(unix)]
pub(crate) fn stdout_identity() -> Option<(u64, u64)> {
    // SAFETY: fstat writes into a zeroed struct we own; fd 1 may be closed (then it fails).
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(1, &mut st) != 0 {
            return None;
        }
        #[allow(clippy::unnecessary_cast)]
        Some((st.st_dev as u64, st.st_ino as u64))
    }
}

#[cfg(unix)]
fn is_stdout(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    stdout_identity() == Some((m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn is_stdout(_: &std::fs::Metadata) -> bool {
    false
}

/// The directory `target` lies in (`.` for a bare name).
pub(crate) fn directory_of(target: &Path) -> PathBuf {
    match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A path that says where `output` lands, for telling two outputs apart: the real path
/// of a file (its directory's real path and its name when it does not exist yet), or
/// `-` for standard output.
pub(crate) fn landing_key(output: &Path) -> Result<PathBuf, OutputError> {
    Ok(match resolve(output)? {
        Target::Stdout => PathBuf::from(STDOUT_NAME),
        Target::Regular { real } | Target::Stream { path: real, .. } => {
            if let Ok(c) = std::fs::canonicalize(&real) {
                c
            } else {
                let dir = directory_of(&real);
                let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
                match real.file_name() {
                    Some(n) => dir.join(n),
                    None => real,
                }
            }
        }
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_path_resolves_to_what_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.html");
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(
            resolve(&file).unwrap(),
            Target::Regular { real: file.clone() }
        );
        let new = dir.path().join("new.html");
        assert_eq!(
            resolve(&new).unwrap(),
            Target::Regular { real: new.clone() }
        );
        let link = dir.path().join("link.html");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(
            resolve(&link).unwrap(),
            Target::Regular {
                real: std::fs::canonicalize(&file).unwrap()
            }
        );
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a path in our own temporary directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            resolve(&fifo).unwrap(),
            Target::Stream { kind: "FIFO", .. }
        ));
        assert_eq!(resolve(Path::new("-")).unwrap(), Target::Stdout);
        let dangling = dir.path().join("dangling.html");
        std::os::unix::fs::symlink(dir.path().join("nowhere/x.html"), &dangling).unwrap();
        let e = resolve(&dangling).unwrap_err().to_string();
        assert!(
            e.contains("nowhere/x.html") && e.contains("does not exist"),
            "{e}"
        );
        let a = dir.path().join("loop-a");
        let b = dir.path().join("loop-b");
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        let e = resolve(&a).unwrap_err().to_string();
        assert!(e.contains("loop"), "{e}");
        assert!(
            resolve(dir.path())
                .unwrap_err()
                .to_string()
                .contains("directory")
        );
    }

    #[test]
    fn two_names_of_one_landing_have_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("out.svg");
        let dotted = dir.path().join(".").join("out.svg");
        assert_eq!(landing_key(&a).unwrap(), landing_key(&dotted).unwrap());
        std::fs::write(&a, b"x").unwrap();
        let link = dir.path().join("l.svg");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        assert_eq!(landing_key(&a).unwrap(), landing_key(&link).unwrap());
        assert_ne!(
            landing_key(&a).unwrap(),
            landing_key(&dir.path().join("b.svg")).unwrap()
        );
    }
}
