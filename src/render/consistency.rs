//! What did not add up on a device, in one line.

use crate::replay::Consistency;

/// One line: which device, and each thing that does not add up, counted.
pub fn line(c: &Consistency) -> String {
    let plural = |n: u64, one: &str, many: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {many}")
        }
    };
    let mut parts = Vec::new();
    let mut add = |n: u64, one: &str, many: &str| {
        if n > 0 {
            parts.push(plural(n, one, many));
        }
    };
    add(
        c.open_without_block,
        "allocation open at the end has no block in the final segments",
        "allocations open at the end have no block in the final segments",
    );
    add(
        c.size_mismatches,
        "block's requested size differs from its alloc's",
        "blocks' requested sizes differ from their allocs'",
    );
    add(
        c.stray_free_requests,
        "free_requested frees no allocation",
        "free_requested free no allocation",
    );
    add(
        c.double_allocs,
        "alloc at an address already live",
        "allocs at addresses already live",
    );
    add(
        c.segments_not_covered,
        "segment's blocks do not tile it",
        "segments' blocks do not tile them",
    );
    add(
        c.requested_above_reserved,
        "point at which more is requested than reserved",
        "points at which more is requested than reserved",
    );
    add(
        c.negative_reserved,
        "point at which reserved would be negative",
        "points at which reserved would be negative",
    );
    add(
        c.impossible_sizes,
        "size or sum of sizes past what a device holds",
        "sizes or sums of sizes past what a device holds",
    );
    format!(
        "device {}: the trace and the final state disagree ({}); figures near them are approximate",
        c.device,
        parts.join(", ")
    )
}
