//! Stage 1, `load`: any snapshot file (pickle of any protocol and either pickler, JSON,
//! leakscope's MessagePack cache; plain, gzip or zstd) into one [`Snapshot`].
//!
//! Formats are told apart by their first bytes, never by the file name (one real
//! snapshot is a pickle named `.json`). Nothing in a pickle is ever executed.

mod bodies;
mod bound;
mod build;
pub mod cache;
mod collect;
mod fields;
mod guard;
mod handle;
mod inflate;
mod json;
mod long_str;
mod memo;
mod pickle;
mod prefault;
mod scan_ahead;
pub mod series;
mod stacks;

use std::fs::File;
use std::path::Path;

pub use inflate::default_max_decompressed_bytes;

use crate::error::{LoadError, LoadErrorKind};
use crate::model::{Compression, PickleStyle, Snapshot, SourceFormat};

/// Options for loading.
///
/// ```
/// let mut o = leakscope::LoadOptions::default();
/// o.max_decompressed_bytes = 1 << 30;
/// o.threads = false;
/// ```
#[non_exhaustive]
pub struct LoadOptions<'p> {
    /// Largest decompressed size accepted for `.gz` / `.zst` input (a guard against
    /// decompression bombs). Default: [`default_max_decompressed_bytes`], the smaller of
    /// 16 GiB and half the machine's physical memory.
    pub max_decompressed_bytes: u64,
    /// Called with `(bytes done, bytes total)` while parsing large inputs.
    pub progress: Option<&'p mut dyn FnMut(u64, u64)>,
    /// Use helper threads (stack interning, mapping file pages ahead, scanning long
    /// traces ahead, freeing the parser's tables). Turn off when loading several files at
    /// once, so each load keeps to one core.
    pub threads: bool,
}

impl Default for LoadOptions<'_> {
    fn default() -> Self {
        LoadOptions {
            max_decompressed_bytes: default_max_decompressed_bytes(),
            progress: None,
            threads: true,
        }
    }
}

/// What the first bytes say the data is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Container {
    /// A pickle (protocol 2+ starts with PROTO; 0/1 with a container opcode).
    Pickle,
    /// JSON text.
    Json,
    /// leakscope's cache.
    Cache,
    /// gzip stream.
    Gzip,
    /// zstd frame.
    Zstd,
}

/// Tells the format from the first bytes.
pub fn sniff(data: &[u8]) -> Option<Container> {
    if data.starts_with(&[0x1f, 0x8b]) {
        return Some(Container::Gzip);
    }
    // A zstd frame, or a skippable frame (metadata) before one.
    if data.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) || inflate::is_skippable_frame(data) {
        return Some(Container::Zstd);
    }
    if data.starts_with(cache::MAGIC) {
        return Some(Container::Cache);
    }
    match data.first()? {
        0x80 => Some(Container::Pickle),
        // Protocol 0/1 opcodes that can start a snapshot: MARK, EMPTY_DICT, EMPTY_LIST.
        b'(' | b'}' | b']' => Some(Container::Pickle),
        _ => {
            let first = data.iter().find(|c| !c.is_ascii_whitespace())?;
            matches!(first, b'{' | b'[').then_some(Container::Json)
        }
    }
}

fn describe_start(data: &[u8]) -> String {
    if data.is_empty() {
        return "the file is empty".into();
    }
    data.iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Loads a snapshot file.
pub fn load_path(path: &Path, opts: LoadOptions) -> Result<Snapshot, LoadError> {
    load_path_inner(path, opts).map_err(|e| LoadError::from(e).with_path(path))
}

/// A file that is neither a regular file nor a directory: never opened (opening a FIFO
/// waits for a writer), only named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecialFile {
    /// A FIFO (named pipe).
    Fifo,
    /// A Unix socket.
    Socket,
    /// A block device.
    BlockDevice,
    /// A character device or terminal.
    CharDevice,
    /// Anything else that is not a file.
    Other,
}

impl SpecialFile {
    /// The kind of `t`; `None` for a directory or a regular file.
    pub fn of(t: &std::fs::FileType) -> Option<Self> {
        if t.is_dir() || t.is_file() {
            return None;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            Some(if t.is_fifo() {
                SpecialFile::Fifo
            } else if t.is_socket() {
                SpecialFile::Socket
            } else if t.is_block_device() {
                SpecialFile::BlockDevice
            } else if t.is_char_device() {
                SpecialFile::CharDevice
            } else {
                SpecialFile::Other
            })
        }
        #[cfg(not(unix))]
        Some(SpecialFile::Other)
    }

