//! A run read on several machines (Python's `leakscope.ray`): what each machine lists
//! under the run's directory, one file's rows named as the listing named it, and the
//! merge of every file's rows in the order `discover` gives. The cluster code only moves
//! these between machines; the listing, naming and merging are the library's.

pub mod dispatch;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::discover::{Found, walk};
use super::error::SessionError;
use super::options::Options;
use super::ranks::{FileRanks, analyse_file_at, error_row, merge_ranks};
use crate::analysis::ranks::RankRow;
use crate::report::RanksReport;

/// A snapshot file as one machine sees it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Listed {
    /// The file, rank and step as discovered (the file named without the machine's
    /// prefix).
    #[serde(flatten)]
    pub found: Found,
    /// Its size in bytes (`None`: it could not be read).
    pub size: Option<u64>,
    /// Its modification time, in nanoseconds since the epoch (`None`: unknown).
    pub mtime_ns: Option<i128>,
}

/// What one machine lists below a run's directory.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeListing {
    /// The snapshot files, in discover's order.
    pub files: Vec<Listed>,
    /// How many other files were skipped.
    pub skipped: u64,
    /// Those files by name (without the prefix), so a file two machines see is counted
    /// once.
    pub skipped_files: Vec<PathBuf>,
}

/// `path` without `prefix` (the driver's working directory when the run's directory was
/// given relative), as the command line run there would name it.
fn shown(path: &Path, prefix: &Path) -> PathBuf {
    path.strip_prefix(prefix).unwrap_or(path).to_path_buf()
}

/// Lists `root` (an absolute path) as this machine sees it; `None` when it is not a
/// directory here. Files are named without `prefix`.
pub fn list_here(root: &Path, prefix: &Path) -> Result<Option<NodeListing>, SessionError> {
    if !root.is_dir() {
        return Ok(None);
    }
    let listing = walk(root).map_err(|source| SessionError::Dir {
        dir: root.to_path_buf(),
        source,
    })?;
    let files = listing
        .found
        .into_iter()
        .map(|mut found| {
            let meta = std::fs::metadata(&found.file).ok();
            found.file = shown(&found.file, prefix);
            Listed {
                found,
                size: meta.as_ref().map(std::fs::Metadata::len),
                mtime_ns: meta.and_then(|m| m.modified().ok()).and_then(|t| {
                    t.duration_since(std::time::UNIX_EPOCH)
                        .ok()
                        .map(|d| d.as_nanos() as i128)
                }),
            }
        })
        .collect();
    let skipped_files = listing
        .skipped_files
        .iter()
        .chain(listing.special.iter().map(|s| &s.file))
        .map(|p| shown(p, prefix))
        .collect();
    Ok(Some(NodeListing {
        files,
        skipped: listing.skipped + listing.special.len() as u64,
        skipped_files,
    }))
}

/// One file's rows and top suspects, the file opened below `prefix` and named as `found`
/// names it (in rows and in errors alike).
pub fn analyse_found(found: &Found, prefix: &Path, opts: &Options, threads: bool) -> FileRanks {
    analyse_file_at(found, &prefix.join(&found.file), opts, threads)
}

/// The run's report from each file's rows, or the error that kept a file from being
/// analysed (a task lost with its machine): files in discover's order, a failed one with
/// a row carrying its error.
pub fn merge_found(
    dir: &Path,
    mut files: Vec<(Found, Result<Vec<RankRow>, String>)>,
    skipped: u64,
) -> Result<RanksReport, SessionError> {
    files.sort_by(|a, b| a.0.cmp_order(&b.0));
    let rows = files
        .into_iter()
        .flat_map(|(f, rows)| match rows {
            Ok(rows) => rows,
            Err(e) => vec![error_row(&f, e)],
        })
        .collect();
    merge_ranks(dir, rows, skipped)
}

/// A distinct file of a run listed on several machines, with the machines that hold it.
#[derive(Clone, Debug, Serialize)]
pub struct Held {
    /// The file, rank and step.
    #[serde(flatten)]
    pub found: Found,
    /// Its size in bytes (0 when unknown): the larger files are scheduled first.
    pub size: u64,
    /// The machines that list it, in the order they were given.
    pub holders: Vec<String>,
}

/// A run as several machines list it.
#[derive(Clone, Debug, Serialize)]
pub struct RunListing {
    /// Each distinct file once.
    pub files: Vec<Held>,
    /// The files skipped as no snapshots.
    pub skipped: u64,
    /// Whether every machine asked listed the same files (a shared file system).
    pub shared: bool,
}

