//! The gate of `leakscope check`: a compiled budget applied to one device's findings. Every limit
//! becomes a case that passes or fails with its numbers and, for growth, the site and its
//! stack; words are the output's business.

use serde::{Serialize, Serializer};

use super::Budget;
use crate::analysis::leaks::{DeviceLeaks, Growth, Kind};
use crate::analysis::top::DeviceTop;
use crate::attribute::Site;

/// What one device measured.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Measured {
    /// Largest suspect rate.
    pub max_bytes_per_window: u64,
    /// The site with it.
    pub max_site: Option<Site>,
    /// The most bytes requested at any point.
    pub peak_requested: u64,
    /// The most bytes reserved at any point.
    pub peak_reserved: u64,
    /// Σ sizes of the blocks allocated at the end (pending frees excluded).
    pub end_allocated: u64,
    /// Reserved at the end.
    pub end_reserved: u64,
    /// The most bytes of each role live at any point.
    #[serde(default)]
    pub peak_requested_by_role: Vec<crate::analysis::top::RoleBytes>,
}

/// A measure a `[memory]` limit names (apart from roles).
#[derive(Clone, Copy, Debug)]
pub struct MemoryMeasure {
    /// Its name in a budget and in Python's `assert_memory_below`.
    pub name: &'static str,
    /// What it measures, in words.
    pub meaning: &'static str,
    /// Its figure.
    pub of: fn(&Measured) -> u64,
}

/// Every memory measure, each said once: name, meaning and figure.
pub const MEMORY_MEASURES: [MemoryMeasure; 4] = [
    MemoryMeasure {
        name: "peak_requested",
        meaning: "the most bytes requested at any point",
        of: |m| m.peak_requested,
    },
    MemoryMeasure {
        name: "peak_reserved",
        meaning: "the most bytes reserved at any point",
        of: |m| m.peak_reserved,
    },
    MemoryMeasure {
        name: "end_allocated",
        meaning: "the bytes allocated at the end, pending frees left out",
        of: |m| m.end_allocated,
    },
    MemoryMeasure {
        name: "end_reserved",
        meaning: "the bytes reserved at the end",
        of: |m| m.end_reserved,
    },
];

/// The memory measure named `name`.
pub fn memory_measure(name: &str) -> Option<&'static MemoryMeasure> {
    MEMORY_MEASURES.iter().find(|m| m.name == name)
}

/// What one device's memory measured, apart from growth.
#[derive(Clone, Debug, Default)]
pub struct MemoryFigures {
    /// The most bytes requested at any point.
    pub peak_requested: u64,
    /// The most bytes reserved at any point.
    pub peak_reserved: u64,
    /// Σ sizes of the blocks allocated at the end.
    pub end_allocated: u64,
    /// Reserved at the end.
    pub end_reserved: u64,
    /// The most bytes of each role live at any point.
    pub peak_requested_by_role: Vec<crate::analysis::top::RoleBytes>,
}

/// Measures one device's leak report and memory.
pub fn measure(leaks: &DeviceLeaks, m: MemoryFigures) -> Measured {
    // Suspects come largest rate first (ties by site), so the first is the one to name.
    let top = leaks.suspects.first();
    Measured {
        max_bytes_per_window: top.map_or(0, |g| g.bytes_per_window),
        max_site: top.map(|g| g.site.clone()),
        peak_requested: m.peak_requested,
        peak_reserved: m.peak_reserved,
        end_allocated: m.end_allocated,
        end_reserved: m.end_reserved,
        peak_requested_by_role: m.peak_requested_by_role,
    }
}

