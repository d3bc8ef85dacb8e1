//! The names people give their memory, per allocation: the `record_function` range it was
//! made in, its `user_metadata` (or the label an `annotate` event gave it), and the compiled
//! region (`compile_context`, with the FX node when the stack carries one).
//!
//! Each rule below is what `--by annotation`, `--by metadata` and `--by compile` group by,
//! and what the reports show beside a site. An allocation whose `alloc` the trace does not
//! hold (made before recording, or lost to the ring buffer) has no names: [`UNTRACED`].

use crate::model::fxhash::FastMap;
use crate::model::{
    Action, DeviceView, EventRange, Snapshot, StackId, Value, annotation_event_ranges, name_family,
};
use crate::replay::{Lifetime, Origin, Replay};

use super::site::{Site, UNTRACED};

/// An allocation made inside no `record_function` range.
pub const NO_ANNOTATION: &str = "<no annotation>";
/// An allocation whose `user_metadata` was empty and that no `annotate` event named.
pub const NO_METADATA: &str = "<no metadata>";
/// An allocation made outside compiled code (`compile_context` `N/A`, empty or absent).
pub const NOT_COMPILED: &str = "<not compiled>";

/// The names beside a site: per kind (`annotation`, `metadata`, `compile`), the family of
/// names (digit runs written `{n}`) holding most of its named bytes, written as its one
/// name when it has only one (`forward`; `micro_batch{n}` for memory made in several
/// micro-batches); kinds with no named allocation left out.
pub type Names = std::collections::BTreeMap<String, String>;

/// Which name of an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NameKind {
    /// The innermost `record_function` range open on its device when it was allocated:
    /// START time <= alloc time < END time (the first event at or after each, as windows
    /// place annotations), the latest START winning (ties: the earlier END).
    Annotation,
    /// The `user_metadata` of the latest `annotate` event naming its base address while it
    /// was live; else the `user_metadata` its `alloc` event carried.
    Metadata,
    /// Its `alloc` event's `compile_context`; with `ctx: node` when its stack has a frame
    /// with `fx_node_name` (the innermost), and that node's source line from
    /// `fx_original_trace` as the site's file and line.
    Compile,
}

impl NameKind {
    /// Every kind, in the order reports show them.
    pub const ALL: [NameKind; 3] = [NameKind::Annotation, NameKind::Metadata, NameKind::Compile];

    /// The kind's name in `--by` and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            NameKind::Annotation => "annotation",
            NameKind::Metadata => "metadata",
            NameKind::Compile => "compile",
        }
    }

    /// The label of allocations that have no name of this kind.
    pub fn none_label(self) -> &'static str {
        match self {
            NameKind::Annotation => NO_ANNOTATION,
            NameKind::Metadata => NO_METADATA,
            NameKind::Compile => NOT_COMPILED,
        }
    }
}

/// The names of one kind for every allocation of a device's replay.
#[derive(Clone, Debug, Default)]
pub struct NameMap {
    /// The distinct names, each as a site (a label, with a file and line where known).
    names: Vec<Site>,
    /// The name id of each lifetime, indexed as [`Replay::lifetimes`].
    of: Vec<u32>,
}

impl NameMap {
    /// The names, indexed by id.
    pub fn names(&self) -> &[Site] {
        &self.names
    }

    /// The name id of lifetime `i`.
    pub fn id(&self, i: usize) -> u32 {
        self.of.get(i).copied().unwrap_or(0)
    }

    /// The name of lifetime `i`.
    pub fn site(&self, i: usize) -> &Site {
        &self.names[self.id(i) as usize]
    }

    /// A map from its parts: the distinct names, and each lifetime's id into them.
    pub(crate) fn from_parts(names: Vec<Site>, of: Vec<u32>) -> NameMap {
        NameMap { names, of }
    }

    /// Whether `id` is a real name (not the kind's "none" label nor [`UNTRACED`]).
    pub fn is_named(&self, id: u32) -> bool {
        id >= FIRST_NAME
    }
}

/// Ids 0 and 1 are the "none" label and [`UNTRACED`]; names follow.
const FIRST_NAME: u32 = 2;

/// Interns sites as name ids.
struct Interner {
    sites: Vec<Site>,
    index: FastMap<Site, u32>,
}

impl Interner {
    fn new(kind: NameKind) -> Interner {
        let mut n = Interner {
            sites: Vec::new(),
            index: FastMap::default(),
        };
        n.id(Site::label_only(kind.none_label()));
        n.id(Site::label_only(UNTRACED));
        n
    }

    fn id(&mut self, site: Site) -> u32 {
        if let Some(&i) = self.index.get(&site) {
            return i;
        }
        let i = self.sites.len() as u32;
        self.sites.push(site.clone());
        self.index.insert(site, i);
        i
    }
}