    /// A short label, as reports list it (`fifo`, `socket`, ...).
    pub fn label(self) -> &'static str {
        match self {
            SpecialFile::Fifo => "fifo",
            SpecialFile::Socket => "socket",
            SpecialFile::BlockDevice => "block device",
            SpecialFile::CharDevice => "character device",
            SpecialFile::Other => "other",
        }
    }

    /// What it is, in words, for an error message.
    pub fn describe(self) -> &'static str {
        match self {
            SpecialFile::Fifo => "a FIFO or pipe",
            SpecialFile::Socket => "a socket",
            SpecialFile::BlockDevice => "a block device",
            SpecialFile::CharDevice => "a character device or terminal",
            SpecialFile::Other => "not a file",
        }
    }
}

/// What kind of thing a path that is no regular file names, from its metadata (looked
/// at before opening: opening a FIFO waits for a writer).
fn not_regular(meta: &std::fs::Metadata) -> Option<LoadErrorKind> {
    let t = meta.file_type();
    if t.is_dir() {
        return Some(LoadErrorKind::Directory);
    }
    SpecialFile::of(&t).map(|k| LoadErrorKind::NotRegular(k.describe()))
}

/// Whether the file's size or modification time differ from `before`'s.
fn changed_since(file: &File, before: &std::fs::Metadata) -> bool {
    match file.metadata() {
        Ok(now) => now.len() != before.len() || now.modified().ok() != before.modified().ok(),
        Err(_) => true,
    }
}

fn load_path_inner(path: &Path, opts: LoadOptions) -> Result<Snapshot, LoadErrorKind> {
    if let Some(e) = std::fs::metadata(path).ok().as_ref().and_then(not_regular) {
        return Err(e);
    }
    let file = File::open(path)?;
    let before = file.metadata()?;
    if let Some(e) = not_regular(&before) {
        return Err(e); // replaced between the look and the open
    }
    if before.len() == 0 {
        use std::io::Read;
        let mut probe = [0u8; 1];
        if (&file).read(&mut probe).unwrap_or(0) > 0 {
            return Err(LoadErrorKind::NotRegular(
                "a file that reports a size of 0 yet has content, as procfs files do",
            ));
        }
        return Err(LoadErrorKind::UnknownFormat("the file is empty".into()));
    }
    // SAFETY: the map is read-only and private. Another process may truncate the file
    // while we read it: the watch below turns the fault that follows into zeros and a
    // note, and the load into an error.
    let map = unsafe { memmap2::MmapOptions::new().map(&file)? };
    let Some(watch) = guard::Watch::new(&map) else {
        // No guard here (another platform, or many loads at once): read the file.
        drop(map);
        let data = std::fs::read(path)?;
        let snap = load_bytes_with(&data, opts, false, &mut |_, _| {})?;
        return if changed_since(&file, &before) {
            Err(LoadErrorKind::Changed)
        } else {
            Ok(snap)
        };
    };
    let result = load_mapped(&map, opts);
    let changed = watch.faulted() || changed_since(&file, &before);
    drop(watch);
    if changed {
        return Err(LoadErrorKind::Changed);
    }
    result
}

fn load_mapped(map: &memmap2::Mmap, opts: LoadOptions) -> Result<Snapshot, LoadErrorKind> {
    #[cfg(unix)]
    let _ = map.advise(memmap2::Advice::Sequential);
    if matches!(sniff(map), Some(Container::Gzip | Container::Zstd)) {
        // The compressed input is small next to what it holds: no pager for it.
        return load_bytes_with(map, opts, true, &mut |_, _| {});
    }
    let released = Released::default();
    if !opts.threads {
        // One core only: give back pages already parsed from the parsing thread itself.
        let mut release = |done: usize, _: &[prefault::Region]| {
            released.advance(map, behind(done), 0);
        };
        return load_bytes_with(map, opts, true, &mut release);
    }
    let parsed = std::sync::atomic::AtomicUsize::new(0);
    let finished = std::sync::atomic::AtomicBool::new(false);
    let frontiers = prefault::Frontiers::default();
    std::thread::scope(|scope| {
        // The second core maps pages in ahead of the parser and gives them back behind it,
        // so the parser neither waits on page faults nor keeps the whole file resident.
        let _ = std::thread::Builder::new()
            .name("leakscope-pager".into())
            .spawn_scoped(scope, || {
                pager(map, &parsed, &finished, &frontiers, &released)
            });
        let result = load_bytes_with(map, opts, true, &mut |done, regions| {
            frontiers.publish(regions);
            parsed.store(done, std::sync::atomic::Ordering::Relaxed);
            // A pager that gets no CPU for a while (a busy machine, or its core shared
            // with the stack and scan workers) would leave the pages the parser maps
            // itself resident: past a lag of PARSER_SLACK the parser gives them back.
            released.advance(map, behind(done), PARSER_SLACK);
        });
        finished.store(true, std::sync::atomic::Ordering::Relaxed);
        result
    })
}

