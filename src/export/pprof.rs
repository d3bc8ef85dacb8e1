//! `export --pprof`: one file's memory by allocation stack as a gzipped pprof profile.
//! By default the live bytes and allocations at a point (`--at`, the end unless said);
//! with `--growth` the leak finder's survivors instead: per stack, the bytes that outlived
//! their window, averaged over the windows (a "what leaks" profile), and in how many
//! windows the stack grew. Each device's samples carry a `device` label, and every sample
//! a `role` label (string): the memory role of its allocations, a stack's allocations of
//! different roles being samples of their own.

use std::path::Path;

use serde::Serialize;

use super::roles::role_name;
use super::{ExportError, ExportOptions};
use crate::analysis::leaks::survivors_by_stack;
use crate::analysis::point::At;
use crate::attribute::{NO_FRAME, UNTRACED};
use crate::export::encode::pprof::{self, Frame, Profile, Sample};
use crate::load::LoadOptions;
use crate::model::fxhash::FastMap;
use crate::model::{FrameId, Snapshot, StackId};
use crate::session::{Session, SessionError};

/// Schema of [`PprofSummary`]'s JSON.
pub const SCHEMA: &str = "leakscope.export.pprof/1";

/// What the profile shows.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct PprofOptions {
    /// Loading and analysis options (device selection, windows, filters).
    pub export: ExportOptions,
    /// The point of the live profile.
    pub at: At,
    /// Survivors per window instead of live bytes.
    pub growth: bool,
}

/// What was written (`leakscope.export.pprof/1`).
#[derive(Clone, Debug, Serialize)]
pub struct PprofSummary {
    /// Schema name.
    pub schema: &'static str,
    /// The profile file.
    pub out: String,
    /// The snapshot.
    pub file: String,
    /// `live` or `growth`.
    pub profile: &'static str,
    /// The sample types, as `type/unit`.
    pub sample_types: Vec<String>,
    /// Devices in the profile.
    pub devices: Vec<i64>,
    /// Devices left out, and why (the point does not exist there, no windows to judge).
    pub left_out: Vec<String>,
    /// Samples (stacks × devices).
    pub samples: u64,
    /// Σ of the first value over the samples (live bytes, or survivor bytes per window).
    pub total: u64,
    /// Size of the gzipped file.
    pub file_bytes: u64,
}

/// Frames of the profile, each snapshot frame once.
#[derive(Default)]
struct Frames {
    index: FastMap<FrameId, u32>,
    /// The location standing for a stack with no frame, by what it is.
    pseudo: FastMap<&'static str, u32>,
    frames: Vec<Frame>,
}

impl Frames {
    /// The frames of `stack`, leaf first; a stack with no frame gets one location named
    /// for what its memory is (`empty`: untraced, or no Python frame), so every sample
    /// has a location and viewers' totals are the file's.
    fn stack(&mut self, snap: &Snapshot, stack: StackId, empty: &'static str) -> Vec<u32> {
        let ids = snap.stacks.get(stack);
        if ids.is_empty() {
            let at = *self.pseudo.entry(empty).or_insert_with(|| {
                self.frames.push(Frame {
                    function: empty.to_string(),
                    filename: String::new(),
                    line: 0,
                });
                (self.frames.len() - 1) as u32
            });
            return vec![at];
        }
        ids.iter()
            .map(|&f| {
                *self.index.entry(f).or_insert_with(|| {
                    let fr = snap.frames.get(f);
                    self.frames.push(Frame {
                        function: snap.strings.get(fr.name).to_string(),
                        filename: snap.strings.get(fr.filename).to_string(),
                        line: fr.line.known().filter(|&l| l > 0).unwrap_or(0),
                    });
                    (self.frames.len() - 1) as u32
                })
            })
            .collect()
    }
}

/// Writes the profile of `file` to `out` (gzipped).
///
/// ```
/// use leakscope::export::{PprofOptions, export_pprof};
/// let out = std::env::temp_dir().join(format!("leakscope-doc-{}.pb.gz", std::process::id()));
/// let f = "fixtures/scenarios/pp_last_stage_recv_pinned.pickle";
/// let written = export_pprof(f.as_ref(), &out, &PprofOptions::default())?;
/// assert_eq!(written.profile, "live");
/// assert!(written.total > 0);
/// # std::fs::remove_file(&out).ok();
/// # Ok::<(), leakscope::export::ExportError>(())
/// ```
pub fn export_pprof(
    file: &Path,
    out: &Path,
    opts: &PprofOptions,
) -> Result<PprofSummary, ExportError> {
    let lo = LoadOptions {
        max_decompressed_bytes: opts.export.max_decompressed_bytes,
        ..LoadOptions::default()
    };
    let inputs = crate::files::Inputs::of([file]);
    inputs.check_output(out)?;
    let s = Session::open(file, lo)?;
    let (profile, devices, left_out) = s.profile_parts(opts)?;
    let io = |source| ExportError::Io {
        path: out.to_path_buf(),
        source,
    };
    let mut gz = flate2::write::GzEncoder::new(inputs.create(out)?, flate2::Compression::new(6));
    pprof::write(&profile, &mut gz).map_err(io)?;
    let file_bytes = gz.finish().map_err(io)?.commit()?;
    Ok(PprofSummary {
        schema: SCHEMA,
        out: out.display().to_string(),
        file: s.name().to_string(),
        profile: if opts.growth { "growth" } else { "live" },
        sample_types: profile
            .sample_types
            .iter()
            .map(|(t, u)| format!("{t}/{u}"))
            .collect(),
        devices,
        left_out,
        samples: profile.samples.len() as u64,
        total: profile
            .samples
            .iter()
            .map(|s| s.values[0].max(0) as u64)
            .sum(),
        file_bytes,
    })
}

