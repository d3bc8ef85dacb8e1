//! Where windows can come from, as families of window starts: `record_function`
//! annotations (a family per name, digits aside), changes of `user_metadata`, entries into
//! each function, and the allocations of each call site (a boundary that recurs once per
//! unit of work, where no frame names one).

use super::source::WindowSource;
use regex::Regex;

use crate::attribute::{Attributor, is_python};
use crate::model::fxhash::FastMap;
use crate::model::{Action, Snapshot, StackId, StrId, TimedEvents};

/// A family of windows: where each starts, what each is called, and where they come from.
#[derive(Clone, Debug)]
pub(super) struct Family {
    /// `annotation`, `metadata`, `frame` or `site`.
    pub source: WindowSource,
    /// The annotation family or pattern, the function, the call site.
    pub detail: String,
    /// Event index of each window's start, increasing.
    pub starts: Vec<u32>,
    /// A name per window (annotations, metadata), else empty.
    pub names: Vec<String>,
    /// The `--windows` value that gives these windows.
    pub spec: String,
    /// Entries into a pipeline schedule's per-micro-batch function (`pipeline`).
    pub schedule: bool,
}

impl Family {
    fn new(source: WindowSource, detail: String, starts: Vec<u32>) -> Family {
        Family {
            source,
            spec: format!("{source}:{detail}"),
            detail,
            starts,
            names: Vec::new(),
            schedule: false,
        }
    }

    /// The same windows, marked as a pipeline schedule's micro-batches (`spec` asks for
    /// them again).
    pub(super) fn of_schedule(mut self, spec: &str) -> Family {
        self.schedule = true;
        self.spec = spec.to_string();
        self
    }

    fn with_spec(mut self, spec: String) -> Family {
        self.spec = spec;
        self
    }
}

/// Event spans `[START, END)` of the annotations matching `re` on `device` (a START with
/// no END runs to the end of the trace).
pub fn annotation_spans(snap: &Snapshot, device: i64, re: &Regex) -> Vec<(u32, u32)> {
    let mut spans = crate::model::annotation_event_ranges(snap, device)
        .into_iter()
        .filter(|r| re.is_match(r.name))
        .map(|r| (r.start, r.end))
        .collect::<Vec<_>>();
    spans.sort_unstable();
    spans
}

/// A pattern for the names of an annotation family: `micro_batch3` gives
/// `^micro_batch\d+$`.
fn name_pattern(name: &str) -> String {
    let mut out = String::from("^");
    let mut digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !digits {
                out.push_str("\\d+");
            }
            digits = true;
        } else {
            digits = false;
            out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4])));
        }
    }
    out.push('$');
    out
}

/// Strips digits so `micro_batch12` and `micro_batch3` fall in one family.
fn family(name: &str) -> String {
    name.chars().filter(|c| !c.is_ascii_digit()).collect()
}

/// Annotation families: with `pattern`, the one family of the STARTs matching it; else a
/// family per name with its digits stripped. Each START maps to the first timed event at
/// or after its time.
pub(super) fn annotation_families(
    snap: &Snapshot,
    device: i64,
    pattern: Option<&Regex>,
) -> Vec<Family> {
    let trace = snap.trace(device);
    let Some(anns) = snap.external_annotations.as_ref() else {
        return Vec::new();
    };
    let timed = TimedEvents::of(trace, &snap.metas);
    let mut by_family: Vec<(String, Vec<(u32, String)>)> = Vec::new();
    for a in anns {
        let (Some(name), Some(t), Some("START")) =
            (a.name.as_deref(), a.time_us, a.stage.as_deref())
        else {
            continue;
        };
        if a.device.is_some_and(|d| d != device) || pattern.is_some_and(|re| !re.is_match(name)) {
            continue;
        }
        let Some(ev) = timed.at_or_after(t) else {
            continue;
        };
        let key = match pattern {
            Some(re) => re.as_str().to_string(),
            None => family(name),
        };
        let slot = match by_family.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                by_family.push((key, Vec::new()));
                by_family.len() - 1
            }
        };
        let ws = &mut by_family[slot].1;
        if ws.last().is_none_or(|(s, _)| *s < ev) {
            ws.push((ev, name.to_string()));
        }
    }
    by_family
        .into_iter()
        .filter(|(_, ws)| !ws.is_empty())
        .map(|(detail, ws)| Family {
            source: WindowSource::Annotation,
            spec: match pattern {
                Some(re) => format!("annotation:{}", re.as_str()),
                None => format!("annotation:{}", name_pattern(&ws[0].1)),
            },
            detail,
            starts: ws.iter().map(|w| w.0).collect(),
            names: ws.into_iter().map(|w| w.1).collect(),
            schedule: false,
        })
        .collect()
}

