//! Writing whole or not at all. Where the output goes is decided first
//! ([`super::target::resolve`]): a regular file (or a new name) is written to a temporary
//! beside it and renamed over it only once complete, so a run that is killed or fails
//! leaves the earlier file as it was, and two runs racing to one name leave one of their
//! files, whole (a rename within a directory is atomic). A character device, a FIFO or
//! standard output is written in place: it is a stream, not a file to replace. The
//! temporary is removed on every error path ([`super::temporary`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::OutputError;
use super::target::{Target, resolve, resolve_dir};
use super::temporary::Temporary;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A buffer as large as the outputs' usual write pattern (long runs of small writes).
const BUFFER: usize = 1 << 20;

/// Where the bytes go until the commit.
enum Sink {
    /// A temporary renamed over `real` at the commit. `out` comes first so that it is
    /// closed before the temporary is removed.
    Staged {
        out: BufWriter<File>,
        temp: Temporary,
        real: PathBuf,
    },
    /// A character device or FIFO, written in place.
    Stream(BufWriter<File>),
    /// Standard output; `closed` once the reader went away (`| head`), after which the
    /// rest is dropped, as for the command's own text.
    Stdout {
        out: BufWriter<std::io::Stdout>,
        closed: bool,
    },
    /// Committed.
    Done,
}

/// An output being written; [`WholeFile::commit`] finishes it. For a regular file, nothing
/// appears under its name until then, and dropped without a commit (an error, a panic)
/// the temporary is removed and the target is untouched.
pub struct WholeFile {
    shown: PathBuf,
    sink: Sink,
    written: u64,
}

impl WholeFile {
    /// Starts writing `target` (see the module's doc for what each kind of path gets).
    pub fn create(target: &Path) -> Result<WholeFile, OutputError> {
        let sink = match resolve(target)? {
            Target::Stdout => Sink::Stdout {
                out: BufWriter::with_capacity(BUFFER, std::io::stdout()),
                closed: false,
            },
            Target::Stream { path, .. } => {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io(target))?;
                Sink::Stream(BufWriter::with_capacity(BUFFER, f))
            }
            Target::Regular { real } => {
                let (temp, file) = Temporary::file_beside(&real).map_err(io(target))?;
                // Replacing a file keeps its permissions, as writing into it would have.
                if let Ok(m) = std::fs::metadata(&real) {
                    let _ = file.set_permissions(m.permissions());
                }
                Sink::Staged {
                    out: BufWriter::with_capacity(BUFFER, file),
                    temp,
                    real,
                }
            }
        };
        Ok(WholeFile {
            shown: target.to_path_buf(),
            sink,
            written: 0,
        })
    }

    /// The output's path as it was given.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// Finishes the output (for a regular file: puts it in place of the target). Returns
    /// the bytes written. On an error (a full disk at the last flush, a failed rename) the
    /// temporary is removed and the target is as it was.
    pub fn commit(mut self) -> Result<u64, OutputError> {
        match std::mem::replace(&mut self.sink, Sink::Done) {
            Sink::Staged { out, temp, real } => {
                // On any error below `temp` is dropped, which removes the temporary.
                let file = out.into_inner().map_err(|e| OutputError::Io {
                    path: self.shown.clone(),
                    source: e.into_error(),
                })?;
                drop(file);
                std::fs::rename(temp.path(), &real).map_err(io(&self.shown))?;
                temp.keep();
            }
            Sink::Stream(mut out) => out.flush().map_err(io(&self.shown))?,
            Sink::Stdout { mut out, closed } => {
                if !closed {
                    match out.flush() {
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                        r => r.map_err(io(&self.shown))?,
                    }
                }
            }
            Sink::Done => {
                return Err(OutputError::Io {
                    path: self.shown.clone(),
                    source: std::io::Error::other("already committed"),
                });
            }
        }
        Ok(self.written)
    }
}

impl Write for WholeFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = match &mut self.sink {
            Sink::Staged { out, .. } | Sink::Stream(out) => out.write(buf)?,
            Sink::Stdout { closed: true, .. } => buf.len(),
            Sink::Stdout { out, closed } => match out.write(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    *closed = true;
                    buf.len()
                }
                r => r?,
            },
            Sink::Done => return Err(std::io::Error::other("the file was committed")),
        };
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.sink {
            Sink::Staged { out, .. } | Sink::Stream(out) => out.flush(),
            Sink::Stdout { out, closed } if !*closed => match out.flush() {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    *closed = true;
                    Ok(())
                }
                r => r,
            },
            _ => Ok(()),
        }
    }
}

