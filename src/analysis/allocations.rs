//! Every allocation of a device on its timeline, as memory_viz's Active Memory Timeline
//! draws them: one band per allocation from the event that made it to the event that
//! freed it. A trace can hold millions; a page draws a few thousand. The largest by
//! bytes x lifetime are kept one by one, the rest are summed into one series that is
//! exact after every event (the two together are the replay's requested bytes there).

use serde::Serialize;

use crate::attribute::{Attributor, frame_label, is_python};
use crate::model::fxhash::FastMap;
use crate::model::{FrameId, StackId};
use crate::replay::{Lifetime, Replay};

/// The schema of `timeline --json` (and of the data the report's timeline draws).
pub const SCHEMA: &str = "leakscope.timeline/1";

/// Allocations drawn one by one by default. Measured on the benchmark file (two devices,
/// 320,000 allocations): 3,000 bands per device keep the page under 40 MB and a full
/// redraw under 100 ms in headless Chromium (docs/performance.md).
pub const DEFAULT_MAX_ALLOCATIONS: usize = 3000;

/// Samples of the event-to-time map (the page's time axis interpolates between them).
const TIME_SAMPLES: usize = 2048;

/// One allocation drawn on its own.
#[derive(Clone, Debug, Serialize)]
pub struct Band {
    /// Block address.
    pub address: u64,
    /// Requested bytes.
    pub bytes: u64,
    /// Its `alloc` event (`None`: made before the trace, or before the ring buffer
    /// wrapped).
    pub alloc_event: Option<u32>,
    /// The first event after which it holds memory: its `alloc`, or for an allocation the
    /// trace does not show being made, the event after the last free of its address
    /// (`None`: held before the first event).
    pub first_event: Option<u32>,
    /// The event that freed it (`None`: alive at the end).
    pub free_event: Option<u32>,
    /// `time_us` of `first_event`, where the trace records times.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alloc_time_us: Option<i64>,
    /// `time_us` of `free_event`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_time_us: Option<i64>,
    /// Its allocation stack, an index into [`DeviceAllocations::stacks`].
    pub stack: Option<u32>,
    /// The stack of the event that freed it, where frees carry stacks (`context="all"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_stack: Option<u32>,
    /// Its role (parameter, gradient, activation, ...).
    pub role: String,
    /// Its call site (as `top` names it).
    pub site: String,
    /// The names the program gave it (its `record_function` range, its `user_metadata` or
    /// the label an `annotate` event gave it, its compiled region); absent without any.
    #[serde(skip_serializing_if = "crate::attribute::names::Names::is_empty")]
    pub names: crate::attribute::names::Names,
}

/// The bytes of the allocations not drawn one by one, as a step series.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summarized {
    /// How many allocations it sums.
    pub allocations: usize,
    /// Their bytes before the first event.
    pub before_first_event: u64,
    /// Events where their sum changes, ascending.
    pub events: Vec<u32>,
    /// Their sum after each of those events, holding until the next one.
    pub bytes: Vec<u64>,
}

impl Summarized {
    /// The sum after event `i` (`None`: before the first event).
    pub fn after(&self, i: Option<u32>) -> u64 {
        match i {
            None => self.before_first_event,
            Some(i) => {
                let k = self.events.partition_point(|&e| e <= i);
                if k == 0 {
                    self.before_first_event
                } else {
                    self.bytes[k - 1]
                }
            }
        }
    }
}

/// A frame of the stacks, named as `top` names sites.
#[derive(Clone, Debug, Serialize)]
pub struct FrameRow {
    /// `file:line:function`.
    pub label: String,
    /// A Python frame (else C++ or the interpreter's own).
    pub python: bool,
}

/// Samples of the trace's clock, for a time axis: `time_us` at evenly spaced events.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TimeIndex {
    /// Event indices, ascending.
    pub events: Vec<u32>,
    /// `time_us` after each.
    pub time_us: Vec<i64>,
}

/// One device's allocations over its trace.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceAllocations {
    /// The device.
    pub device: i64,
    /// Events in its trace.
    pub events: u32,
    /// Allocations in all (drawn and summarized).
    pub allocations_total: usize,
    /// The most drawn one by one (`--max-allocations`).
    pub max_allocations: usize,
    /// The allocations drawn one by one, in the order memory_viz stacks them: held before
    /// the first event first (by address), then by the event that made them.
    pub allocations: Vec<Band>,
    /// The rest, summed.
    pub summarized: Summarized,
    /// Stacks of the drawn allocations: frame indices into `frames`, innermost first.
    pub stacks: Vec<Vec<u32>>,
    /// The frames those stacks use.
    pub frames: Vec<FrameRow>,
    /// The trace's clock (empty when it records no times).
    pub time: TimeIndex,
}