/// A window per change of `user_metadata` (at least two).
pub(super) fn metadata_family(snap: &Snapshot, device: i64) -> Option<Family> {
    let trace = snap.trace(device);
    let mut starts = Vec::new();
    let mut names = Vec::new();
    let mut last: Option<&str> = None;
    for i in 0..trace.len() {
        let um = snap.meta(trace.meta[i]).user_metadata.as_deref();
        if let Some(u) = um
            && !u.is_empty()
            && last != Some(u)
        {
            starts.push(i as u32);
            names.push(u.to_string());
        }
        if um.is_some_and(|u| !u.is_empty()) {
            last = um;
        }
    }
    (starts.len() >= 2).then(|| Family {
        source: WindowSource::Metadata,
        detail: "user_metadata".into(),
        spec: "metadata".into(),
        starts,
        names,
        schedule: false,
    })
}

/// Entries into functions: for each Python function (of the filtered stacks), the
/// allocations whose stack has it while the previous allocation's did not.
fn entries(
    snap: &Snapshot,
    device: i64,
    attr: &Attributor,
    only: Option<&Regex>,
) -> FastMap<u32, Vec<u32>> {
    let trace = snap.trace(device);
    // Functions get dense indices and each stack's functions (distinct indices) are worked
    // out once, into a flat pool indexed by stack id: the loop over the events hashes
    // nothing.
    let mut names: Vec<u32> = Vec::new();
    let mut index_of: FastMap<u32, u32> = FastMap::default();
    let mut funcs: Vec<u32> = Vec::new();
    let mut of_stack: Vec<Option<(u32, u32)>> = vec![None; snap.stacks.len()];
    let mut out: Vec<Vec<u32>> = Vec::new();
    let mut stack_funcs = |s: StackId, funcs: &mut Vec<u32>| -> (u32, u32) {
        if let Some(r) = of_stack.get(s.0 as usize).copied().flatten() {
            return r;
        }
        let mut v: Vec<u32> = attr
            .filtered(s)
            .into_iter()
            .filter(|f| is_python(snap, snap.frames.get(*f)))
            .map(|f| snap.frames.get(f).name.0)
            .filter(|&n| only.is_none_or(|r| r.is_match(snap.strings.get(StrId(n)))))
            .map(|n| {
                *index_of.entry(n).or_insert_with(|| {
                    names.push(n);
                    (names.len() - 1) as u32
                })
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        let r = (funcs.len() as u32, (funcs.len() + v.len()) as u32);
        funcs.extend(v);
        if let Some(slot) = of_stack.get_mut(s.0 as usize) {
            *slot = Some(r);
        }
        r
    };
    // `last[f]` is the number of the last allocation (counting only those whose stack
    // differs from the one before) whose stack has function `f`: `f` is entered where
    // that is not the allocation just before. One look per function of the new stack,
    // none at the old one's.
    let mut last: Vec<u64> = Vec::new();
    let mut prev: Option<StackId> = None;
    // Numbers start at 2, so 0 (never) is not the one before the first.
    let mut k: u64 = 1;
    for i in 0..trace.len() {
        let s = trace.stack[i];
        if trace.action[i] != Action::ALLOC || prev == Some(s) {
            continue;
        }
        k += 1;
        let (from, to) = stack_funcs(s, &mut funcs);
        for &f in &funcs[from as usize..to as usize] {
            if last.len() <= f as usize {
                last.resize(f as usize + 1, 0);
            }
            let seen = std::mem::replace(&mut last[f as usize], k);
            if seen + 1 != k {
                if out.len() <= f as usize {
                    out.resize_with(f as usize + 1, Vec::new);
                }
                out[f as usize].push(i as u32);
            }
        }
        prev = Some(s);
    }
    out.into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(f, v)| (names[f], v))
        .collect()
}

/// `frame:REGEX`: a window starts at each entry into a function matching the pattern.
pub(super) fn frame_family(snap: &Snapshot, device: i64, attr: &Attributor, re: &Regex) -> Family {
    let mut starts: Vec<u32> = entries(snap, device, attr, Some(re))
        .into_values()
        .flatten()
        .collect();
    starts.sort_unstable();
    starts.dedup();
    Family::new(WindowSource::Frame, re.as_str().to_string(), starts)
}

/// A family per Python function: its entries.
pub(super) fn function_families(snap: &Snapshot, device: i64, attr: &Attributor) -> Vec<Family> {
    let mut out: Vec<Family> = entries(snap, device, attr, None)
        .into_iter()
        .map(|(name, starts)| {
            let name = snap.strings.get(StrId(name));
            Family::new(
                WindowSource::Frame,
                format!("^{}$", regex::escape(name)),
                starts,
            )
        })
        .collect();
    out.sort_by(|a, b| a.detail.cmp(&b.detail));
    out
}

/// A family per call stack: each of its allocations starts a window. A unit of work
/// begins with the same allocation every time (the first activation, the received input,
/// the step's first buffer), also where no Python frame is entered there (compiled graphs,
/// C++ stacks). A stack is its Python frames (all frames where it has none), written
/// innermost first as `file:line:function < caller < ...`; a family's detail is the
/// shortest such prefix that no other stack shares, so `site:DETAIL` reproduces it.
pub(super) fn site_families(snap: &Snapshot, device: i64) -> Vec<Family> {
    let (chains, starts) = site_starts(snap, device, None);
    let mut names = site_names(&chains);
    let mut out: Vec<Family> = starts
        .into_iter()
        .enumerate()
        .map(|(c, starts)| {
            let (name, pattern) = std::mem::take(&mut names[c]);
            Family::new(WindowSource::Site, name, starts).with_spec(format!("site:{pattern}"))
        })
        .collect();
    out.sort_by(|a, b| a.detail.cmp(&b.detail));
    out
}

/// `site:REGEX`: a window starts at each allocation whose call stack (written as
/// [`site_families`] does) matches the pattern.
pub(super) fn site_family(snap: &Snapshot, device: i64, re: &Regex) -> Family {
    let mut starts: Vec<u32> = site_starts(snap, device, Some(re))
        .1
        .into_iter()
        .flatten()
        .collect();
    starts.sort_unstable();
    Family::new(WindowSource::Site, re.as_str().to_string(), starts)
}

/// Separates a stack's frames, innermost first.
const CALLER: &str = " < ";

/// The distinct stacks (frame labels, innermost first) and, by index into them, the
/// allocations of each.
type StacksAndStarts = (Vec<Vec<String>>, Vec<Vec<u32>>);

/// The distinct stacks of the allocations and the allocations of each (only stacks
/// matching `only`, if given), in order.
fn site_starts(snap: &Snapshot, device: i64, only: Option<&Regex>) -> StacksAndStarts {
    // Each stack id's distinct stack, worked out on its first allocation; the loop over
    // the events then indexes rather than hashes.
    const UNSEEN: u32 = u32::MAX;
    const SKIPPED: u32 = u32::MAX - 1;
    let trace = snap.trace(device);
    let mut labels = Labels::new(snap);
    let mut chains: Vec<Vec<u32>> = Vec::new();
    let mut chain_ids: FastMap<Vec<u32>, usize> = FastMap::default();
    let mut of_stack: Vec<u32> = vec![UNSEEN; snap.stacks.len()];
    let mut out: Vec<Vec<u32>> = Vec::new();
    for i in 0..trace.len() {
        let s = trace.stack[i];
        if trace.action[i] != Action::ALLOC || s == StackId::EMPTY {
            continue;
        }
        let Some(slot) = of_stack.get_mut(s.0 as usize) else {
            continue; // not in the stack table: no frames to name it by
        };
        if *slot == UNSEEN {
            let chain = labels.chain(s);
            *slot = if chain.is_empty()
                || only.is_some_and(|re| !re.is_match(&labels.joined(&chain)))
            {
                SKIPPED
            } else {
                let next = chains.len();
                let id = *chain_ids.entry(chain.clone()).or_insert(next);
                if id == next {
                    chains.push(chain);
                    out.push(Vec::new());
                }
                id as u32
            };
        }
        if *slot != SKIPPED {
            out[*slot as usize].push(i as u32);
        }
    }
    let chains = chains
        .iter()
        .map(|c| c.iter().map(|&l| labels.text[l as usize].clone()).collect())
        .collect();
    (chains, out)
}

/// Frame labels (`file:line:function`), each written once and known by a number, so
/// stacks compare and hash as lists of numbers (frames with the same label share one).
struct Labels<'s> {
    snap: &'s Snapshot,
    /// Label number of each frame id (`u32::MAX`: not yet written).
    of_frame: Vec<u32>,
    numbers: FastMap<String, u32>,
    text: Vec<String>,
}

