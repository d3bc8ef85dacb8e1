//! Compressed input, decompressed beside the parse.
//!
//! A decoder (libzstd, or zlib-rs for gzip) fills one buffer on its own thread while the
//! parser reads behind it; the parser waits only where it has caught up. The buffer is
//! address space reserved once for the whole limit, so it never moves (the parser's
//! strings point into it) and only what is written takes memory. The decoder keeps at
//! most [`LEAD`] ahead of the parser, so a stream of zeros behind a pickle header costs
//! what the parser read before it stopped, not what the file claims to hold.

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use crate::error::LoadErrorKind;

/// How far the decoder may run ahead of what the parser has asked for.
pub(crate) const LEAD: usize = 16 << 20;
/// Bytes decoded between two publications.
const CHUNK: usize = 1 << 20;

/// Which compression a stream uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Codec {
    Gzip,
    Zstd,
}

impl Codec {
    pub(crate) fn name(self) -> &'static str {
        self.compression().as_str()
    }

    /// The compression as a snapshot's format names it.
    pub(crate) fn compression(self) -> crate::model::Compression {
        match self {
            Codec::Gzip => crate::model::Compression::Gzip,
            Codec::Zstd => crate::model::Compression::Zstd,
        }
    }

    /// A decoder over the whole compressed input. Several gzip members or zstd frames
    /// in a row are one stream, as `gzip -d` and `zstd -d` read them.
    fn decoder<'d>(self, data: &'d [u8]) -> Result<Box<dyn Read + Send + 'd>, LoadErrorKind> {
        Ok(match self {
            Codec::Gzip => Box::new(GzMembers::new(data)),
            Codec::Zstd => {
                Box::new(zstd::stream::read::Decoder::with_buffer(data).map_err(|e| {
                    LoadErrorKind::Decompress {
                        format: "zstd",
                        message: e.to_string(),
                    }
                })?)
            }
        })
    }

    /// The decompressed size the input declares, when it declares one (the first zstd
    /// frame's content size, past any skippable frames; gzip's trailer holds it modulo
    /// 2^32 only, at the end).
    pub(crate) fn declared_size(self, data: &[u8]) -> Option<u64> {
        match self {
            Codec::Zstd => zstd::zstd_safe::get_frame_content_size(past_skippable(data))
                .ok()
                .flatten(),
            Codec::Gzip => None,
        }
    }
}

/// Whether `data` starts with a zstd skippable frame's magic (0x184D2A50 to 0x184D2A5F,
/// little-endian): metadata a zstd decoder passes over, which may precede the frames.
pub(crate) fn is_skippable_frame(data: &[u8]) -> bool {
    data.len() >= 4 && data[0] & 0xf0 == 0x50 && data[1..4] == [0x2a, 0x4d, 0x18]
}

/// `data` past the skippable frames it starts with (each: magic, a 4-byte little-endian
/// size, that many bytes); where one runs past the end, what is left of it.
fn past_skippable(mut data: &[u8]) -> &[u8] {
    while is_skippable_frame(data) && data.len() >= 8 {
        let size = u32::from_le_bytes([data[4], data[5], data[6], data[7]]) as usize;
        match data.get(8usize.saturating_add(size)..) {
            Some(rest) => data = rest,
            None => break,
        }
    }
    data
}

/// A gzip stream of one or more members, as `gzip -d` reads it, except that bytes after
/// the last member which do not start another one are an error naming their offset
/// (`gzip -d` ignores them with a warning; flate2's `MultiGzDecoder` tries them as a
/// member and, when there are fewer than a header's ten bytes, calls the file truncated).
struct GzMembers<'d> {
    data: &'d [u8],
    /// The member being decoded (`None`: between members).
    member: Option<flate2::bufread::GzDecoder<&'d [u8]>>,
    /// Where the next member starts, once the current one has ended.
    next: usize,
}

impl<'d> GzMembers<'d> {
    fn new(data: &'d [u8]) -> Self {
        GzMembers {
            data,
            member: None,
            next: 0,
        }
    }
}