/// The events a lifetime holds memory between, within a trace of `n` events: `None`
/// when it is born after the last event.
fn span(l: &Lifetime, n: u32) -> Option<(Option<u32>, Option<u32>)> {
    let born = match l.first_alive() {
        Some(b) if b >= n => return None,
        b => b,
    };
    Some((born, l.freed.filter(|&f| f < n)))
}

/// Interns stacks and their frames for the output.
struct Stacks<'a, 's> {
    attr: &'a Attributor<'s>,
    stack_index: FastMap<StackId, u32>,
    frame_index: FastMap<FrameId, u32>,
    stacks: Vec<Vec<u32>>,
    frames: Vec<FrameRow>,
}

impl Stacks<'_, '_> {
    fn intern(&mut self, s: StackId) -> Option<u32> {
        if s == StackId::EMPTY {
            return None;
        }
        if let Some(&k) = self.stack_index.get(&s) {
            return Some(k);
        }
        let snap = self.attr.snapshot();
        let mut out = Vec::new();
        for &f in snap.stacks.get(s) {
            let k = match self.frame_index.get(&f) {
                Some(&k) => k,
                None => {
                    let fr = snap.frames.get(f);
                    let k = self.frames.len() as u32;
                    self.frames.push(FrameRow {
                        label: frame_label(snap, fr),
                        python: is_python(snap, fr),
                    });
                    self.frame_index.insert(f, k);
                    k
                }
            };
            out.push(k);
        }
        let k = self.stacks.len() as u32;
        self.stacks.push(out);
        self.stack_index.insert(s, k);
        Some(k)
    }
}

/// Which allocations a timeline draws one by one and the sum of the rest: what
/// [`describe`] needs to name them.
#[derive(Clone, Debug)]
pub struct Choice {
    /// Lifetime indices drawn one by one, in stacking order.
    pub drawn: Vec<u32>,
    /// The rest, summed.
    pub summarized: Summarized,
    /// Allocations holding memory inside the trace, drawn and summed.
    pub total: usize,
    /// The most drawn one by one.
    pub max_allocations: usize,
}

impl Choice {
    /// Whether lifetime `i` is drawn one by one (`drawn` is small: a sorted copy is
    /// searched).
    pub fn is_drawn(&self) -> impl Fn(usize) -> bool + use<> {
        let mut sorted = self.drawn.clone();
        sorted.sort_unstable();
        move |i| sorted.binary_search(&(i as u32)).is_ok()
    }
}

/// Chooses the `max_allocations` allocations of `replay` largest by bytes x lifetime (in
/// events) to draw one by one, and sums the rest after every event.
pub fn choose(replay: &Replay, max_allocations: usize) -> Choice {
    let n = replay.len() as u32;
    // Every lifetime that holds memory inside the trace, with its weight.
    let mut alive: Vec<(u128, u32)> = replay
        .lifetimes
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let (born, freed) = span(l, n)?;
            let length = u128::from(freed.map_or(n, |f| f) - born.unwrap_or(0)).max(1);
            Some((u128::from(l.bytes) * length, i as u32))
        })
        .collect();
    let total = alive.len();
    let drawn_count = max_allocations.min(total);
    if drawn_count < total {
        // The largest first; ties by lifetime index so the choice is deterministic.
        alive.select_nth_unstable_by(drawn_count, |a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    }
    let (drawn, rest) = alive.split_at_mut(drawn_count);
    // An event births and frees at most a few allocations of at most `MAX_COUNTED` bytes
    // each: an i64 per event (saturating, for crafted sizes) and the running sum in i128.
    let mut delta = vec![0i64; n as usize];
    let mut before = 0u64;
    for &(_, i) in rest.iter() {
        let l = &replay.lifetimes[i as usize];
        let Some((born, freed)) = span(l, n) else {
            continue;
        };
        match born {
            None => before += l.bytes,
            Some(b) => delta[b as usize] = delta[b as usize].saturating_add(l.bytes as i64),
        }
        if let Some(f) = freed {
            delta[f as usize] = delta[f as usize].saturating_sub(l.bytes as i64);
        }
    }
    let mut summarized = Summarized {
        allocations: rest.len(),
        before_first_event: before,
        ..Summarized::default()
    };
    let mut sum = i128::from(before);
    for (e, d) in delta.iter().enumerate() {
        if *d != 0 {
            sum += i128::from(*d);
            summarized.events.push(e as u32);
            summarized.bytes.push(sum.max(0) as u64);
        }
    }
    // The drawn ones, stacked as memory_viz stacks them.
    let mut drawn: Vec<u32> = drawn.iter().map(|&(_, i)| i).collect();
    drawn.sort_unstable_by_key(|&i| {
        let l = &replay.lifetimes[i as usize];
        (l.first_alive().map_or(0, |b| u64::from(b) + 1), l.addr, i)
    });
    Choice {
        drawn,
        summarized,
        total,
        max_allocations,
    }
}

