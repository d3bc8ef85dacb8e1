//! Writing whole or not at all: an output is written to a temporary file beside its
//! target and renamed over it only once complete, so a run that is killed or fails
//! leaves the earlier file as it was, and two runs racing to one name leave one of their
//! files, whole. (A rename within a directory is atomic; the temporary's name starts with
//! a dot and ends in `.leakscope-tmp`, so a run killed outright leaves at most such a file.)

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::OutputError;

/// Tells apart the temporaries of one process (two outputs, or threads, at once).
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// The path of a fresh temporary beside `target` (in its directory, hidden).
fn temporary_beside(target: &Path) -> PathBuf {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    let n = SERIAL.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.{}-{n}.leakscope-tmp", std::process::id()))
}

/// Where writing `target` really lands: a symlink is written through (its target is
/// replaced, the link kept), as a plain write would.
fn landing(target: &Path) -> PathBuf {
    match std::fs::symlink_metadata(target) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(target).unwrap_or_else(|_| target.to_path_buf())
        }
        _ => target.to_path_buf(),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A file being written: bytes go to a temporary beside the target; [`WholeFile::commit`]
/// renames it over the target. Dropped without a commit (an error, a panic), the
/// temporary is removed and the target is untouched.
pub struct WholeFile {
    target: PathBuf,
    shown: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
}

impl WholeFile {
    /// Starts writing `target` (nothing appears under its name until the commit).
    pub fn create(target: &Path) -> Result<WholeFile, OutputError> {
        let landing = landing(target);
        if landing.is_dir() {
            return Err(OutputError::Io {
                path: target.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::IsADirectory,
                    "it is a directory; name a file",
                ),
            });
        }
        let tmp = temporary_beside(&landing);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(io(target))?;
        // Replacing a file keeps its permissions, as writing into it would have.
        if let Ok(m) = std::fs::metadata(&landing) {
            let _ = file.set_permissions(m.permissions());
        }
        Ok(WholeFile {
            target: landing,
            shown: target.to_path_buf(),
            tmp,
            out: Some(BufWriter::with_capacity(1 << 20, file)),
        })
    }

    /// The output's path as it was given.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// Finishes the file and puts it in place of the target. Returns the bytes written.
    pub fn commit(mut self) -> Result<u64, OutputError> {
        let out = self.out.take().ok_or_else(|| OutputError::Io {
            path: self.shown.clone(),
            source: std::io::Error::other("already committed"),
        })?;
        let file = out.into_inner().map_err(|e| OutputError::Io {
            path: self.shown.clone(),
            source: e.into_error(),
        })?;
        let len = file.metadata().map_err(io(&self.shown))?.len();
        drop(file);
        std::fs::rename(&self.tmp, &self.target).map_err(io(&self.shown))?;
        Ok(len)
    }
}

impl Write for WholeFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.out {
            Some(w) => w.write(buf),
            None => Err(std::io::Error::other("the file was committed")),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match &mut self.out {
            Some(w) => w.write_all(buf),
            None => Err(std::io::Error::other("the file was committed")),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.out {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for WholeFile {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
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
/// Dropped without a commit, the staging directory is removed.
pub struct WholeDir {
    target: PathBuf,
    staging: PathBuf,
    committed: bool,
}

impl WholeDir {
    /// Starts writing into `target`.
    pub fn create(target: &Path) -> Result<WholeDir, OutputError> {
        let target = landing(target);
        if target.exists() && !target.is_dir() {
            return Err(OutputError::Io {
                path: target,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotADirectory,
                    "it exists and is not a directory",
                ),
            });
        }
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        let staging = temporary_beside(&target);
        std::fs::create_dir(&staging).map_err(io(&target))?;
        Ok(WholeDir {
            target,
            staging,
            committed: false,
        })
    }

    /// Where a file named `name` is written until the commit.
    pub fn staged(&self, name: &str) -> PathBuf {
        self.staging.join(name)
    }

    /// Where a file named `name` will be after the commit.
    pub fn final_path(&self, name: &str) -> PathBuf {
        self.target.join(name)
    }

    /// Moves every staged file into the target directory.
    pub fn commit(mut self) -> Result<(), OutputError> {
        if !self.target.exists() && std::fs::rename(&self.staging, &self.target).is_ok() {
            self.committed = true;
            return Ok(());
        }
        std::fs::create_dir_all(&self.target).map_err(io(&self.target))?;
        let entries = std::fs::read_dir(&self.staging).map_err(io(&self.staging))?;
        for e in entries {
            let e = e.map_err(io(&self.staging))?;
            let to = self.target.join(e.file_name());
            std::fs::rename(e.path(), &to).map_err(io(&to))?;
        }
        let _ = std::fs::remove_dir(&self.staging);
        self.committed = true;
        Ok(())
    }
}

impl Drop for WholeDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
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
