//! Memory roles: what an allocation *is* (a parameter, a gradient, optimizer state, an
//! activation, a temporary, untraced memory), decided from what a snapshot holds: the
//! allocating stack, the freeing stack when recorded, the lifetime, and the phase of the
//! step each event runs in (`phase`). The rules are data ([`RULES`]), first match
//! wins, after the user's own (`[roles]` in leakscope.toml: a regex on frames -> a role
//! name). docs/roles.md explains each rule and its limits.
//!
//! ```
//! use leakscope::attribute::roles::{Role, RoleRules};
//! let rules = RoleRules::from_toml("[roles]\n'kv_cache\\.py' = 'kv_cache'\n").unwrap();
//! assert_eq!(rules.name(Role::Gradient.id()), "gradient");
//! assert_eq!(rules.id("kv_cache").map(|r| rules.name(r)), Some("kv_cache"));
//! ```

mod marks;
mod phase;
mod rules;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use regex::Regex;
use serde::Serialize;

use crate::model::{Snapshot, StackId, Trace};
use crate::replay::Replay;

pub use marks::{Mark, Marks};
pub use phase::{ANNOTATION_PHASES, Annotated, Phase, Phases, Recorded, annotation_phase};
pub use rules::{KEPT_FACTS, Kept, RULES, Rule, When};

use marks::StackMarks;

/// A built-in role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Model weights and buffers (flat parameters too).
    Parameter,
    /// Gradients: made in backward and kept past it.
    Gradient,
    /// Optimizer state kept across steps.
    OptimizerState,
    /// Made in a forward and kept past it: saved for backward, or outputs kept.
    Activation,
    /// Made and freed inside one phase.
    Temporary,
    /// Live memory no trace event explains (made before recording began).
    Untraced,
    /// What no rule decides (the rule that gave up says why).
    Unknown,
}

impl Role {
    /// Every built-in role, in the order reports list them.
    pub const ALL: [Role; 7] = [
        Role::Parameter,
        Role::Gradient,
        Role::OptimizerState,
        Role::Activation,
        Role::Temporary,
        Role::Untraced,
        Role::Unknown,
    ];

    /// The name reports and budgets use.
    pub fn name(self) -> &'static str {
        match self {
            Role::Parameter => "parameter",
            Role::Gradient => "gradient",
            Role::OptimizerState => "optimizer_state",
            Role::Activation => "activation",
            Role::Temporary => "temporary",
            Role::Untraced => "untraced",
            Role::Unknown => "unknown",
        }
    }

    /// Its id (built-in roles come first in every [`RoleRules`]).
    pub fn id(self) -> RoleId {
        RoleId(self as u8)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Role {
    type Err = ();
    fn from_str(s: &str) -> Result<Role, ()> {
        Role::ALL.into_iter().find(|r| r.name() == s).ok_or(())
    }
}

/// A role of a [`RoleRules`]: a built-in one or a user's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct RoleId(pub u8);

/// A `[roles]` table that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RolesError {
    /// Not TOML, or `[roles]` is not a table of strings.
    #[error("roles: {0}")]
    Syntax(String),
    /// A pattern that is not a regular expression.
    #[error("roles: `{pattern}` is not a regular expression: {reason}")]
    Pattern {
        /// The pattern.
        pattern: String,
        /// The regex crate's words.
        reason: String,
    },
    /// A role name that is empty or not `[a-z0-9_]`.
    #[error("roles: `{0}` is not a role name (use lower-case letters, digits and _)")]
    Name(String),
    /// More rules than a role id holds.
    #[error("roles: {0} rules; at most 200")]
    TooMany(usize),
}

/// One user rule: an allocation with a frame whose `file:line:function` matches takes
/// the role.
#[derive(Clone, Debug)]
struct UserRule {
    pattern: Regex,
    role: RoleId,
}

/// The rules a session classifies with: the user's (first) and the built-in ones, and the
/// names of every role they give.
#[derive(Clone, Debug)]
pub struct RoleRules {
    user: Vec<UserRule>,
    names: Vec<String>,
}