impl<'s> Labels<'s> {
    fn new(snap: &'s Snapshot) -> Self {
        Labels {
            snap,
            of_frame: vec![u32::MAX; snap.frames.len()],
            numbers: FastMap::default(),
            text: Vec::new(),
        }
    }

    fn number(&mut self, f: crate::model::FrameId) -> u32 {
        if let Some(&n) = self.of_frame.get(f.index())
            && n != u32::MAX
        {
            return n;
        }
        let label = crate::attribute::frame_label(self.snap, self.snap.frames.get(f));
        let n = match self.numbers.get(&label) {
            Some(&n) => n,
            None => {
                let n = self.text.len() as u32;
                self.numbers.insert(label.clone(), n);
                self.text.push(label);
                n
            }
        };
        if let Some(slot) = self.of_frame.get_mut(f.index()) {
            *slot = n;
        }
        n
    }

    /// A stack's frame labels, innermost first: its Python frames, else all.
    fn chain(&mut self, s: StackId) -> Vec<u32> {
        let snap = self.snap;
        let frames = snap.stacks.get(s);
        let python: Vec<u32> = frames
            .iter()
            .filter(|&&f| is_python(snap, snap.frames.get(f)))
            .map(|&f| self.number(f))
            .collect();
        if !python.is_empty() {
            return python;
        }
        frames.iter().map(|&f| self.number(f)).collect()
    }