/// How far ahead of the parser pages are mapped in, and how far behind they are released.
const PAGER_AHEAD: usize = 48 << 20;
const PAGER_BEHIND: usize = 1 << 20;
const PAGE: usize = 4096;
/// Least the pager gives back in one call.
const PAGER_STEP: usize = 8 << 20;
/// How far the pager's releasing may lag before the parser does it itself.
const PARSER_SLACK: usize = 24 << 20;

/// The page-aligned end of what may be given back when the parser is at `done`.
fn behind(done: usize) -> usize {
    done.saturating_sub(PAGER_BEHIND) & !(PAGE - 1)
}

/// How much of the file map has been given back, shared by the pager and the parser.
#[derive(Default)]
struct Released(std::sync::atomic::AtomicUsize);

impl Released {
    /// Claims the map from where giving back has reached up to `upto`, when that is more
    /// than `min_step`; the caller gives the claimed range back. Claims never overlap, so
    /// the pager and the parser can both call this.
    fn claim(&self, upto: usize, min_step: usize) -> Option<std::ops::Range<usize>> {
        use std::sync::atomic::Ordering::{Relaxed, SeqCst};
        let from = self.0.load(Relaxed);
        (upto > from + min_step && self.0.compare_exchange(from, upto, SeqCst, Relaxed).is_ok())
            .then_some(from..upto)
    }

    /// Claims as [`Released::claim`] does and gives the range back.
    fn advance(&self, map: &memmap2::Mmap, upto: usize, min_step: usize) {
        if let Some(r) = self.claim(upto, min_step) {
            release_pages(map, r.start, r.end);
        }
    }