/// Which limit a case checks.
#[derive(Clone, Debug, PartialEq)]
pub enum Limit {
    /// `leaks.max_bytes_per_window`.
    MaxBytesPerWindow,
    /// `leaks.forbidden_sites[PATTERN]`.
    ForbiddenSite(String),
    /// `growth.max_reserved_bytes_per_window`.
    MaxReservedBytesPerWindow,
    /// `memory.peak_requested`.
    PeakRequested,
    /// `memory.peak_requested.ROLE`.
    PeakRequestedRole(String),
    /// `memory.peak_reserved`.
    PeakReserved,
    /// `memory.end_allocated`.
    EndAllocated,
    /// `memory.end_reserved`.
    EndReserved,
    /// `sites[PATTERN].max_bytes_per_window`.
    SiteBytesPerWindow(String),
    /// `sites[PATTERN].max_end_bytes`.
    SiteEndBytes(String),
    /// `baseline.max_bytes_per_window`, `baseline.peak_requested`, `baseline.end_allocated`.
    Baseline(&'static str),
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::MaxBytesPerWindow => f.write_str("leaks.max_bytes_per_window"),
            Limit::ForbiddenSite(p) => write!(f, "leaks.forbidden_sites[{p}]"),
            Limit::MaxReservedBytesPerWindow => f.write_str("growth.max_reserved_bytes_per_window"),
            Limit::PeakRequested => f.write_str("memory.peak_requested"),
            Limit::PeakRequestedRole(r) => write!(f, "memory.peak_requested.{r}"),
            Limit::PeakReserved => f.write_str("memory.peak_reserved"),
            Limit::EndAllocated => f.write_str("memory.end_allocated"),
            Limit::EndReserved => f.write_str("memory.end_reserved"),
            Limit::SiteBytesPerWindow(p) => write!(f, "sites[{p}].max_bytes_per_window"),
            Limit::SiteEndBytes(p) => write!(f, "sites[{p}].max_end_bytes"),
            Limit::Baseline(what) => write!(f, "baseline.{what}"),
        }
    }
}

impl Serialize for Limit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One limit checked.
#[derive(Clone, Debug, Serialize)]
pub struct Case {
    /// The limit, as the budget names it.
    pub name: Limit,
    /// Measured value (bytes).
    pub value: u64,
    /// The limit (bytes).
    pub limit: u64,
    /// Whether it holds.
    pub passed: bool,
    /// The site the value comes from, for growth limits.
    pub site: Option<Site>,
    /// Its kind, for growth limits.
    pub kind: Option<Kind>,
    /// Its stack, innermost first (at most eight frames), for failed growth limits.
    pub stack: Vec<String>,
    /// The baseline's value, for baseline limits.
    pub baseline: Option<u64>,
    /// Why a growth limit could not be checked (the trace gives no per-window verdicts);
    /// such a case fails, since a gate that cannot see growth must not pass it.
    pub unjudged: Option<String>,
}

fn case(name: Limit, value: u64, limit: u64) -> Case {
    Case {
        name,
        value,
        limit,
        passed: value <= limit,
        site: None,
        kind: None,
        stack: Vec::new(),
        baseline: None,
        unjudged: None,
    }
}

/// A growth case on windows without verdicts: failed, with the reason.
fn unjudged(name: Limit, limit: u64, leaks: &DeviceLeaks) -> Case {
    let mut c = case(name, 0, limit);
    c.passed = false;
    c.unjudged = Some(leaks.windows.reason.clone());
    c
}

/// A growth case naming the site (and its stack when it fails).
fn growth_case(name: Limit, g: Option<&Growth>, limit: u64) -> Case {
    let mut c = case(name, g.map_or(0, |g| g.bytes_per_window), limit);
    if let Some(g) = g {
        c.site = Some(g.site.clone());
        c.kind = Some(g.kind);
        if !c.passed {
            c.stack = g.stack.iter().take(8).cloned().collect();
        }
    }
    c
}

fn growth_limits(budget: &Budget, leaks: &DeviceLeaks, cases: &mut Vec<Case>) {
    if !leaks.windows.verdicts {
        if let Some(limit) = budget.leaks.max_bytes_per_window {
            cases.push(unjudged(Limit::MaxBytesPerWindow, limit, leaks));
        }
        for re in &budget.leaks.forbidden_sites {
            let name = Limit::ForbiddenSite(re.as_str().to_string());
            cases.push(unjudged(name, 0, leaks));
        }
        if let Some(limit) = budget.growth.max_reserved_bytes_per_window {
            cases.push(unjudged(Limit::MaxReservedBytesPerWindow, limit, leaks));
        }
        return;
    }
    if let Some(limit) = budget.growth.max_reserved_bytes_per_window {
        let rate = leaks
            .reserved_growth
            .as_ref()
            .map_or(0, |g| g.bytes_per_window);
        cases.push(case(Limit::MaxReservedBytesPerWindow, rate, limit));
    }
    if let Some(limit) = budget.leaks.max_bytes_per_window {
        cases.push(growth_case(
            Limit::MaxBytesPerWindow,
            leaks.suspects.first(),
            limit,
        ));
    }
    for re in &budget.leaks.forbidden_sites {
        let hit = leaks.suspects.iter().find(|g| re.is_match(&g.site.label));
        let mut c = growth_case(Limit::ForbiddenSite(re.as_str().to_string()), hit, 0);
        c.passed = hit.is_none();
        if hit.is_some() {
            c.stack = hit.map_or_else(Vec::new, |g| g.stack.iter().take(8).cloned().collect());
        }
        cases.push(c);
    }
}

