//! A profile as pprof's `Profile` message (`proto/profile.proto` of github.com/google/pprof),
//! gzipped as pprof, speedscope and Perfetto expect it. The session layer builds a
//! [`Profile`] of stacks and values; this module interns strings, functions and
//! locations and encodes it.

use std::io::{self, Write};

use super::protobuf::Message;
use crate::model::fxhash::FastMap;

/// One source frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Function name.
    pub function: String,
    /// Source file.
    pub filename: String,
    /// Line number (0 when unknown).
    pub line: i64,
}

/// One stack and its values.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// Indices into [`Profile::frames`], innermost (leaf) first.
    pub frames: Vec<u32>,
    /// One value per sample type.
    pub values: Vec<i64>,
    /// Numeric labels (`device` = 0).
    pub labels: Vec<(String, i64)>,
    /// String labels (`role` = `activation`).
    pub str_labels: Vec<(String, String)>,
}

/// A profile.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// `(type, unit)` of each value, e.g. `("space", "bytes")`.
    pub sample_types: Vec<(String, String)>,
    /// The type a viewer shows first.
    pub default_sample_type: String,
    /// Frames the samples refer to.
    pub frames: Vec<Frame>,
    /// Samples.
    pub samples: Vec<Sample>,
    /// Free text (what the profile is, the point, the file).
    pub comments: Vec<String>,
}

// Field numbers, from profile.proto.
mod field {
    pub const SAMPLE_TYPE: u32 = 1;
    pub const SAMPLE: u32 = 2;
    pub const LOCATION: u32 = 4;
    pub const FUNCTION: u32 = 5;
    pub const STRING_TABLE: u32 = 6;
    pub const COMMENT: u32 = 13;
    pub const DEFAULT_SAMPLE_TYPE: u32 = 14;
    pub const VT_TYPE: u32 = 1;
    pub const VT_UNIT: u32 = 2;
    pub const S_LOCATION_ID: u32 = 1;
    pub const S_VALUE: u32 = 2;
    pub const S_LABEL: u32 = 3;
    pub const L_KEY: u32 = 1;
    pub const L_STR: u32 = 2;
    pub const L_NUM: u32 = 3;
    pub const LOC_ID: u32 = 1;
    pub const LOC_LINE: u32 = 4;
    pub const LINE_FUNCTION_ID: u32 = 1;
    pub const LINE_LINE: u32 = 2;
    pub const F_ID: u32 = 1;
    pub const F_NAME: u32 = 2;
    pub const F_SYSTEM_NAME: u32 = 3;
    pub const F_FILENAME: u32 = 4;
}

/// The string table: index 0 is "" as pprof requires.
#[derive(Default)]
struct Strings {
    index: FastMap<String, i64>,
    table: Vec<String>,
}

impl Strings {
    fn id(&mut self, s: &str) -> i64 {
        if self.table.is_empty() {
            self.table.push(String::new());
            self.index.insert(String::new(), 0);
        }
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// Encodes `p` (not gzipped) into `out`; returns the bytes written. Each frame is a
/// location (id = index + 1) with one line; functions are shared by name and file.
///
/// ```
/// use leakscope::export::encode::pprof::{Frame, Profile, Sample, write};
/// let p = Profile {
///     sample_types: vec![("space".into(), "bytes".into())],
///     default_sample_type: "space".into(),
///     frames: vec![Frame { function: "f".into(), filename: "a.py".into(), line: 3 }],
///     samples: vec![Sample {
///         frames: vec![0],
///         values: vec![512],
///         labels: vec![("device".into(), 0)],
///         str_labels: vec![("role".into(), "activation".into())],
///     }],
///     comments: vec![],
/// };
/// let mut buf = Vec::new();
/// assert_eq!(write(&p, &mut buf)? as usize, buf.len());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn write(p: &Profile, mut out: impl Write) -> io::Result<u64> {
    let mut strings = Strings::default();
    strings.id("");
    let mut m = Message::with_capacity(1 << 16);
    for (t, u) in &p.sample_types {
        let mut vt = Message::default();
        vt.int(field::VT_TYPE, strings.id(t));
        vt.int(field::VT_UNIT, strings.id(u));
        m.message(field::SAMPLE_TYPE, &vt);
    }
    let mut s = Message::default();
    for sample in &p.samples {
        s.clear();
        s.packed(
            field::S_LOCATION_ID,
            sample.frames.iter().map(|&f| u64::from(f) + 1),
        );
        s.packed(field::S_VALUE, sample.values.iter().map(|&v| v as u64));
        for (k, v) in &sample.labels {
            let mut l = Message::default();
            l.int(field::L_KEY, strings.id(k));
            l.int(field::L_NUM, *v);
            s.message(field::S_LABEL, &l);
        }
        for (k, v) in &sample.str_labels {
            let mut l = Message::default();
            l.int(field::L_KEY, strings.id(k));
            l.int(field::L_STR, strings.id(v));
            s.message(field::S_LABEL, &l);
        }
        m.message(field::SAMPLE, &s);
    }
    let mut functions: FastMap<(&str, &str), u64> = FastMap::default();
    let mut fn_msgs = Message::default();
    for (i, f) in p.frames.iter().enumerate() {
        let next = functions.len() as u64 + 1;
        let fid = *functions
            .entry((f.function.as_str(), f.filename.as_str()))
            .or_insert_with(|| {
                let mut fm = Message::default();
                fm.uint(field::F_ID, next);
                let name = strings.id(&f.function);
                fm.int(field::F_NAME, name);
                fm.int(field::F_SYSTEM_NAME, name);
                fm.int(field::F_FILENAME, strings.id(&f.filename));
                fn_msgs.message(field::FUNCTION, &fm);
                next
            });
        let mut line = Message::default();
        line.uint(field::LINE_FUNCTION_ID, fid);
        line.int(field::LINE_LINE, f.line);
        let mut loc = Message::default();
        loc.uint(field::LOC_ID, i as u64 + 1);
        loc.message(field::LOC_LINE, &line);
        m.message(field::LOCATION, &loc);
    }
    let comments: Vec<i64> = p.comments.iter().map(|c| strings.id(c)).collect();
    let default = strings.id(&p.default_sample_type);
    // Functions follow locations (field order does not matter to a decoder).
    let mut tail = fn_msgs;
    for st in &strings.table {
        tail.string(field::STRING_TABLE, st);
    }
    if !comments.is_empty() {
        tail.packed(field::COMMENT, comments.iter().map(|&c| c as u64));
    }
    tail.int(field::DEFAULT_SAMPLE_TYPE, default);
    out.write_all(m.bytes())?;
    out.write_all(tail.bytes())?;
    out.flush()?;
    Ok((m.len() + tail.len()) as u64)
}