impl Default for RoleRules {
    fn default() -> RoleRules {
        RoleRules {
            user: Vec::new(),
            names: Role::ALL.iter().map(|r| r.name().to_string()).collect(),
        }
    }
}

impl RoleRules {
    /// The rules of a TOML text's `[roles]` table (`"regex" = "role"`, in file order);
    /// a text without the table gives the built-in rules alone.
    pub fn from_toml(text: &str) -> Result<RoleRules, RolesError> {
        let doc: toml::Table =
            toml::from_str(text).map_err(|e| RolesError::Syntax(e.to_string()))?;
        match doc.get("roles") {
            None => Ok(RoleRules::default()),
            Some(toml::Value::Table(t)) => RoleRules::from_table(t),
            Some(_) => Err(RolesError::Syntax(
                "`roles` must be a table of \"regex\" = \"role\"".into(),
            )),
        }
    }

    /// The rules of a `[roles]` table, in its order.
    pub fn from_table(table: &toml::Table) -> Result<RoleRules, RolesError> {
        let mut rules = RoleRules::default();
        if table.len() > 200 {
            return Err(RolesError::TooMany(table.len()));
        }
        for (pattern, role) in table {
            let role = role.as_str().ok_or_else(|| {
                RolesError::Syntax(format!("`{pattern}`: the role must be a string"))
            })?;
            rules.push(pattern, role)?;
        }
        Ok(rules)
    }

    /// Adds a rule after the user rules so far.
    pub fn push(&mut self, pattern: &str, role: &str) -> Result<(), RolesError> {
        let valid = !role.is_empty()
            && role
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(RolesError::Name(role.to_string()));
        }
        let pattern_re = Regex::new(pattern).map_err(|e| RolesError::Pattern {
            pattern: pattern.to_string(),
            reason: e.to_string(),
        })?;
        let id = match self.id(role) {
            Some(id) => id,
            None => {
                self.names.push(role.to_string());
                RoleId((self.names.len() - 1) as u8)
            }
        };
        self.user.push(UserRule {
            pattern: pattern_re,
            role: id,
        });
        Ok(())
    }

    /// The name of a role.
    pub fn name(&self, id: RoleId) -> &str {
        self.names
            .get(id.0 as usize)
            .map_or("unknown", String::as_str)
    }

    /// The role with this name.
    pub fn id(&self, name: &str) -> Option<RoleId> {
        self.names
            .iter()
            .position(|n| n == name)
            .map(|i| RoleId(i as u8))
    }

    /// Every role name, built-in ones first.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether the user gave rules.
    pub fn has_user_rules(&self) -> bool {
        !self.user.is_empty()
    }
}

/// A rule that decided, as reports cite it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(u8);

/// The role of every allocation of one device's replay.
#[derive(Clone, Debug)]
pub struct RoleMap {
    rules: Arc<RoleRules>,
    /// Per lifetime: the rule that decided (user rules first, then [`RULES`]).
    decided: Vec<u8>,
    /// Per lifetime: freed in a backward later than the phase it was made in.
    freed_in_backward: Vec<bool>,
    /// What the device's stacks record.
    pub recorded: Recorded,
    /// Backward passes the trace's stacks show (runs of backward events that allocate; a
    /// forward recomputed inside a backward is that backward's).
    pub backwards: usize,
    /// The first event of each phase span, ascending, and whether it is a backward's.
    span_starts: Vec<(u32, bool)>,
    /// The first event of the first forward.
    first_forward: Option<u32>,
}

impl RoleMap {
    /// Whether every one of `events` falls in the same backward span, one that follows a
    /// forward (a forward recomputed by activation checkpointing runs inside it).
    pub fn in_one_backward(&self, events: &[u32]) -> bool {
        let span = |e: u32| self.span_starts.partition_point(|&(s, _)| s <= e);
        let Some(&first) = events.first() else {
            return false;
        };
        let k = span(first);
        k > 0
            && self.span_starts[k - 1].1
            && self
                .first_forward
                .is_some_and(|f| f < self.span_starts[k - 1].0)
            && events.iter().all(|&e| span(e) == k)
    }