    /// Where giving back has reached (claimed ranges included).
    fn upto(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The pages one pager pass maps in: from where it stopped or where the parser is,
/// whichever is later, to [`PAGER_AHEAD`] past the parser. Pages behind the parser are of
/// no use mapped in: after a stall, touching on from where the pager had stopped mapped
/// in whole stretches the parser had passed (up to 80 MiB more resident at a time).
fn touch_span(touched: usize, at: usize, len: usize) -> std::ops::Range<usize> {
    touched.max(at & !(PAGE - 1))..len.min(at + PAGER_AHEAD)
}

/// The part of `touched` (pages a pager pass mapped in) that had been given back before
/// or while it was touched: the parser may have moved on and given those pages back
/// between the pager reading its position and touching them.
fn mapped_again(touched: std::ops::Range<usize>, given_back: usize) -> std::ops::Range<usize> {
    touched.start..touched.end.min(given_back)
}

/// Gives back the pages of `map[from..upto]` (they stay in the page cache).
fn release_pages(map: &memmap2::Mmap, from: usize, upto: usize) {
    #[cfg(unix)]
    // SAFETY: a read-only file map; dropping pages only means that a later read (a string
    // borrowed earlier) faults them in again from the page cache.
    unsafe {
        let _ = map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, upto - from);
    }
    #[cfg(not(unix))]
    let _ = (map, from, upto);
}

fn pager(
    map: &memmap2::Mmap,
    parsed: &std::sync::atomic::AtomicUsize,
    finished: &std::sync::atomic::AtomicBool,
    frontiers: &prefault::Frontiers,
    released: &Released,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut populator = prefault::Populator::default();
    let len = map.len();
    let mut touched = 0usize;
    let mut sink = 0u8;
    while !finished.load(Relaxed) {
        let at = parsed.load(Relaxed);
        let span = touch_span(touched, at, len);
        let mut p = span.start;
        while p < span.end {
            // Reading one byte of a page maps it (and its neighbours) into our page table.
            // SAFETY: `p < span.end <= len`, inside the map.
            sink ^= unsafe { std::ptr::read_volatile(map.as_ptr().add(p)) };
            p += PAGE;
        }
        let mut busy = p > span.start;
        touched = p; // the span starts at or after `touched`
        let again = mapped_again(span.start..p, released.upto());
        if !again.is_empty() {
            release_pages(map, again.start, again.end);
        }
        released.advance(map, behind(at), PAGER_STEP);
        busy |= populator.step(frontiers);
        if !busy {
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
    }
    std::hint::black_box(sink);
}

/// Builds a snapshot from any serde data source holding what a snapshot file holds: the
/// Python package walks the dict `torch.cuda.memory._snapshot()` returns through this,
/// with no pickle in between. `container` names the source in the snapshot's format.
///
/// ```
/// let v = serde_json::json!({"segments": [], "device_traces": [[]]});
/// use leakscope::model::Container;
/// let snap = leakscope::load::load_deserializer(v, Container::Object).unwrap();
/// assert_eq!(snap.format.container.as_str(), "object");
/// ```
pub fn load_deserializer<'de, D: serde::Deserializer<'de>>(
    de: D,
    container: crate::model::Container,
) -> Result<Snapshot, LoadError> {
    let mut heap = Default::default();
    let mut builder = build::Builder::new(0, true);
    let top = json::decode_from(de, &mut heap, &mut builder)?;
    let mut snap = builder.finish(&mut heap, top)?;
    snap.format = SourceFormat {
        container,
        pickle_protocol: None,
        pickle_style: None,
        compression: Compression::None,
    };
    Ok(snap)
}

/// Loads a snapshot held in memory.
pub fn load_bytes(data: &[u8], opts: LoadOptions) -> Result<Snapshot, LoadError> {
    load_bytes_with(data, opts, false, &mut |_, _| {}).map_err(LoadError::from)
}

/// `file_map`: `data` is a private map of a file, whose pages may be given back (a later
/// read maps them in again from the file); never so for memory the caller owns.
fn load_bytes_with(
    data: &[u8],
    mut opts: LoadOptions,
    file_map: bool,
    release: &mut dyn FnMut(usize, &[prefault::Region]),
) -> Result<Snapshot, LoadErrorKind> {
    let kind = sniff(data).ok_or_else(|| LoadErrorKind::UnknownFormat(describe_start(data)))?;
    match kind {
        Container::Gzip => decode_compressed(data, inflate::Codec::Gzip, &mut opts),
        Container::Zstd => decode_compressed(data, inflate::Codec::Zstd, &mut opts),
        k => decode(data, k, &mut opts, file_map, release),
    }
}

/// Decompresses on a second thread while the parse follows (see [`inflate`]). A pickle
/// is parsed as it arrives, so an invalid byte stops both at once; JSON and the cache
/// are decoded once the whole input is there.
fn decode_compressed(
    data: &[u8],
    codec: inflate::Codec,
    opts: &mut LoadOptions,
) -> Result<Snapshot, LoadErrorKind> {
    let limit = opts.max_decompressed_bytes;
    let declared = codec.declared_size(data);
    if declared.is_some_and(|n| n > limit) {
        return Err(LoadErrorKind::TooLarge { limit });
    }
    // Sizes the parser's tables; snapshots compress about tenfold.
    let expected = declared.unwrap_or(data.len() as u64 * 10).min(limit) as usize;
    let inflated = inflate::Inflated::new(limit)?;
    let (parsed, filled) = std::thread::scope(|scope| {
        let decoder = std::thread::Builder::new()
            .name("leakscope-inflate".into())
            .spawn_scoped(scope, || inflated.fill(codec, data));
        let parsed = match &decoder {
            Ok(_) => decode_following(&inflated, codec, expected, opts),
            Err(e) => Err(LoadErrorKind::Io(std::io::Error::new(
                e.kind(),
                e.to_string(),
            ))),
        };
        if parsed.is_ok() {
            inflated.settle();
        } else {
            inflated.stop();
        }
        let filled = match decoder {
            Ok(h) => h.join().unwrap_or_else(|_| {
                Err(LoadErrorKind::Decompress {
                    format: codec.name(),
                    message: "the decoder failed".into(),
                })
            }),
            Err(_) => Ok(None),
        };
        (parsed, filled)
    });
    let in_decompressed = |e| LoadErrorKind::InDecompressed {
        format: codec.name(),
        inner: Box::new(e),
    };
    match (parsed, filled) {
        // A byte the parser refused came before any point where decoding failed.
        (
            Err(
                e @ (LoadErrorKind::Malformed { .. }
                | LoadErrorKind::BadOpcode { .. }
                | LoadErrorKind::Forbidden { .. }),
            ),
            _,
        ) => Err(in_decompressed(e)),
        // Otherwise a failed decoder explains the rest: the parse ran out of input, or
        // what it read fails the stream's checksum.
        (_, Err(e)) => Err(e),
        (Err(e @ LoadErrorKind::Truncated { .. }), Ok(_)) => Err(in_decompressed(e)),
        (Err(e), Ok(_)) => Err(e),
        (Ok(mut snap), Ok(_)) => {
            snap.format.compression = codec.compression();
            Ok(snap)
        }
    }
}

fn decode_following(
    inflated: &inflate::Inflated,
    codec: inflate::Codec,
    expected: usize,
    opts: &mut LoadOptions,
) -> Result<Snapshot, LoadErrorKind> {
    let head = inflated.wait_for(16);
    let kind = sniff(head)
        .filter(|k| !matches!(k, Container::Gzip | Container::Zstd))
        .ok_or_else(|| {
            LoadErrorKind::UnknownFormat(format!(
                "{} data holding {}",
                codec.name(),
                describe_start(head)
            ))
        })?;
    if kind != Container::Pickle {
        let all = inflated.wait_for(usize::MAX);
        return decode(all, kind, opts, false, &mut |_, _| {});
    }
    let machine = pickle::Machine::following(inflated, expected);
    let (mut snap, end) = decode_pickle(machine, expected, opts, &mut |_, _| {})?;
    // What follows STOP is decompressed up to LEAD further, no more.
    inflated.settle();
    if inflated.finished() {
        warn_trailing(&mut snap, inflated.prefix().len(), end);
    } else {
        snap.warnings.push(format!(
            "more than {} MiB follow the pickle's STOP; they were not decompressed",
            inflate::LEAD >> 20
        ));
    }
    Ok(snap)
}

fn decode(
    data: &[u8],
    kind: Container,
    opts: &mut LoadOptions,
    file_map: bool,
    release: &mut dyn FnMut(usize, &[prefault::Region]),
) -> Result<Snapshot, LoadErrorKind> {
    let total = data.len() as u64;
    let snap = match kind {
        Container::Cache => cache::decode(data)?,
        Container::Pickle => {
            let (mut snap, end) =
                decode_pickle(machine_over(data, file_map), data.len(), opts, release)?;
            warn_trailing(&mut snap, data.len(), end);
            snap
        }
        Container::Json => {
            let mut snap = match decode_json(data, opts.threads) {
                // Python's json writes a lone surrogate as an escape serde_json refuses:
                // read it as U+FFFD, as the pickle reader does.
                Err(LoadErrorKind::Json(m))
                    if m.contains("surrogate") || m.contains("hex escape") =>
                {
                    match json::without_lone_surrogates(data) {
                        Some(fixed) => decode_json(&fixed, opts.threads)?,
                        None => return Err(LoadErrorKind::Json(m)),
                    }
                }
                other => other?,
            };
            snap.format = SourceFormat {
                container: crate::model::Container::Json,
                pickle_protocol: None,
                pickle_style: None,
                compression: Compression::None,
            };
            snap
        }
        Container::Gzip | Container::Zstd => {
            return Err(LoadErrorKind::UnknownFormat(
                "compressed data inside compressed data".into(),
            ));
        }
    };
    if let Some(p) = opts.progress.as_mut() {
        p(total, total);
    }
    Ok(snap)
}

/// A JSON snapshot.
fn decode_json(data: &[u8], threads: bool) -> Result<Snapshot, LoadErrorKind> {
    let mut heap = Default::default();
    let mut builder = build::Builder::new(data.len(), threads);
    let top = json::decode(data, &mut heap, &mut builder)?;
    builder.finish(&mut heap, top)
}

/// Runs `machine` to STOP into a snapshot and the offset after STOP; `total` is the
/// input's length (expected length, for input still arriving), for progress.
fn decode_pickle<'a>(
    mut machine: pickle::Machine<'a>,
    total: usize,
    opts: &mut LoadOptions,
    release: &mut dyn FnMut(usize, &[prefault::Region]),
) -> Result<(Snapshot, usize), LoadErrorKind> {
    let total = total as u64;
    let mut builder = build::Builder::new(total as usize, opts.threads);
    let mut progress = |done: usize, regions: &[prefault::Region]| {
        if let Some(p) = opts.progress.as_mut() {
            p((done as u64).min(total), total);
        }
        release(done, regions);
    };
    let top = machine.run(&mut builder, &mut progress)?;
    let stats = machine.stats.clone();
    let mut snap = builder.finish(&mut machine.heap, top)?;
    if opts.threads {
        // Freeing the parser's dict slots one by one takes 2 ms on a 500 MB file and
        // nothing waits for it, so a thread of its own does it.
        let dicts = std::mem::take(&mut machine.heap.dicts);
        let _ = std::thread::Builder::new()
            .name("leakscope-free".into())
            .spawn(move || drop(dicts));
    }
    let cpp = stats.protocol == Some(2)
        && stats.memoize_ops == 0
        && (stats.long1_padded > 0 || stats.empty_batches > 0);
    snap.format = SourceFormat {
        container: crate::model::Container::Pickle,
        pickle_protocol: stats.protocol,
        pickle_style: Some(if cpp {
            PickleStyle::TorchCpp
        } else {
            PickleStyle::Cpython
        }),
        compression: Compression::None,
    };
    Ok((snap, stats.end as usize))
}

/// A machine over `data`; over a file map, long strings give their pages back as they
/// are read and copied (see [`pickle::Heap::string`]).
fn machine_over(data: &[u8], file_map: bool) -> pickle::Machine<'_> {
    let mut m = pickle::Machine::new(data);
    // SAFETY (of what `file_map` promises): the caller passes true only for a private,
    // read-only map of a file, whose pages the file backs.
    m.heap.file_map = file_map;
    m
}

