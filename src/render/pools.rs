//! The memory pools in words (summary, segments, oom).

use std::fmt::Write;

use super::{bytes, count, terminal_text};
use crate::analysis::pools::PoolRow;

/// One line per pool: what it reserves, holds and keeps free, and for a private pool who
/// created it and that its free memory serves only its own allocations.
pub fn pools_text(pools: &[PoolRow]) -> String {
    let mut o = String::from("memory pools:");
    for p in pools {
        let _ = write!(
            o,
            "\n  {} {}: {} reserved in {} segments, {} allocated, {} cached free",
            p.pool_id,
            if p.private { "private" } else { "default" },
            bytes(p.reserved_bytes),
            count(p.segments),
            bytes(p.allocated_bytes),
            bytes(p.cached_free_bytes),
        );
        if p.private {
            o.push_str(" (only this pool's allocations can use it)");
            if let Some(site) = &p.created_by {
                let _ = write!(o, "; created at {}", terminal_text(&site.label));
            }
        }
    }
    o
}
