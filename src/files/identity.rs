//! Which files a command read, so that none of them is written over: an output is
//! compared with every input by identity (device and inode, after following symlinks),
//! not by name, so `./run.pickle`, `run.pickle` and a link to it are the same file.

use std::path::{Path, PathBuf};

/// Why an output cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The output is one of the files the command read.
    #[error(
        "refusing to write {}: it is the input {}; name another output file",
        output.display(),
        input.display()
    )]
    IsInput {
        /// The output as given.
        output: PathBuf,
        /// The input it names, as given.
        input: PathBuf,
    },
    /// The output is something no writer may replace or open: a directory, a block
    /// device, a socket, a symlink that leads nowhere.
    #[error("refusing to write {}: {why}", output.display())]
    Refused {
        /// The output as given.
        output: PathBuf,
        /// What it is, and what to name instead.
        why: String,
    },
    /// Two outputs of one command land on one file.
    #[error(
        "{first} {} and {second} {} name one file; give each output its own path",
        first_path.display(),
        second_path.display()
    )]
    Twice {
        /// The first output's option.
        first: String,
        /// Its path as given.
        first_path: PathBuf,
        /// The second output's option.
        second: String,
        /// Its path as given.
        second_path: PathBuf,
    },
    /// Creating, writing or renaming the output failed.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The output (or its temporary file).
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

impl OutputError {
    /// What kind of failure this is: naming an input is a usage error.
    pub fn kind(&self) -> crate::error::ErrorKind {
        match self {
            OutputError::IsInput { .. }
            | OutputError::Refused { .. }
            | OutputError::Twice { .. } => crate::error::ErrorKind::Usage,
            OutputError::Io { .. } => crate::error::ErrorKind::Write,
        }
    }
}

/// The files a command read (snapshots, budgets, baselines).
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    files: Vec<(FileId, PathBuf)>,
}

impl Inputs {
    /// The inputs at `paths`.
    pub fn of<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Inputs {
        let mut inputs = Inputs::default();
        for p in paths {
            inputs.add(p.as_ref());
        }
        inputs
    }

    /// Records `path` as read. A path that cannot be looked at is left out: it cannot be
    /// read either, so no output can be it.
    pub fn add(&mut self, path: &Path) {
        if let Some(id) = FileId::of(path) {
            self.files.push((id, path.to_path_buf()));
        }
    }

    /// Adds every input of `other`.
    pub fn extend(&mut self, other: &Inputs) {
        self.files.extend(other.files.iter().cloned());
    }

    /// `Ok` when writing `output` would replace none of the inputs.
    pub fn check_output(&self, output: &Path) -> Result<(), OutputError> {
        let id = if output.as_os_str() == super::target::STDOUT_NAME {
            FileId::stdout()
        } else {
            FileId::of(output)
        };
        let Some(id) = id else {
            return Ok(()); // does not exist yet (a dangling link is refused when opened)
        };
        match self.files.iter().find(|(i, _)| *i == id) {
            Some((_, input)) => Err(OutputError::IsInput {
                output: output.to_path_buf(),
                input: input.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Checks `output` and opens it for writing whole (see [`super::WholeFile`]).
    pub fn create(&self, output: &Path) -> Result<super::WholeFile, OutputError> {
        self.check_output(output)?;
        super::WholeFile::create(output)
    }
}

/// Refuses two of one command's outputs, given as (option, path), that land on one file:
/// the second would replace the first, and the command would still exit 0. Standard
/// output (`-`, `/dev/stdout`) counts as one file.
///
/// ```
/// use std::path::Path;
/// let same = leakscope::files::check_distinct([
///     ("--perfetto", Path::new("out.bin")),
///     ("--pprof", Path::new("./out.bin")),
/// ]);
/// assert!(same.is_err());
/// ```
pub fn check_distinct<'a>(
    outputs: impl IntoIterator<Item = (&'a str, &'a Path)>,
) -> Result<(), OutputError> {
    let mut seen: Vec<(PathBuf, &str, &Path)> = Vec::new();
    for (option, path) in outputs {
        let key = super::target::landing_key(path)?;
        if let Some((_, first, first_path)) = seen.iter().find(|(k, _, _)| *k == key) {
            return Err(OutputError::Twice {
                first: (*first).to_string(),
                first_path: first_path.to_path_buf(),
                second: option.to_string(),
                second_path: path.to_path_buf(),
            });
        }
        seen.push((key, option, path));
    }
    Ok(())
}

/// A file's identity after following symlinks.
#[derive(Clone, Debug, PartialEq, Eq)]
enum FileId {
    #[cfg(unix)]
    Inode { dev: u64, ino: u64 },
    #[cfg(not(unix))]
    Path(PathBuf),
}

impl FileId {
    /// What standard output is open on.
    fn stdout() -> Option<FileId> {
        #[cfg(unix)]
        {
            super::target::stdout_identity().map(|(dev, ino)| FileId::Inode { dev, ino })
        }
        #[cfg(not(unix))]
        {
            None
        }
    }

    fn of(path: &Path) -> Option<FileId> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(path).ok()?;
            Some(FileId::Inode {
                dev: m.dev(),
                ino: m.ino(),
            })
        }
        #[cfg(not(unix))]
        {
            std::fs::canonicalize(path).ok().map(FileId::Path)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_file_by_any_name_is_refused_and_others_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("run.pickle");
        std::fs::write(&input, b"x").unwrap();
        let budget = dir.path().join("budget.toml");
        std::fs::write(&budget, b"y").unwrap();
        let inputs = Inputs::of([&input, &budget]);
        let dotted = dir.path().join(".").join("run.pickle");
        assert!(matches!(
            inputs.check_output(&dotted),
            Err(OutputError::IsInput { .. })
        ));
        assert!(inputs.check_output(&budget).is_err());
        #[cfg(unix)]
        {
            let link = dir.path().join("link.html");
            std::os::unix::fs::symlink(&input, &link).unwrap();
            assert!(inputs.check_output(&link).is_err());
            let hard = dir.path().join("hard.pickle");
            std::fs::hard_link(&input, &hard).unwrap();
            assert!(inputs.check_output(&hard).is_err());
        }
        assert!(inputs.check_output(&dir.path().join("new.html")).is_ok());
        let other = dir.path().join("other.html");
        std::fs::write(&other, b"z").unwrap();
        assert!(inputs.check_output(&other).is_ok());
    }
}