    /// Whether a backward span begins after event `a` and at or before event `b`.
    pub fn backward_between(&self, a: u32, b: u32) -> bool {
        let from = self.span_starts.partition_point(|&(s, _)| s <= a);
        let to = self.span_starts.partition_point(|&(s, _)| s <= b);
        self.span_starts[from..to.max(from)]
            .iter()
            .any(|&(_, backward)| backward)
    }

    /// The role of lifetime `i` of the replay.
    pub fn role(&self, i: usize) -> RoleId {
        let r = self.decided.get(i).copied().unwrap_or(u8::MAX) as usize;
        match r.checked_sub(self.rules.user.len()) {
            None => self.rules.user[r].role,
            Some(b) => RULES.get(b).map_or(Role::Unknown, |r| r.role).id(),
        }
    }

    /// The rule that decided lifetime `i`.
    pub fn rule(&self, i: usize) -> RuleId {
        RuleId(self.decided.get(i).copied().unwrap_or(u8::MAX))
    }

    /// The name of a rule (`user:PATTERN` for the user's).
    pub fn rule_name(&self, r: RuleId) -> String {
        let i = r.0 as usize;
        match i.checked_sub(self.rules.user.len()) {
            None => format!("user:{}", self.rules.user[i].pattern.as_str()),
            Some(b) => RULES.get(b).map_or("unexplained", |r| r.id).to_string(),
        }
    }

    /// Why a rule gives its role, in a line.
    pub fn rule_doc(&self, r: RuleId) -> &'static str {
        let i = r.0 as usize;
        match i.checked_sub(self.rules.user.len()) {
            None => "a frame matches a [roles] pattern",
            Some(b) => RULES.get(b).map_or("", |r| r.doc),
        }
    }

    /// Whether lifetime `i` was freed by a backward after the phase it was made in (an
    /// activation freed by its backward is in flight, never kept).
    pub fn freed_in_backward(&self, i: usize) -> bool {
        self.freed_in_backward.get(i).copied().unwrap_or(false)
    }

    /// The rules it was made with.
    pub fn rules(&self) -> &RoleRules {
        &self.rules
    }

    /// The name of a role.
    pub fn name(&self, id: RoleId) -> &str {
        self.rules.name(id)
    }
}

/// What one allocation shows the rules.
struct Facts {
    traced: bool,
    workspace: bool,
    made_by: Marks,
    freed_by: Marks,
    made_in: Phase,
    kept: [bool; KEPT_FACTS],
}

impl Facts {
    fn kept(&self, k: Kept) -> bool {
        self.kept[k as usize]
    }
}

fn applies(w: &When, f: &Facts, stacks: bool) -> bool {
    w.traced.is_none_or(|t| t == f.traced)
        && w.workspace.is_none_or(|x| x == f.workspace)
        && w.stacks.is_none_or(|s| s == stacks)
        && w.made_by.is_none_or(|m| f.made_by.has(m))
        && w.freed_by.is_none_or(|m| f.freed_by.has(m))
        && (w.made_in.is_empty() || w.made_in.contains(&f.made_in))
        && w.kept.is_none_or(|k| f.kept(k))
}

/// Fewest earlier phase spans whose memory one run of frees lets go of, for that run to
/// be a release of kept memory rather than a backward's own frees: a backward frees what
/// its own forward saved and the input received before it (two spans; three where a
/// recomputed forward is counted apart).
const BURST_PASSES: usize = 4;