impl Read for GzMembers<'_> {
    fn read(&mut self, into: &mut [u8]) -> std::io::Result<usize> {
        if into.is_empty() {
            return Ok(0);
        }
        loop {
            if let Some(m) = &mut self.member {
                match m.read(into)? {
                    0 => {
                        // The member ended: the reader stands right after its trailer.
                        self.next = self.data.len() - m.get_ref().len();
                        self.member = None;
                    }
                    n => return Ok(n),
                }
            }
            let rest = &self.data[self.next..];
            if rest.is_empty() {
                return Ok(0);
            }
            if self.next > 0 && !rest.starts_with(&[0x1f, 0x8b]) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    TrailingData {
                        offset: self.next as u64,
                        len: rest.len() as u64,
                    },
                ));
            }
            self.member = Some(flate2::bufread::GzDecoder::new(rest));
        }
    }
}

/// Bytes after the end of a compressed stream that start no other member.
#[derive(Debug)]
struct TrailingData {
    offset: u64,
    len: u64,
}

impl std::fmt::Display for TrailingData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "there is data after the end of the compressed stream: {} bytes from compressed byte {} are not another gzip member (trailing garbage; the stream before it is whole)",
            self.len, self.offset
        )
    }
}

impl std::error::Error for TrailingData {}

/// Where the decoder stands, as the parser sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    /// Decoded to the end: the buffer holds the whole input.
    Finished,
    /// Stopped on an error (kept by the decoder's side until the load collects it).
    Failed,
}

/// The decompressed bytes, filled by the decoder and read by the parser.
pub(crate) struct Inflated {
    buf: memmap2::MmapMut,
    /// Bytes written and published (only ever grows; the parser reads below it).
    written: AtomicUsize,
    /// The end of what the parser has asked for; the decoder may run [`LEAD`] past it.
    wanted: AtomicUsize,
    stop: AtomicBool,
    /// The decoder waits for the parser (it is [`LEAD`] ahead).
    parked: AtomicBool,
    phase: Mutex<Phase>,
    changed: Condvar,
    limit: u64,
}

impl Inflated {
    /// Reserves address space for `limit` bytes (no memory until written).
    pub(crate) fn new(limit: u64) -> Result<Self, LoadErrorKind> {
        let cap = usize::try_from(limit).unwrap_or(usize::MAX).max(1);
        let buf = memmap2::MmapOptions::new()
            .len(cap)
            .no_reserve_swap()
            .map_anon()
            .map_err(|e| LoadErrorKind::Decompress {
                format: "buffer",
                message: format!(
                    "cannot reserve {cap} bytes of address space for the decompressed data ({e}); lower --max-decompressed-bytes"
                ),
            })?;
        // Huge pages: writing half a gigabyte in 4 KiB pages costs 130,000 page faults,
        // a fifth of the decoder's time (measured). Advice only; ignored where unsupported.
        #[cfg(target_os = "linux")]
        let _ = buf.advise(memmap2::Advice::HugePage);
        Ok(Inflated {
            buf,
            written: AtomicUsize::new(0),
            wanted: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            parked: AtomicBool::new(false),
            phase: Mutex::new(Phase::Running),
            changed: Condvar::new(),
            limit,
        })
    }

    /// The bytes published so far.
    pub(crate) fn prefix(&self) -> &[u8] {
        let n = self.written.load(Ordering::Acquire);
        // SAFETY: the decoder writes only at or past `written`, and publishes with Release
        // after writing; these `n` bytes are initialised (an anonymous map starts zeroed)
        // and never written again while `self` lives.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr(), n) }
    }

    fn phase(&self) -> Phase {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_phase(&self, p: Phase) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = p;
        self.changed.notify_all();
    }

    /// Waits until `end` bytes are published or the decoder stopped; returns what is
    /// published then. `end` also tells the decoder how far it may go.
    pub(crate) fn wait_for(&self, end: usize) -> &[u8] {
        self.wanted.fetch_max(end, Ordering::AcqRel);
        if self.parked.load(Ordering::Acquire) {
            // The decoder waits for the parse to move on: it has now.
            let _guard = self.phase.lock().unwrap_or_else(|p| p.into_inner());
            self.changed.notify_all();
        }
        if self.written.load(Ordering::Acquire) < end {
            // Under the lock, so a decoder between its check and its wait hears it.
            let mut phase = self.phase.lock().unwrap_or_else(|p| p.into_inner());
            self.changed.notify_all();
            while *phase == Phase::Running && self.written.load(Ordering::Acquire) < end {
                phase = self.changed.wait(phase).unwrap_or_else(|p| p.into_inner());
            }
        }
        self.prefix()
    }