    /// A chain written as `--windows site:` patterns match it.
    fn joined(&self, chain: &[u32]) -> String {
        chain
            .iter()
            .map(|&l| self.text[l as usize].as_str())
            .collect::<Vec<_>>()
            .join(CALLER)
    }
}

/// The name and the `site:` pattern of each stack: its innermost frame, and where other
/// stacks share that, the first caller that tells it apart ("A via B"); each pattern
/// matches its stack and no other of `chains`.
fn site_names(chains: &[Vec<String>]) -> Vec<(String, String)> {
    // Sorted, a stack shares the longest prefix with a neighbour, and stacks with the same
    // innermost frame sit together.
    let mut order: Vec<usize> = (0..chains.len()).collect();
    order.sort_by(|&a, &b| chains[a].cmp(&chains[b]));
    let lcp = |a: usize, b: usize| {
        chains[a]
            .iter()
            .zip(&chains[b])
            .take_while(|(x, y)| x == y)
            .count()
    };
    let mut out = vec![(String::new(), String::new()); chains.len()];
    let mut g = 0;
    while g < order.len() {
        let first = &chains[order[g]][0];
        let group_end = g + order[g..]
            .iter()
            .take_while(|&&k| chains[k][0] == *first)
            .count();
        let group = &order[g..group_end];
        for (p, &c) in group.iter().enumerate() {
            let shared = [p.checked_sub(1), Some(p + 1)]
                .into_iter()
                .flatten()
                .filter_map(|q| group.get(q))
                .map(|&o| lcp(c, o))
                .max()
                .unwrap_or(0);
            let d = (shared + 1).min(chains[c].len());
            out[c] = site_name(chains, c, d, group);
        }
        g = group_end;
    }
    out
}

/// Name and pattern of stack `c` told apart by its first `d` frames from the others of
/// `group` (the stacks with its innermost frame).
fn site_name(chains: &[Vec<String>], c: usize, d: usize, group: &[usize]) -> (String, String) {
    let me = &chains[c];
    let tail = if d == me.len() { "$" } else { CALLER };
    let esc = |l: &String| regex::escape(l);
    let inner = esc(&me[0]);
    if d == 1 {
        return (me[0].clone(), format!("^{inner}{tail}"));
    }
    let name = format!("{} via {}", me[0], me[d - 1]);
    // Innermost frame and the telling caller, anything between, where that is exact.
    // It matches another stack of the group when that one has the caller below its
    // innermost frame: as its outermost frame if the pattern ends there, else with more.
    let caller = &me[d - 1];
    let also = |o: &Vec<String>| {
        o.iter().enumerate().skip(1).any(|(j, l)| {
            l == caller
                && (if d == me.len() {
                    j + 1 == o.len()
                } else {
                    j + 1 < o.len()
                })
        })
    };
    if !group.iter().any(|&o| o != c && also(&chains[o])) {
        let short = format!("^{inner}{CALLER}(.*{CALLER})?{}{tail}", esc(caller));
        return (name, short);
    }
    let full: Vec<String> = me[..d].iter().map(esc).collect();
    (name, format!("^{}{tail}", full.join(CALLER)))
}
