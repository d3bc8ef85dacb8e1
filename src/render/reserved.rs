//! Reserved growth in words: how fast the cache grows, where it sits, what to do.

use std::fmt::Write;

use super::{bytes, count};
use crate::analysis::reserved::{Cause, ReservedGrowth};

/// The finding's headline: rate, windows, onset.
pub fn headline(g: &ReservedGrowth) -> String {
    format!(
        "reserved memory grows while live memory does not: {} more cached free per window{} in {} of {} windows since window {} ({} added; live memory changed by {}{})",
        bytes(g.bytes_per_window),
        g.period_windows.map_or(String::new(), |p| format!(
            " ({} every {p} windows)",
            bytes(g.bytes_per_occurrence)
        )),
        g.windows_growing,
        g.windows_total,
        g.onset_window,
        bytes(g.added_bytes),
        if g.live_change_bytes < 0 { "-" } else { "+" },
        bytes(g.live_change_bytes.unsigned_abs()),
    )
}

/// Where the growth sits and what to do about it.
pub fn cause_text(g: &ReservedGrowth) -> String {
    let mut o = String::new();
    match g.cause {
        Cause::Streams => {
            let held: u64 = g.streams.iter().map(|s| s.cached_free_bytes).sum();
            let _ = write!(
                o,
                "cause: {} cached on {} streams that no event of the last window uses (each stream keeps its own free blocks); ",
                bytes(held),
                count(g.streams.len() as u64)
            );
            o.push_str("reuse streams (create them once, outside the call), or call torch.cuda.empty_cache() after their work; expandable segments do not help, the cache is per stream");
        }
        Cause::Pools => {
            let held: u64 = g.pools.iter().map(|p| p.cached_free_bytes).sum();
            let ids: Vec<String> = g.pools.iter().map(|p| p.pool_id.to_string()).collect();
            let _ = write!(
                o,
                "cause: {} cached free in private pools {} (CUDA graphs, MemPools), which only their own allocations can use; ",
                bytes(held),
                ids.join(", ")
            );
            o.push_str("reuse the graphs and pools instead of capturing new ones, or delete them and call torch.cuda.empty_cache()");
        }
        Cause::Fragmentation => {
            let _ = write!(
                o,
                "cause: fragmentation: the largest free block is {}, a small part of what is cached; ",
                bytes(g.largest_free_block_bytes)
            );
            o.push_str("sizes that vary per window leave pieces the next request cannot use: round sizes to a few buckets, or set expandable_segments:True");
        }
        Cause::Cache => {
            o.push_str("cause: whole free blocks the cache keeps; release them with torch.cuda.empty_cache() at a boundary, or set expandable_segments:True so freed memory can be reused whatever its size");
        }
    }
    o
}