fn memory_limits(budget: &Budget, m: &Measured, cases: &mut Vec<Case>) {
    let limits = [
        (
            Limit::PeakRequested,
            m.peak_requested,
            budget.memory.peak_requested,
        ),
        (
            Limit::PeakReserved,
            m.peak_reserved,
            budget.memory.peak_reserved,
        ),
        (
            Limit::EndAllocated,
            m.end_allocated,
            budget.memory.end_allocated,
        ),
        (
            Limit::EndReserved,
            m.end_reserved,
            budget.memory.end_reserved,
        ),
    ];
    for (name, value, limit) in limits {
        if let Some(limit) = limit {
            cases.push(case(name, value, limit));
        }
    }
    for (role, limit) in &budget.memory.peak_requested_by_role {
        let value = m
            .peak_requested_by_role
            .iter()
            .find(|r| &r.role == role)
            .map_or(0, |r| r.bytes);
        cases.push(case(Limit::PeakRequestedRole(role.clone()), value, *limit));
    }
}

fn site_limits(budget: &Budget, leaks: &DeviceLeaks, end: &DeviceTop, cases: &mut Vec<Case>) {
    for s in &budget.sites {
        let pattern = s.pattern.as_str().to_string();
        if let Some(limit) = s.max_bytes_per_window
            && !leaks.windows.verdicts
        {
            let name = Limit::SiteBytesPerWindow(pattern.clone());
            cases.push(unjudged(name, limit, leaks));
        } else if let Some(limit) = s.max_bytes_per_window {
            let worst = leaks
                .suspects
                .iter()
                .chain(&leaks.not_suspects)
                .filter(|g| s.pattern.is_match(&g.site.label))
                .max_by_key(|g| g.bytes_per_window);
            cases.push(growth_case(
                Limit::SiteBytesPerWindow(pattern.clone()),
                worst,
                limit,
            ));
        }
        if let Some(limit) = s.max_end_bytes {
            let held = crate::model::size::sum_sizes(
                end.rows
                    .iter()
                    .filter(|r| s.pattern.is_match(&r.site.label))
                    .map(|r| r.bytes),
            );
            cases.push(case(Limit::SiteEndBytes(pattern), held, limit));
        }
    }
}

fn baseline_limits(budget: &Budget, m: &Measured, base: &Measured, cases: &mut Vec<Case>) {
    let pairs = [
        (
            "max_bytes_per_window",
            m.max_bytes_per_window,
            base.max_bytes_per_window,
        ),
        ("peak_requested", m.peak_requested, base.peak_requested),
        ("end_allocated", m.end_allocated, base.end_allocated),
    ];
    for (what, value, was) in pairs {
        if was == 0 && what != "max_bytes_per_window" {
            continue; // not measured in the baseline (a `leaks` JSON)
        }
        let mut c = case(
            Limit::Baseline(what),
            value,
            was.saturating_add(budget.tolerance.over(was)),
        );
        c.baseline = Some(was);
        cases.push(c);
    }
}

/// Applies `budget` (and a baseline) to one device: `end` is `top` at the end with every
/// site.
pub fn evaluate(
    budget: &Budget,
    leaks: &DeviceLeaks,
    end: &DeviceTop,
    measured: &Measured,
    baseline: Option<&Measured>,
) -> Vec<Case> {
    let mut cases = Vec::new();
    growth_limits(budget, leaks, &mut cases);
    memory_limits(budget, measured, &mut cases);
    site_limits(budget, leaks, end, &mut cases);
    if let Some(base) = baseline {
        baseline_limits(budget, measured, base, &mut cases);
    }
    cases
}