/// The listings of the machines that have the run's directory (`asked`: how many were
/// asked, those without it included). With `by_identity`, a file is the same on two
/// machines when its name, size and modification time are (a shared or copied folder:
/// analysed once); otherwise each machine's files are its own. Skipped files are counted
/// once by name when files are matched by identity.
pub fn merge_listings(
    listed: &[(String, NodeListing)],
    asked: usize,
    by_identity: bool,
) -> RunListing {
    type Key = (Option<String>, PathBuf, Option<u64>, Option<i128>);
    let identity = |l: &Listed| (l.found.file.clone(), l.size, l.mtime_ns);
    let sets: Vec<std::collections::BTreeSet<_>> = listed
        .iter()
        .map(|(_, v)| v.files.iter().map(identity).collect())
        .collect();
    let shared = asked > 1 && listed.len() == asked && sets.windows(2).all(|w| w[0] == w[1]);
    let mut index: std::collections::HashMap<Key, usize> = std::collections::HashMap::new();
    let mut files: Vec<Held> = Vec::new();
    for (node, v) in listed {
        for f in &v.files {
            let key: Key = if by_identity {
                (None, f.found.file.clone(), f.size, f.mtime_ns)
            } else {
                (Some(node.clone()), f.found.file.clone(), None, None)
            };
            if let Some(&i) = index.get(&key) {
                files[i].holders.push(node.clone());
                continue;
            }
            index.insert(key, files.len());
            files.push(Held {
                found: f.found.clone(),
                size: f.size.unwrap_or(0),
                holders: vec![node.clone()],
            });
        }
    }
    let skipped = if shared {
        listed[0].1.skipped
    } else if by_identity {
        let names: std::collections::BTreeSet<&PathBuf> = listed
            .iter()
            .flat_map(|(_, v)| v.skipped_files.iter())
            .collect();
        names.len() as u64
    } else {
        listed.iter().map(|(_, v)| v.skipped).sum()
    };
    RunListing {
        files,
        skipped,
        shared,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(file: &str, size: u64, mtime: i128) -> Listed {
        Listed {
            found: Found {
                file: file.into(),
                rank: None,
                step: String::new(),
                step_order: 0,
            },
            size: Some(size),
            mtime_ns: Some(mtime),
        }
    }

    fn node(files: Vec<Listed>, skipped: &[&str]) -> NodeListing {
        NodeListing {
            files,
            skipped: skipped.len() as u64,
            skipped_files: skipped.iter().map(PathBuf::from).collect(),
        }
    }

    /// A file opened below a machine's prefix is named as listed, its error too.
    #[test]
    fn a_file_is_named_as_listed_wherever_it_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("x")).unwrap();
        std::fs::write(dir.path().join("x/bad.pickle"), b"junkjunk").unwrap();
        let found = listed("x/bad.pickle", 8, 0).found;
        let r = analyse_found(&found, dir.path(), &Options::default(), false);
        assert_eq!(r.rows[0].file, "x/bad.pickle");
        let error = r.rows[0].error.as_deref().unwrap();
        assert!(error.starts_with("x/bad.pickle: "), "{error}");
        assert!(!error.contains(&*dir.path().to_string_lossy()), "{error}");
    }

    /// Two machines seeing the same folder share its files; a third copy with another
    /// time is a different file; without identity each machine's files are its own.
    #[test]
    fn the_same_file_on_two_machines_is_analysed_once() {
        let a = node(
            vec![listed("s/r0.pickle", 10, 1), listed("s/r1.pickle", 20, 1)],
            &["x.json"],
        );
        let b = node(
            vec![listed("s/r0.pickle", 10, 1), listed("s/r1.pickle", 20, 1)],
            &["x.json"],
        );
        let both = [("a".to_string(), a.clone()), ("b".to_string(), b)];
        let m = merge_listings(&both, 2, true);
        assert!(m.shared);
        assert_eq!(m.files.len(), 2);
        assert_eq!(m.files[0].holders, ["a", "b"]);
        assert_eq!(m.skipped, 1);

        let c = node(vec![listed("s/r0.pickle", 10, 2)], &["x.json", "y.json"]);
        let apart = [("a".to_string(), a.clone()), ("c".to_string(), c)];
        let m = merge_listings(&apart, 3, true);
        assert!(!m.shared);
        assert_eq!(m.files.len(), 3);
        assert_eq!(m.skipped, 2, "x.json counted once");
        let m = merge_listings(&apart, 2, false);
        assert_eq!(m.files.len(), 3);
        assert_eq!(m.skipped, 3, "each machine's own skipped files");
    }
}