type Built = (Profile, Vec<i64>, Vec<String>);

impl Session {
    /// This snapshot's profile (live bytes at `opts.at`, or survivors per window with
    /// `opts.growth`), for [`pprof::write`]: in memory, without files.
    ///
    /// ```
    /// use leakscope::export::PprofOptions;
    /// use leakscope::session::Session;
    /// let s = Session::open("fixtures/scenarios/two_devices_recv_leak.pickle", Default::default())?;
    /// let p = s.pprof(&PprofOptions::default())?;
    /// assert_eq!(p.sample_types[0], ("space".to_string(), "bytes".to_string()));
    /// # Ok::<(), leakscope::session::SessionError>(())
    /// ```
    pub fn pprof(&self, opts: &PprofOptions) -> Result<Profile, SessionError> {
        Ok(self.profile_parts(opts)?.0)
    }

    fn profile_parts(&self, opts: &PprofOptions) -> Result<Built, SessionError> {
        if opts.growth {
            growth_profile(self, &opts.export)
        } else {
            live_profile(self, &opts.export, opts.at)
        }
    }
}

fn device_label(d: i64) -> Vec<(String, i64)> {
    vec![("device".to_string(), d)]
}

fn role_label(role: &str) -> Vec<(String, String)> {
    vec![("role".to_string(), role.to_string())]
}

/// Live bytes and allocations by stack at `at` on every selected device where it exists.
fn live_profile(s: &Session, opts: &ExportOptions, at: At) -> Result<Built, SessionError> {
    let mut runs = s.runs(&opts.analysis)?;
    let (points, unresolved) = s.points(&runs, at)?;
    let snap = s.snapshot();
    let mut frames = Frames::default();
    let mut samples = Vec::new();
    let mut devices = Vec::new();
    for (r, p) in runs.iter_mut().zip(points) {
        let Some(p) = p else { continue };
        devices.push(r.device());
        // Keyed by stack, role and whether it predates the trace (untraced).
        let mut by_stack: FastMap<(StackId, u8, bool), (u64, u64)> = FastMap::default();
        for i in r.replay.live_indices(p.event_index) {
            let l = &r.replay.lifetimes[i];
            if r.attr.key(l.stack).is_none() {
                continue;
            }
            let key = (l.stack, r.attr.role(i).0, l.before_trace());
            let e = by_stack.entry(key).or_default();
            e.0 = e.0.saturating_add(l.bytes);
            e.1 += 1;
        }
        let mut stacks: Vec<_> = by_stack.into_iter().collect();
        stacks.sort_unstable_by_key(|(k, _)| *k);
        for ((st, role, before), (bytes, count)) in stacks {
            let empty = if before { UNTRACED } else { NO_FRAME };
            samples.push(Sample {
                frames: frames.stack(snap, st, empty),
                values: vec![bytes.min(i64::MAX as u64) as i64, count as i64],
                labels: device_label(r.device()),
                str_labels: role_label(role_name(&r.attr, role)),
            });
        }
    }
    let profile = Profile {
        sample_types: vec![
            ("space".into(), "bytes".into()),
            ("objects".into(), "count".into()),
        ],
        default_sample_type: "space".into(),
        frames: frames.frames,
        samples,
        comments: vec![
            format!("leakscope: live (requested) bytes by allocation stack at {at:?}"),
            format!("file: {}", s.name()),
        ],
    };
    let left = unresolved
        .into_iter()
        .map(|u| format!("device {}: {}", u.device, u.reason))
        .collect();
    Ok((profile, devices, left))
}

/// Survivor bytes per window and windows grown, by stack, on every selected device with
/// windows to judge.
fn growth_profile(s: &Session, opts: &ExportOptions) -> Result<Built, SessionError> {
    let mut runs = s.runs(&opts.analysis)?;
    s.cut_windows(&mut runs, &opts.analysis)?;
    let snap = s.snapshot();
    let mut frames = Frames::default();
    let mut samples = Vec::new();
    let mut devices = Vec::new();
    let mut left = Vec::new();
    for r in &mut runs {
        let (replay, windows, attr) = r.parts();
        if !windows.verdicts || windows.is_empty() {
            left.push(format!(
                "device {}: no windows to judge growth across ({}); name them with --windows",
                replay.device, windows.reason
            ));
            continue;
        }
        let n = windows.len() as u64;
        devices.push(replay.device);
        for sv in survivors_by_stack(replay, windows, attr) {
            // Mean over the windows, rounded to the nearest byte.
            let per_window = ((u128::from(sv.bytes) + u128::from(n / 2)) / u128::from(n))
                .min(i64::MAX as u128) as u64;
            samples.push(Sample {
                frames: frames.stack(snap, sv.stack, NO_FRAME),
                values: vec![per_window as i64, sv.windows as i64],
                labels: device_label(replay.device),
                str_labels: role_label(role_name(attr, sv.role.0)),
            });
        }
    }
    if devices.is_empty() {
        if left.is_empty() {
            left.push("the file has no device with trace events".to_string());
        }
        return Err(SessionError::NoWindows {
            file: s.name().to_string(),
            reasons: left,
        });
    }
    let profile = Profile {
        sample_types: vec![
            ("survivors".into(), "bytes".into()),
            ("windows_grown".into(), "count".into()),
        ],
        default_sample_type: "survivors".into(),
        frames: frames.frames,
        samples,
        comments: vec![
            "leakscope: survivor bytes per window by allocation stack (bytes allocated in a \
             window and still alive at the end of the next, averaged over the windows)"
                .into(),
            format!("file: {}", s.name()),
        ],
    };
    Ok((profile, devices, left))
}