/// Whether `snap` carries any name of `kind` (so reports show the names only where some
/// exist).
pub fn carries(snap: &Snapshot, kind: NameKind) -> bool {
    match kind {
        NameKind::Annotation => snap
            .external_annotations
            .as_ref()
            .is_some_and(|a| !a.is_empty()),
        NameKind::Metadata => {
            snap.metas
                .iter()
                .any(|m| m.user_metadata.as_deref().is_some_and(|s| !s.is_empty()))
                || snap
                    .device_traces
                    .iter()
                    .flatten()
                    .any(|t| t.has_action(Action::ANNOTATE))
        }
        NameKind::Compile => snap
            .metas
            .iter()
            .any(|m| m.compile_context.as_deref().is_some_and(is_compiled)),
    }
}

fn is_compiled(ctx: &str) -> bool {
    !ctx.is_empty() && ctx != "N/A"
}

/// The names of `kind` of every allocation of `replay` (made from `view`).
pub fn name_map(snap: &Snapshot, view: &DeviceView, replay: &Replay, kind: NameKind) -> NameMap {
    let mut names = Interner::new(kind);
    let of = match kind {
        NameKind::Annotation => annotation_ids(snap, view, replay, &mut names),
        NameKind::Metadata => metadata_ids(view, replay, &mut names),
        NameKind::Compile => compile_ids(snap, view, replay, &mut names),
    };
    NameMap {
        names: names.sites,
        of,
    }
}

/// The names of every kind `snap` carries, for each allocation of `replay`: what reports
/// show beside sites.
pub fn carried(snap: &Snapshot, view: &DeviceView, replay: &Replay) -> Vec<(NameKind, NameMap)> {
    NameKind::ALL
        .into_iter()
        .filter(|&k| carries(snap, k))
        .map(|k| (k, name_map(snap, view, replay, k)))
        .collect()
}

/// The names beside a group of allocations `(lifetime index, bytes)` ([`Names`]): per kind
/// of `maps`, the family with the most named bytes (ties: the first seen).
pub fn dominant(
    maps: &[(NameKind, NameMap)],
    lifes: impl Iterator<Item = (usize, u64)> + Clone,
) -> Names {
    let mut out = Names::new();
    for (kind, map) in maps {
        // Bytes per name (in order of first sight), then per family of names.
        let mut per_name: Vec<(u32, u64)> = Vec::new();
        let mut slot: FastMap<u32, usize> = FastMap::default();
        for (i, b) in lifes.clone() {
            let id = map.id(i);
            if !map.is_named(id) {
                continue;
            }
            let k = *slot.entry(id).or_insert_with(|| {
                per_name.push((id, 0));
                per_name.len() - 1
            });
            per_name[k].1 = per_name[k].1.saturating_add(b);
        }
        // Per family: its bytes and its first name, and whether it had another.
        let mut families: Vec<(String, u64, u32, bool)> = Vec::new();
        for (id, b) in per_name {
            let fam = name_family(&map.names()[id as usize].label);
            match families.iter_mut().find(|x| x.0 == fam) {
                Some(x) => {
                    x.1 = x.1.saturating_add(b);
                    x.3 = true;
                }
                None => families.push((fam, b, id, false)),
            }
        }
        let best =
            families.into_iter().fold(
                None,
                |best: Option<(String, u64, u32, bool)>, f| match &best {
                    Some(b) if b.1 >= f.1 => best,
                    _ => Some(f),
                },
            );
        if let Some((fam, _, id, several)) = best {
            let label = if several {
                fam
            } else {
                map.names()[id as usize].label.clone()
            };
            out.insert(kind.name().to_string(), label);
        }
    }
    out
}

/// The `alloc` event of a lifetime, when the trace holds it.
fn alloc_event(l: &Lifetime) -> Option<u32> {
    match l.origin {
        Origin::Traced(a) => Some(a),
        _ => None,
    }
}

const UNTRACED_ID: u32 = 1;

fn annotation_ids(
    snap: &Snapshot,
    view: &DeviceView,
    replay: &Replay,
    names: &mut Interner,
) -> Vec<u32> {
    let ranges: Vec<EventRange<'_>> = annotation_event_ranges(snap, view.device);
    let range_ids: Vec<u32> = ranges
        .iter()
        .map(|r| names.id(Site::label_only(r.name)))
        .collect();
    // Allocations in event order, swept against the ranges in start order.
    let mut order: Vec<(u32, usize)> = replay
        .lifetimes
        .iter()
        .enumerate()
        .filter_map(|(i, l)| alloc_event(l).map(|a| (a, i)))
        .collect();
    order.sort_unstable();
    let mut of = vec![UNTRACED_ID; replay.lifetimes.len()];
    let mut open: Vec<usize> = Vec::new();
    let mut next = 0;
    for (a, i) in order {
        while next < ranges.len() && ranges[next].start <= a {
            open.push(next);
            next += 1;
        }
        open.retain(|&r| ranges[r].end > a);
        // Innermost: the latest start, then the earliest end.
        of[i] = open
            .iter()
            .max_by_key(|&&r| (ranges[r].start, std::cmp::Reverse(ranges[r].end)))
            .map_or(0, |&r| range_ids[r]);
    }
    of
}