/// Writes `data` to `target` whole, after checking it is none of `inputs`.
pub fn write_whole(inputs: &super::Inputs, target: &Path, data: &[u8]) -> Result<u64, OutputError> {
    let mut f = inputs.create(target)?;
    f.write_all(data).map_err(io(target))?;
    f.commit()
}

/// A directory of outputs (the Parquet tables) written whole: the files go to a hidden
/// staging directory beside the target, and [`WholeDir::commit`] moves them in, each
/// file by a rename (the whole directory by one rename when the target did not exist).
/// Dropped without a commit, or on SIGINT/SIGTERM where the program asked for it
/// ([`super::remove_temporaries_on_signals`]), the staging directory is removed.
pub struct WholeDir {
    target: PathBuf,
    staging: Temporary,
}

impl WholeDir {
    /// Starts writing into `target` (a symlink to a directory is followed and kept).
    pub fn create(target: &Path) -> Result<WholeDir, OutputError> {
        let target = resolve_dir(target)?;
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        let staging = Temporary::dir_beside(&target).map_err(io(&target))?;
        Ok(WholeDir { target, staging })
    }

    /// Where a file named `name` is written until the commit.
    pub fn staged(&self, name: &str) -> PathBuf {
        self.staging.path().join(name)
    }

    /// Where a file named `name` will be after the commit.
    pub fn final_path(&self, name: &str) -> PathBuf {
        self.target.join(name)
    }

    /// Moves every staged file into the target directory.
    pub fn commit(self) -> Result<(), OutputError> {
        let WholeDir { target, staging } = self;
        if !target.exists() && std::fs::rename(staging.path(), &target).is_ok() {
            staging.keep();
            return Ok(());
        }
        std::fs::create_dir_all(&target).map_err(io(&target))?;
        let entries = std::fs::read_dir(staging.path()).map_err(io(staging.path()))?;
        for e in entries {
            let e = e.map_err(io(staging.path()))?;
            let to = target.join(e.file_name());
            std::fs::rename(e.path(), &to).map_err(io(&to))?;
        }
        // Dropping the (now empty) staging directory removes it.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_appears_until_the_commit_and_a_dropped_file_leaves_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.json");
        std::fs::write(&out, b"old").unwrap();
        let mut f = WholeFile::create(&out).unwrap();
        f.write_all(b"new and longer").unwrap();
        f.flush().unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
        drop(f);
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "the temporary is removed");
        // A failed last flush (here: the temporary vanished and the rename fails) leaves
        // no temporary either.
        let mut f = WholeFile::create(&out).unwrap();
        f.write_all(b"lost").unwrap();
        if let Sink::Staged { temp, .. } = &f.sink {
            std::fs::remove_file(temp.path()).unwrap();
        }
        assert!(f.commit().is_err());
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let mut f = WholeFile::create(&out).unwrap();
        f.write_all(b"new and longer").unwrap();
        assert_eq!(f.commit().unwrap(), 14);
        assert_eq!(std::fs::read(&out).unwrap(), b"new and longer");
    }

    #[cfg(unix)]
    #[test]
    fn a_symlinked_output_replaces_its_target_and_keeps_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.svg");
        std::fs::write(&real, b"old").unwrap();
        let link = dir.path().join("link.svg");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut f = WholeFile::create(&link).unwrap();
        f.write_all(b"new").unwrap();
        f.commit().unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
    }

    #[test]
    fn a_directory_moves_in_whole_and_a_dropped_one_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("tables");
        let d = WholeDir::create(&out).unwrap();
        std::fs::write(d.staged("a.parquet"), b"a").unwrap();
        drop(d);
        assert!(!out.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let d = WholeDir::create(&out).unwrap();
        std::fs::write(d.staged("a.parquet"), b"a").unwrap();
        d.commit().unwrap();
        assert_eq!(std::fs::read(out.join("a.parquet")).unwrap(), b"a");
        // Into an existing directory: its other files stay.
        std::fs::write(out.join("notes.txt"), b"keep").unwrap();
        let d = WholeDir::create(&out).unwrap();
        std::fs::write(d.staged("a.parquet"), b"a2").unwrap();
        assert_eq!(std::fs::read(out.join("a.parquet")).unwrap(), b"a");
        d.commit().unwrap();
        assert_eq!(std::fs::read(out.join("a.parquet")).unwrap(), b"a2");
        assert_eq!(std::fs::read(out.join("notes.txt")).unwrap(), b"keep");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