/// The free events (sorted) of release bursts that a phase reading may call a backward:
/// runs of frees with no allocation between them (cut by the order of events, never by
/// their stacks) that let go of memory made in [`BURST_PASSES`] or more earlier spans.
/// Such a run is kept memory dropped at once (a list of outputs released after the
/// mini-batch, on a thread with no Python frames), whatever its frees' stacks say.
fn release_bursts(trace: &Trace, replay: &Replay, phases: &Phases) -> Vec<u32> {
    // (free event, span of the allocation) for frees read as backward.
    let mut frees: Vec<(u32, u32)> = replay
        .lifetimes
        .iter()
        .filter_map(|l| {
            let (a, f) = (l.traced_birth()?, l.freed?);
            let (ai, fi) = (a as usize, f as usize);
            (fi < trace.len() && phases.phase[fi] == Phase::Backward && ai < trace.len())
                .then(|| (f, phases.span[ai]))
        })
        .collect();
    if frees.len() < BURST_PASSES {
        return Vec::new();
    }
    frees.sort_unstable();
    // The traced births come in event order (lifetimes are by birth).
    let births: Vec<u32> = replay
        .lifetimes
        .iter()
        .filter_map(|l| l.traced_birth())
        .collect();
    let allocs_before = |e: u32| births.partition_point(|&b| b < e);
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=frees.len() {
        let cut = i == frees.len() || allocs_before(frees[i].0) != allocs_before(frees[i - 1].0);
        if !cut {
            continue;
        }
        let run = &frees[start..i];
        let mut spans: Vec<u32> = run
            .iter()
            .filter(|&&(f, s)| phases.span.get(f as usize) != Some(&s))
            .map(|&(_, s)| s)
            .collect();
        spans.sort_unstable();
        spans.dedup();
        if spans.len() >= BURST_PASSES {
            out.extend(run.iter().map(|&(f, _)| f));
        }
        start = i;
    }
    out.sort_unstable();
    out
}

/// Classifies every allocation of `replay` (a device of `snap` with trace `trace`).
pub fn classify(
    snap: &Snapshot,
    device: i64,
    trace: &Trace,
    replay: &Replay,
    rules: &Arc<RoleRules>,
) -> RoleMap {
    classify_some(snap, device, trace, replay, rules, |_| true)
}

