//! Memory held until garbage collection, in words.

use super::{bytes, count, terminal_text};
use crate::analysis::gc_held::GcHeld;

/// The headline: how many collections, how often, how much each freed.
pub fn headline(g: &GcHeld) -> String {
    let mut sizes = g.bytes_per_collection.clone();
    sizes.sort_unstable();
    let typical = sizes.get(sizes.len() / 2).copied().unwrap_or(0);
    let every = g
        .period_windows
        .map_or_else(String::new, |p| format!(" every {p} windows"));
    format!(
        "held until garbage collection: the collector freed memory {} times{every}, {} per collection (median); a sawtooth, not a leak",
        count(g.collections),
        bytes(typical)
    )
}

/// The sites it freed and what to do.
pub fn sites_text(g: &GcHeld) -> Vec<String> {
    let mut lines: Vec<String> = g
        .sites
        .iter()
        .take(5)
        .map(|s| {
            format!(
                "{} in {} allocations, kept up to {} windows past their own: {}",
                bytes(s.bytes),
                count(s.blocks),
                s.windows_held_max,
                terminal_text(&s.site.label)
            )
        })
        .collect();
    lines.push("reference cycles keep these tensors until gc runs: break the cycle (do not store a tensor on an object it refers back to; use weakref), or call gc.collect() at a step boundary".into());
    lines
}