fn warn_trailing(snap: &mut Snapshot, total: usize, end: usize) {
    let trailing = total.saturating_sub(end);
    if trailing > 0 {
        snap.warnings.push(format!(
            "{trailing} bytes after the pickle's STOP were ignored (HTML-embedded snapshots carry NUL padding)"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// After a stall the pager maps in from the parser on, never the stretch the parser
    /// passed meanwhile; and never past the end of the file.
    #[test]
    fn pager_touches_only_ahead_of_the_parser() {
        // Stopped at 10 MiB, parser now at 70 MiB (plus a partial page).
        let span = touch_span(10 * MIB, 70 * MIB + 100, 500 * MIB);
        assert_eq!(span, 70 * MIB..70 * MIB + 100 + PAGER_AHEAD);
        // Ahead of the parser already: go on from where it stopped.
        let span = touch_span(90 * MIB, 70 * MIB, 500 * MIB);
        assert_eq!(span.start, 90 * MIB);
        // Near the end: up to the end only.
        let span = touch_span(480 * MIB, 470 * MIB, 490 * MIB);
        assert_eq!(span, 480 * MIB..490 * MIB);
    }

    /// Pages a pass mapped in below what was given back meanwhile are named for release.
    #[test]
    fn pages_mapped_after_release_are_given_back_again() {
        assert_eq!(
            mapped_again(70 * MIB..118 * MIB, 80 * MIB),
            70 * MIB..80 * MIB
        );
        assert!(mapped_again(70 * MIB..118 * MIB, 60 * MIB).is_empty());
        assert_eq!(
            mapped_again(70 * MIB..118 * MIB, 200 * MIB),
            70 * MIB..118 * MIB
        );
    }

    /// The pager and the parser claim ranges to give back that join up without overlap,
    /// each only past its own minimum step.
    #[test]
    fn release_claims_join_up() {
        let r = Released::default();
        assert_eq!(r.claim(4 * MIB, PAGER_STEP), None, "under the pager's step");
        assert_eq!(r.claim(9 * MIB, PAGER_STEP), Some(0..9 * MIB));
        assert_eq!(
            r.claim(20 * MIB, PARSER_SLACK),
            None,
            "within the parser's slack"
        );
        assert_eq!(r.claim(40 * MIB, PARSER_SLACK), Some(9 * MIB..40 * MIB));
        assert_eq!(r.claim(30 * MIB, 0), None, "behind what was given back");
        assert_eq!(r.upto(), 40 * MIB);
    }
}
