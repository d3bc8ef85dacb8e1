//! `export --parquet`: files and run directories into seven Parquet tables (files, ranks,
//! suspects, top sites, events, stacks, series; `render::parquet` builds and writes them).
//!
//! Each file is loaded once (a run directory's ranks are read again as series for
//! `series`). Its devices are replayed once for the rank rows, the
//! suspects, the holders at the end, the peak and the OOM, and the role of each event,
//! while its summary and stacks are turned into columns and written; its events follow,
//! with their roles. Files are loaded side by side, one per
//! core, and written in the order given (a directory's files in the order `ranks` lists
//! them). A file that cannot be read is a `ranks` row with its error and nothing else;
//! the export goes on with the others.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use rayon::prelude::*;
use serde::Serialize;

use super::roles::event_roles;
use super::{ExportError, ExportOptions, Failure, Loaded, open};
use crate::analysis::leaks::Growth;
use crate::analysis::point;
use crate::analysis::ranks::{RankRow, flag_outliers};
use crate::analysis::top::{self, DeviceTop};
use crate::error::ErrorKind;
use crate::export::encode::parquet::events::EventRoles;
use crate::export::encode::parquet::{self as tables, FileKey, Table, TableError, TableWriter};
use crate::files::{Inputs, OutputError, WholeDir};
use crate::report::Special;
use crate::session::Options;
use crate::session::Session;
use crate::session::SessionError;
use crate::session::{Found, walk};
use crate::session::{device_row, merge_ranks, rank_series, row};

/// Schema of [`ExportSummary`]'s JSON.
pub const SCHEMA: &str = "leakscope.export/1";

/// One table written.
#[derive(Clone, Debug, Serialize)]
pub struct TableSummary {
    /// The table (`events`).
    pub table: &'static str,
    /// Its file.
    pub path: String,
    /// Its schema name (`leakscope.parquet.events/1`), as in the file's metadata.
    pub schema: String,
    /// Rows written.
    pub rows: u64,
}

/// An input that could not be read, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Failed {
    /// The file (or directory).
    pub file: String,
    /// Why (the message names the file).
    pub error: String,
    /// What kind of failure that is.
    pub kind: ErrorKind,
}

/// What an export wrote (`leakscope.export/1`).
#[derive(Clone, Debug, Serialize)]
pub struct ExportSummary {
    /// Schema name.
    pub schema: &'static str,
    /// The output directory.
    pub out_dir: String,
    /// Snapshot files read.
    pub files_read: u64,
    /// Inputs that could not be read (each a `ranks` row with its error).
    pub failed: Vec<Failed>,
    /// Files of run directories skipped as not snapshots.
    pub skipped_files: u64,
    /// FIFOs, sockets and devices in the run directories: skipped, never opened.
    pub special_files: Vec<Special>,
    /// The tables, in their documented order.
    pub tables: Vec<TableSummary>,
}

/// Files given by name, or the files of one run directory: the rows `ranks` flags
/// outliers among.
pub(super) struct Group {
    /// The directory (`None`: the files given by name).
    pub(super) dir: Option<PathBuf>,
    /// Files of run directories skipped as not snapshots.
    skipped: u64,
    /// FIFOs, sockets and devices of the directory: skipped, never opened.
    special: Vec<Special>,
    /// The rows (filled as files are analysed).
    rows: Vec<RankRow>,
    /// Why the directory could not be listed.
    pub(super) error: Option<Failure>,
}

/// One file to export and the group it belongs to.
pub(super) struct Unit {
    pub(super) found: Found,
    pub(super) group: usize,
}

/// A plain file's entry: no rank, no step.
fn named(path: &Path) -> Found {
    Found {
        file: path.to_path_buf(),
        rank: None,
        step: String::new(),
        step_order: 0,
    }
}

fn error_row(found: &Found, error: &Failure) -> RankRow {
    let mut r = row(found);
    r.error = Some(error.message.clone());
    r.error_kind = Some(error.kind);
    r
}