/// Every allocation of `replay` (device `device`, trace `trace`), the `max_allocations`
/// largest by bytes x lifetime (in events) drawn one by one: [`choose`], then
/// [`describe`].
///
/// ```
/// use leakscope::analysis::allocations::Summarized;
/// let s = Summarized { allocations: 2, before_first_event: 5, events: vec![3, 7], bytes: vec![9, 4] };
/// assert_eq!((s.after(None), s.after(Some(2)), s.after(Some(3)), s.after(Some(9))), (5, 5, 9, 4));
/// ```
pub fn allocations(
    device: i64,
    trace: &crate::model::Trace,
    replay: &Replay,
    attr: &mut Attributor,
    max_allocations: usize,
) -> DeviceAllocations {
    describe(device, trace, replay, attr, choose(replay, max_allocations))
}

/// Names the allocations `choice` draws: stacks, sites and roles (`attr`'s; roles of the
/// drawn allocations are all it reads).
pub fn describe(
    device: i64,
    trace: &crate::model::Trace,
    replay: &Replay,
    attr: &mut Attributor,
    choice: Choice,
) -> DeviceAllocations {
    let n = replay.len() as u32;
    let Choice {
        drawn,
        summarized,
        total,
        max_allocations,
    } = choice;
    let has_time = trace.time_us.iter().any(|&t| t != 0);
    let time_of = |e: Option<u32>| {
        e.filter(|_| has_time)
            .and_then(|e| trace.time_us.get(e as usize).copied())
    };
    let mut interned = Stacks {
        attr,
        stack_index: FastMap::default(),
        frame_index: FastMap::default(),
        stacks: Vec::new(),
        frames: Vec::new(),
    };
    let mut bands = Vec::with_capacity(drawn.len());
    for &i in drawn.iter() {
        let l = &replay.lifetimes[i as usize];
        let (first, freed) = span(l, n).unwrap_or((None, None));
        let alloc_event = match l.origin {
            crate::replay::Origin::Traced(a) => Some(a),
            _ => None,
        };
        let free_stack = l.free_stack(trace);
        bands.push(Band {
            address: l.addr,
            bytes: l.bytes,
            alloc_event,
            first_event: first,
            free_event: freed,
            alloc_time_us: time_of(first),
            free_time_us: time_of(freed),
            stack: interned.intern(l.stack),
            free_stack: free_stack.and_then(|s| interned.intern(s)),
            role: String::new(),
            site: String::new(),
            names: Default::default(),
        });
    }
    let (stacks, frames) = (interned.stacks, interned.frames);
    for (b, &i) in bands.iter_mut().zip(drawn.iter()) {
        let l = &replay.lifetimes[i as usize];
        b.role = attr.role_name(i as usize).to_string();
        b.names = attr.names_of(std::iter::once((i as usize, l.bytes)));
        b.site = attr
            .key_of(i as usize, l)
            .map_or_else(String::new, |k| attr.site(k).label.clone());
    }
    let mut time = TimeIndex::default();
    if has_time && n > 0 {
        let step = (n as usize).div_ceil(TIME_SAMPLES).max(1);
        let mut e = 0usize;
        while e < n as usize {
            time.events.push(e as u32);
            time.time_us.push(trace.time_us[e]);
            e += step;
        }
        if time.events.last() != Some(&(n - 1)) {
            time.events.push(n - 1);
            time.time_us.push(trace.time_us[n as usize - 1]);
        }
    }
    DeviceAllocations {
        device,
        events: n,
        allocations_total: total,
        max_allocations,
        allocations: bands,
        summarized,
        stacks,
        frames,
        time,
    }
}