fn metadata_of<'s>(view: &DeviceView<'s>, e: u32) -> Option<&'s str> {
    let m = view.trace.meta.get(e as usize)?;
    view.metas
        .get(m.index())?
        .user_metadata
        .as_deref()
        .filter(|s| !s.is_empty())
}

fn metadata_ids(view: &DeviceView, replay: &Replay, names: &mut Interner) -> Vec<u32> {
    let mut of: Vec<u32> = replay
        .lifetimes
        .iter()
        .map(|l| match alloc_event(l) {
            None => UNTRACED_ID,
            Some(a) => metadata_of(view, a).map_or(0, |s| names.id(Site::label_only(s))),
        })
        .collect();
    let trace = view.trace;
    if !trace.has_action(Action::ANNOTATE) {
        return of;
    }
    // Each `annotate` names the allocation live at its address then; later ones win.
    let mut by_addr: FastMap<u64, Vec<usize>> = FastMap::default();
    for (i, l) in replay.lifetimes.iter().enumerate() {
        by_addr.entry(l.addr).or_default().push(i);
    }
    for (e, &action) in trace.action.iter().enumerate() {
        if action != Action::ANNOTATE {
            continue;
        }
        let e = e as u32;
        let Some(label) = metadata_of(view, e) else {
            continue;
        };
        let live = by_addr.get(&trace.addr[e as usize]).and_then(|ls| {
            ls.iter().copied().find(|&i| {
                let l = &replay.lifetimes[i];
                l.first_alive().is_none_or(|b| b <= e) && l.freed.is_none_or(|f| f > e)
            })
        });
        if let Some(i) = live {
            of[i] = names.id(Site::label_only(label));
        }
    }
    of
}

fn compile_ids(
    snap: &Snapshot,
    view: &DeviceView,
    replay: &Replay,
    names: &mut Interner,
) -> Vec<u32> {
    let mut by_key: FastMap<(Option<&str>, StackId), u32> = FastMap::default();
    replay
        .lifetimes
        .iter()
        .map(|l| {
            let Some(a) = alloc_event(l) else {
                return UNTRACED_ID;
            };
            let ctx = view
                .trace
                .meta
                .get(a as usize)
                .and_then(|m| view.metas.get(m.index()))
                .and_then(|m| m.compile_context.as_deref())
                .filter(|c| is_compiled(c));
            *by_key.entry((ctx, l.stack)).or_insert_with(|| {
                match compiled_site(snap, ctx, l.stack) {
                    Some(site) => names.id(site),
                    None => 0,
                }
            })
        })
        .collect()
}

/// The compile name of an allocation in context `ctx` with `stack`, `None` outside
/// compiled code.
fn compiled_site(snap: &Snapshot, ctx: Option<&str>, stack: StackId) -> Option<Site> {
    let fx = snap.stacks.get(stack).iter().find_map(|&f| {
        let extra = &snap.frames.get(f).extra;
        let text = |key: &str| {
            extra.iter().find_map(|(k, v)| match v {
                Value::Str(s) if k == key => Some(s.as_str()),
                _ => None,
            })
        };
        text("fx_node_name").map(|node| (node, text("fx_original_trace")))
    });
    match (ctx, fx) {
        (None, None) => None,
        (Some(ctx), None) => Some(Site::label_only(ctx)),
        (ctx, Some((node, trace))) => {
            let (filename, line) = trace.and_then(source_line).unzip();
            Some(Site {
                name: Some(node.to_string()),
                filename,
                line,
                label: format!("{}: {node}", ctx.unwrap_or("compiled")),
            })
        }
    }
}

/// The file and line of the last `File "...", line N` of a Python traceback text (the
/// model code an FX node came from).
fn source_line(trace: &str) -> Option<(String, i64)> {
    let at = trace.rfind("File \"")?;
    let rest = &trace[at + 6..];
    let (file, rest) = rest.split_once("\", line ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((file.to_string(), digits.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_line_is_the_last_file_line_of_the_trace() {
        let t = "File \"/a/train.py\", line 3, in main\n    f()\n\
                 File \"/home/u/model.py\", line 61, in forward\n    x = self.fc(x)\n";
        assert_eq!(source_line(t), Some(("/home/u/model.py".to_string(), 61)));
        assert_eq!(source_line("no traceback"), None);
        assert_eq!(source_line("File \"x.py\", line ?"), None);
    }
}