    /// Tells the decoder to stop (the parser is done, or failed).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _guard = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        self.changed.notify_all();
    }

    /// Once the parse is done: waits until the decoder reached the end (so a checksum
    /// at the end is verified) or has parked [`LEAD`] past the parse; then stops it.
    pub(crate) fn settle(&self) {
        let mut phase = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        while *phase == Phase::Running && !self.parked.load(Ordering::Acquire) {
            phase = self.changed.wait(phase).unwrap_or_else(|p| p.into_inner());
        }
        drop(phase);
        self.stop();
    }

    /// Whether the decoder reached the end of the input.
    pub(crate) fn finished(&self) -> bool {
        self.phase() == Phase::Finished
    }

    /// Decodes `data` into the buffer, keeping within [`LEAD`] of what the parser asked
    /// for. Returns the decompressed length (`None`: told to stop first), or why the
    /// input could not be decoded.
    pub(crate) fn fill(&self, codec: Codec, data: &[u8]) -> Result<Option<usize>, LoadErrorKind> {
        let r = self.fill_inner(codec, data);
        self.set_phase(if matches!(r, Ok(Some(_))) {
            Phase::Finished
        } else {
            Phase::Failed
        });
        r
    }

    fn fill_inner(&self, codec: Codec, data: &[u8]) -> Result<Option<usize>, LoadErrorKind> {
        let mut reader = codec.decoder(data)?;
        let cap = self.buf.len();
        let mut at = 0usize;
        loop {
            // Keep within LEAD of the parser (or of a long string it waits for).
            {
                let mut phase = self.phase.lock().unwrap_or_else(|p| p.into_inner());
                while !self.stop.load(Ordering::Acquire)
                    && at >= self.wanted.load(Ordering::Acquire).saturating_add(LEAD)
                {
                    self.parked.store(true, Ordering::Release);
                    self.changed.notify_all();
                    phase = self.changed.wait(phase).unwrap_or_else(|p| p.into_inner());
                }
                self.parked.store(false, Ordering::Release);
            }
            if self.stop.load(Ordering::Acquire) {
                return Ok(None);
            }
            let end = cap.min(at + CHUNK);
            let (n, err) = if at < cap {
                // SAFETY: `at..end` is inside the map, past everything published, and only
                // this thread writes there.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(self.buf.as_ptr().add(at).cast_mut(), end - at)
                };
                read_some(&mut reader, dst, codec)
            } else {
                // The buffer is full: one byte more means the input is over the limit.
                let mut probe = [0u8; 1];
                match read_some(&mut reader, &mut probe, codec) {
                    (0, e) => (0, e),
                    _ => (0, Some(LoadErrorKind::TooLarge { limit: self.limit })),
                }
            };
            if n > 0 {
                // Published even when an error follows, so the parser reaches the point
                // where the input went bad and errors there name what came before.
                at += n;
                self.written.store(at, Ordering::Release);
                let _guard = self.phase.lock().unwrap_or_else(|p| p.into_inner());
                self.changed.notify_all();
            }
            match err {
                Some(e) => return Err(e),
                None if n == 0 => return Ok(Some(at)),
                None => {}
            }
        }
    }
}

/// Reads until `dst` is full or the input ends; what was read, and the error that
/// stopped it early, if one did.
fn read_some(
    reader: &mut dyn Read,
    dst: &mut [u8],
    codec: Codec,
) -> (usize, Option<LoadErrorKind>) {
    let mut n = 0;
    while n < dst.len() {
        match reader.read(&mut dst[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                let message = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    "the compressed data ends early (the file is truncated)".to_string()
                } else {
                    e.to_string()
                };
                let e = LoadErrorKind::Decompress {
                    format: codec.name(),
                    message,
                };
                return (n, Some(e));
            }
        }
    }
    (n, None)
}

/// The default limit on decompressed size: the smaller of 16 GiB and half the machine's
/// physical memory (what a decompressed snapshot must fit in, next to its analysis).
pub fn default_max_decompressed_bytes() -> u64 {
    const CEILING: u64 = 16 << 30;
    physical_memory().map_or(CEILING, |m| CEILING.min(m / 2))
}

fn physical_memory() -> Option<u64> {
    #[cfg(unix)]
    {
        // SAFETY: sysconf reads a system constant.
        let (pages, size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && size > 0 {
            return Some(pages as u64 * size as u64);
        }
    }
    None
}