/// The groups and files of the inputs: a directory's files as `ranks` finds them, the
/// files given by name in one group of their own.
pub(super) fn expand(paths: &[PathBuf]) -> (Vec<Group>, Vec<Unit>) {
    let mut groups = vec![Group {
        dir: None,
        skipped: 0,
        special: Vec::new(),
        rows: Vec::new(),
        error: None,
    }];
    let mut units = Vec::new();
    for p in paths {
        if !p.is_dir() {
            units.push(Unit {
                found: named(p),
                group: 0,
            });
            continue;
        }
        let g = groups.len();
        let mut group = Group {
            dir: Some(p.clone()),
            skipped: 0,
            special: Vec::new(),
            rows: Vec::new(),
            error: None,
        };
        match walk(p) {
            Ok(listing) => {
                group.skipped = listing.skipped;
                group.special = listing.special;
                let found = listing.found;
                units.extend(found.into_iter().map(|found| Unit { found, group: g }));
            }
            Err(source) => {
                let e = SessionError::Dir {
                    dir: p.clone(),
                    source,
                };
                group.error = Some(Failure::from(e));
            }
        }
        groups.push(group);
    }
    (groups, units)
}

/// What the analyses give of one file: rank rows, each device's suspects, each device's
/// holders at each point that exists on it, and the role of each event of the devices
/// analysed.
type Analysis = (
    Vec<RankRow>,
    Vec<(i64, Vec<Growth>)>,
    Vec<(&'static str, DeviceTop)>,
    EventRoles,
);

fn analyse(s: &Session, f: &Found, opts: &Options) -> Result<Analysis, SessionError> {
    let mut runs = s.runs(opts)?;
    let mut roles = EventRoles {
        names: opts.roles.names().to_vec(),
        devices: Vec::new(),
    };
    if runs.is_empty() {
        // Nothing recorded: a row of zeros, as `ranks` gives.
        return Ok((vec![row(f)], Vec::new(), Vec::new(), roles));
    }
    s.cut_windows(&mut runs, opts)?;
    let snap = s.snapshot();
    let per_device: Vec<_> = runs
        .par_iter_mut()
        .map(|r| {
            let found = r.find_leaks();
            let rank_row = device_row(f, r, &found);
            let tops: Vec<(&'static str, DeviceTop)> = tables::top_sites::POINTS
                .iter()
                .filter_map(|&(at, name)| {
                    let p = point::resolve(snap, &r.replay, at).ok()?;
                    Some((name, top::top(&r.replay, p, &mut r.attr, usize::MAX)))
                })
                .collect();
            let ev = (r.device(), event_roles(r.view.trace, &r.replay, &r.attr));
            (rank_row, (r.device(), found.suspects), tops, ev)
        })
        .collect();
    let mut out: Analysis = (Vec::new(), Vec::new(), Vec::new(), EventRoles::default());
    for (r, s, t, e) in per_device {
        out.0.push(r);
        out.1.push(s);
        out.2.extend(t);
        roles.devices.push(e);
    }
    out.3 = roles;
    Ok(out)
}

/// How a file's rows name it.
fn key<'a>(s: &'a Session, u: &'a Unit, groups: &[Group]) -> FileKey<'a> {
    FileKey {
        file: s.name(),
        rank: u.found.rank,
        step: groups[u.group]
            .dir
            .is_some()
            .then_some(u.found.step.as_str()),
    }
}

/// Writes the summary and stacks of a loaded file, straight from the model (side by side).
fn write_model(
    w: &mut Writers,
    s: &Session,
    key: &FileKey,
    path: &Path,
) -> Result<(), ExportError> {
    let snap = s.snapshot();
    let file_bytes = std::fs::metadata(path).map_or(0, |m| m.len());
    let (files, stacks) = rayon::join(
        || tables::files::batch_of(key, &s.summary(), file_bytes),
        || tables::stacks::batch_of(key, snap),
    );
    let files = w.built(Table::Files, files)?;
    let stacks = w.built(Table::Stacks, stacks)?;
    w.write(Table::Files, &files)?;
    w.write(Table::Stacks, &stacks)
}

/// Writes the events of a loaded file, with the roles of the devices analysed.
fn write_events(
    w: &mut Writers,
    s: &Session,
    key: &FileKey,
    roles: &EventRoles,
) -> Result<(), ExportError> {
    for e in w.built(
        Table::Events,
        tables::events::batches_of(key, s.snapshot(), roles),
    )? {
        w.write(Table::Events, &e)?;
    }
    Ok(())
}

/// Writes a file's suspects and holders.
fn write_analysis(w: &mut Writers, key: &FileKey, a: &Analysis) -> Result<(), ExportError> {
    let suspects: Vec<(i64, &[Growth])> = a.1.iter().map(|(d, g)| (*d, g.as_slice())).collect();
    let tops: Vec<(&str, &DeviceTop)> = a.2.iter().map(|(p, t)| (*p, t)).collect();
    let b = w.built(Table::Suspects, tables::suspects::batch_of(key, &suspects))?;
    w.write(Table::Suspects, &b)?;
    let b = w.built(Table::TopSites, tables::top_sites::batch_of(key, &tops))?;
    w.write(Table::TopSites, &b)
}

/// The seven tables' writers, each on its file in the output directory (staged, and moved
/// in by [`Writers::finish`] once every table is complete).
struct Writers {
    out_dir: PathBuf,
    dir: WholeDir,
    writers: Vec<TableWriter<BufWriter<File>>>,
}

impl Writers {
    /// Writers into `out_dir`, none of whose tables may be one of `inputs`.
    fn create(out_dir: &Path, inputs: &Inputs) -> Result<Writers, ExportError> {
        for t in Table::ALL {
            inputs.check_output(&out_dir.join(t.file_name()))?;
        }
        let dir = WholeDir::create(out_dir).map_err(|e| match e {
            OutputError::Io { source, .. } => ExportError::OutDir {
                dir: out_dir.to_path_buf(),
                source,
            },
            e => e.into(),
        })?;
        let writers = Table::ALL
            .iter()
            .map(|&t| {
                let path = dir.staged(&t.file_name());
                let file = File::create(&path).map_err(|source| ExportError::Io {
                    path: path.clone(),
                    source,
                })?;
                TableWriter::new(t, BufWriter::with_capacity(1 << 20, file))
                    .map_err(|source| ExportError::Table { path, source })
            })
            .collect::<Result<_, _>>()?;
        Ok(Writers {
            out_dir: out_dir.to_path_buf(),
            dir,
            writers,
        })
    }

    fn write(&mut self, table: Table, batch: &RecordBatch) -> Result<(), ExportError> {
        let i = Table::ALL.iter().position(|t| *t == table).unwrap_or(0);
        let path = self.out_dir.join(table.file_name());
        self.writers[i]
            .write(batch)
            .map_err(|source| ExportError::Table { path, source })
    }

    /// `r`, or the export's error naming the table's file.
    fn built<T>(&self, table: Table, r: Result<T, TableError>) -> Result<T, ExportError> {
        r.map_err(|source| ExportError::Table {
            path: self.out_dir.join(table.file_name()),
            source,
        })
    }

    fn finish(self) -> Result<Vec<TableSummary>, ExportError> {
        let out_dir = self.out_dir;
        let tables = self
            .writers
            .into_iter()
            .map(|w| {
                let table = w.table();
                let path = out_dir.join(table.file_name());
                let (out, rows) = w.finish().map_err(|source| ExportError::Table {
                    path: path.clone(),
                    source,
                })?;
                out.into_inner()
                    .map_err(|e| e.into_error())
                    .and_then(|mut f| f.flush())
                    .map_err(|source| ExportError::Io {
                        path: path.clone(),
                        source,
                    })?;
                Ok(TableSummary {
                    table: table.name(),
                    path: path.display().to_string(),
                    schema: table.schema_name(),
                    rows,
                })
            })
            .collect::<Result<Vec<_>, ExportError>>()?;
        self.dir.commit()?;
        Ok(tables)
    }
}

/// Exports `paths` (snapshot files, and run directories whose snapshots are found as
/// `ranks` finds them) into `out_dir`, one Parquet file per table (docs/schemas.md).
///
/// The `ranks` table flags outliers as `ranks` does: among each directory's files (its
/// non-snapshot files skipped), and among the files given by name (whose `rank` and
/// `step` are null). An input that cannot be read is a `ranks` row with its error and
/// no other row; when none could be read the tables are still written and the result is
/// [`ExportError::NothingRead`]. A file that loads but cannot be analysed with
/// `opts.analysis` (a device it does not have) keeps its `files`, `events` and `stacks`
/// rows, its `ranks` row says why.
///
/// ```
/// use leakscope::export::{ExportOptions, export_parquet};
/// let out = std::env::temp_dir().join(format!("leakscope-doc-export-{}", std::process::id()));
/// let run = ["fixtures/scenarios/verl_ranks".into()];
/// let written = export_parquet(&run, &out, &ExportOptions::default())?;
/// assert_eq!(written.files_read, 8);
/// assert_eq!(written.tables[4].table, "events");
/// assert!(out.join("events.parquet").is_file());
/// # std::fs::remove_dir_all(&out).ok();
/// # Ok::<(), leakscope::export::ExportError>(())
/// ```
pub fn export_parquet(
    paths: &[PathBuf],
    out_dir: &Path,
    opts: &ExportOptions,
) -> Result<ExportSummary, ExportError> {
    let (mut groups, units) = expand(paths);
    let inputs = Inputs::of(units.iter().map(|u| &u.found.file));
    let mut writers = Writers::create(out_dir, &inputs)?;
    let mut files_read = 0u64;
    // A core's worth of files at a time: loaded side by side, then analysed while their
    // summaries and stacks are written in order (each row group's columns encoded in
    // parallel), then their events (which carry the roles the analysis classified) and
    // findings written. A lone file's load gets helper threads.
    let per_round = rayon::current_num_threads().max(1);
    let threads = units.len() == 1;
    for round in units.chunks(per_round) {
        let loaded: Vec<Loaded> = round
            .par_iter()
            .map(|u| open(&u.found, opts, threads))
            .collect();
        let (analyses, written) = rayon::join(
            || {
                loaded
                    .par_iter()
                    .zip(round)
                    .map(|(s, u)| {
                        s.as_ref()
                            .ok()
                            .map(|s| analyse(s, &u.found, &opts.analysis))
                    })
                    .collect::<Vec<_>>()
            },
            || -> Result<(), ExportError> {
                for (s, u) in loaded.iter().zip(round) {
                    if let Ok(s) = s {
                        write_model(&mut writers, s, &key(s, u, &groups), &u.found.file)?;
                    }
                }
                Ok(())
            },
        );
        written?;
        for ((s, u), a) in loaded.iter().zip(round).zip(analyses) {
            if let Ok(s) = s {
                let none = EventRoles::default();
                let roles = match &a {
                    Some(Ok(a)) => &a.3,
                    _ => &none,
                };
                write_events(&mut writers, s, &key(s, u, &groups), roles)?;
            }
            let rows = match (s, a) {
                (Err(e), _) => vec![error_row(&u.found, e)],
                (Ok(_), Some(Err(e))) => vec![error_row(&u.found, &Failure::from(e))],
                (Ok(s), Some(Ok(a))) => {
                    write_analysis(&mut writers, &key(s, u, &groups), &a)?;
                    a.0
                }
                (Ok(_), None) => Vec::new(),
            };
            if s.is_ok() {
                files_read += 1;
            }
            groups[u.group].rows.extend(rows);
        }
    }
    let mut failed = Vec::new();
    let mut skipped_files = 0;
    let mut special_files = Vec::new();
    for (gi, mut g) in groups.into_iter().enumerate() {
        special_files.append(&mut g.special);
        let steps = g.dir.is_some();
        if let (Some(dir), None) = (&g.dir, &g.error) {
            let found: Vec<Found> = units
                .iter()
                .filter(|u| u.group == gi)
                .map(|u| u.found.clone())
                .collect();
            let rows = rank_series(&found, &opts.analysis);
            if !rows.is_empty() {
                let b = tables::series::batch_of(&dir.display().to_string(), &rows).map_err(
                    |source| ExportError::Table {
                        path: out_dir.join(Table::Series.file_name()),
                        source,
                    },
                )?;
                writers.write(Table::Series, &b)?;
            }
        }
        let rows = match g.dir {
            None => {
                let mut rows = g.rows;
                flag_outliers(&mut rows);
                rows
            }
            Some(dir) => match g.error {
                // A directory that cannot be listed: its error is its only row.
                Some(e) => vec![error_row(&named(&dir), &e)],
                None => match merge_ranks(&dir, g.rows, g.skipped) {
                    Ok(r) => {
                        skipped_files += r.skipped_files;
                        r.ranks
                    }
                    Err(e) => vec![error_row(&named(&dir), &Failure::from(e))],
                },
            },
        };
        let mut seen = std::collections::HashSet::new();
        for r in &rows {
            if let Some(e) = &r.error
                && seen.insert(r.file.as_str())
            {
                failed.push(Failed {
                    file: r.file.clone(),
                    error: e.clone(),
                    kind: r.error_kind.unwrap_or(ErrorKind::Usage),
                });
            }
        }
        if !rows.is_empty() {
            let b = tables::ranks::batch_of(&rows, steps).map_err(|source| ExportError::Table {
                path: out_dir.join(Table::Ranks.file_name()),
                source,
            })?;
            writers.write(Table::Ranks, &b)?;
        }
    }
    let tables = writers.finish()?;
    if files_read == 0 {
        return Err(ExportError::NothingRead {
            errors: failed.iter().map(|f| f.error.clone()).collect(),
            kind: failed.first().map_or(ErrorKind::Io, |f| f.kind),
        });
    }
    Ok(ExportSummary {
        schema: SCHEMA,
        out_dir: out_dir.display().to_string(),
        files_read,
        failed,
        skipped_files,
        special_files,
        tables,
    })
}