/// [`classify`] for the lifetimes `wanted` names (by index) only; the others are left
/// `unknown` by the last rule. For a view that shows a few thousand of a replay's
/// allocations (the timeline), the phases are still read from the whole trace.
pub fn classify_some(
    snap: &Snapshot,
    device: i64,
    trace: &Trace,
    replay: &Replay,
    rules: &Arc<RoleRules>,
    wanted: impl Fn(usize) -> bool,
) -> RoleMap {
    let mut marks = StackMarks::new(snap);
    let annotated = Annotated::of(
        &crate::model::annotation_event_ranges(snap, device),
        trace.len(),
    );
    let phases = Phases::of(trace, replay, &mut marks, annotated);
    // Phases can be told apart when allocations carry stacks or annotations name them.
    let stacks = phases.recorded.alloc_stacks || phases.annotated.says_phases();
    let nuser = rules.user.len();
    // Per stack: the first user rule any of its frames matches (u8::MAX: none).
    let mut user_of: Vec<u8> = Vec::new();
    let mut user_rule = |s: StackId| -> Option<usize> {
        if nuser == 0 {
            return None;
        }
        if user_of.is_empty() {
            user_of = vec![u8::MAX - 1; snap.stacks.len()];
        }
        let slot = user_of.get(s.index()).copied().unwrap_or(u8::MAX - 1);
        let r = if slot == u8::MAX - 1 {
            let frames = snap.stacks.get(s);
            let found = rules.user.iter().position(|u| {
                frames.iter().any(|f| {
                    let label = super::site::frame_label(snap, snap.frames.get(*f));
                    u.pattern.is_match(&label)
                })
            });
            let v = found.map_or(u8::MAX, |i| i as u8);
            if let Some(x) = user_of.get_mut(s.index()) {
                *x = v;
            }
            v
        } else {
            slot
        };
        (r != u8::MAX).then_some(r as usize)
    };
    let bursts = release_bursts(trace, replay, &phases);
    let mut decided = Vec::with_capacity(replay.lifetimes.len());
    let mut freed_in_backward = Vec::with_capacity(replay.lifetimes.len());
    for (i, l) in replay.lifetimes.iter().enumerate() {
        if !wanted(i) {
            decided.push((nuser + RULES.len() - 1) as u8);
            freed_in_backward.push(false);
            continue;
        }
        let alloc = match l.origin {
            crate::replay::Origin::Traced(a) => Some(a),
            _ => None,
        };
        let in_trace = |i: u32| (i as usize) < trace.len();
        let freed = l.freed.filter(|&f| in_trace(f));
        let fib = match (alloc, freed) {
            (Some(a), Some(f)) if in_trace(a) => {
                let sf = phases.span[f as usize];
                phases.phase[f as usize] == Phase::Backward
                    && phases.span_is_pass[sf as usize]
                    && phases.span[a as usize] != sf
                    && bursts.binary_search(&f).is_err()
            }
            _ => false,
        };
        freed_in_backward.push(fib);
        if let Some(u) = user_rule(l.stack) {
            decided.push(u as u8);
            continue;
        }
        let facts = match alloc.filter(|&a| in_trace(a)) {
            None => Facts {
                traced: false,
                workspace: false,
                made_by: Marks::default(),
                freed_by: Marks::default(),
                made_in: Phase::Other,
                kept: [false; KEPT_FACTS],
            },
            Some(a) => {
                let ai = a as usize;
                let in_phase = freed.is_some_and(|f| phases.span[f as usize] == phases.span[ai]);
                let freed_by = phases
                    .recorded
                    .releaser_stack(l, trace)
                    .map_or(Marks::default(), |s| marks.of(s));
                let mut kept = [false; KEPT_FACTS];
                kept[Kept::InPhase as usize] = in_phase;
                kept[Kept::BeyondPhase as usize] = !in_phase;
                // Kept to the end is kept into whatever comes next.
                let past_next = !in_phase && (freed.is_none() || phases.phase_between(a, freed));
                kept[Kept::UntilNextPhase as usize] = !past_next;
                kept[Kept::PastNextPhase as usize] = past_next;
                kept[Kept::FreedInBackward as usize] = fib;
                kept[Kept::AcrossBackward as usize] =
                    !in_phase && phases.backward_between(a, freed);
                kept[Kept::FromStart as usize] =
                    l.freed.is_none() && phases.first_work.is_some_and(|w| a < w);
                kept[Kept::AcrossForward as usize] = !in_phase && phases.forward_between(a, freed);
                kept[Kept::OutlivedUnit as usize] = phases.annotated.outlived_unit(a, freed);
                kept[Kept::InOpenUnit as usize] =
                    freed.is_none() && phases.annotated.in_open_unit(a);
                kept[Kept::PastItsPass as usize] = !in_phase && phases.in_forward_pass(a);
                Facts {
                    traced: true,
                    workspace: phase::is_workspace(trace, ai),
                    made_by: marks.of(l.stack),
                    freed_by,
                    made_in: phases.phase[ai],
                    kept,
                }
            }
        };
        let b = RULES
            .iter()
            .position(|r| applies(&r.when, &facts, stacks))
            .unwrap_or(RULES.len() - 1);
        decided.push((nuser + b) as u8);
    }
    RoleMap {
        rules: Arc::clone(rules),
        decided,
        freed_in_backward,
        recorded: phases.recorded,
        backwards: phases.backward_passes,
        first_forward: phases.forward_starts.first().copied(),
        span_starts: phases
            .span
            .iter()
            .enumerate()
            .filter(|&(i, s)| i == 0 || phases.span[i - 1] != *s)
            .map(|(i, &s)| {
                (
                    i as u32,
                    phases.phase[i] == Phase::Backward && phases.span_is_pass[s as usize],
                )
            })
            .collect(),
    }
}
