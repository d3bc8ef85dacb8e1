//! Terminal rendering of `oom`, and the advice in words.

use std::fmt::Write;

use super::{Align, Style, Table, bytes, count, per_device, terminal_text};
use crate::analysis::oom::{Advice, DeviceOom};
use crate::model::AllocatorSettings;
use crate::report::OomReport;

/// Renders every explained device.
pub fn text(r: &OomReport, style: Style) -> String {
    per_device(&r.file, &r.devices, &r.idle_devices, |d| {
        device_text(d, style)
    })
}

/// The allocator settings as the advice states them, e.g. `expandable_segments on,
/// max_split_size unlimited; PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"`.
pub fn settings_text(s: &AllocatorSettings) -> String {
    let exp = match (s.expandable_segments, s.expandable_seen) {
        (Some(true), _) => "on",
        (Some(false), _) => "off",
        (None, true) => "on (not recorded; segments are expandable)",
        (None, false) => "off (not recorded; no segment is expandable)",
    };
    let split = s.max_split_size_bytes.map_or("unlimited".into(), bytes);
    let mut t = format!("expandable_segments {exp}, max_split_size {split}");
    if let Some(g) = s.garbage_collection_threshold {
        let _ = write!(t, ", garbage_collection_threshold {g}");
    }
    match &s.conf {
        Some(c) => {
            let _ = write!(t, "; {}=\"{}\"", s.variable, terminal_text(c));
        }
        None => {
            let _ = write!(t, "; {} not set", s.variable);
        }
    }
    t
}

/// One piece of advice in words (the settings it read: [`advice_settings`]).
pub fn advice_text(a: &Advice) -> String {
    let (text, _) = advice_parts(a);
    text
}

/// The allocator settings an advice read, in words.
pub fn advice_settings(a: &Advice) -> String {
    settings_text(advice_parts(a).1)
}

fn advice_parts(a: &Advice) -> (String, &AllocatorSettings) {
    match a {
        Advice::Fragmentation {
            setting,
            settings,
            pinning,
            cached_free_in_pool_bytes,
            pool,
            needed_bytes,
            largest_free_block_bytes,
        } => {
            let mut t = format!(
                "fragmentation: {} of cached free memory in the {pool} pool would have held the {} request, but the largest free block is {}. ",
                bytes(*cached_free_in_pool_bytes),
                bytes(*needed_bytes),
                bytes(*largest_free_block_bytes)
            );
            if settings.expandable() {
                t.push_str("Expandable segments are already on, so what is left is the live blocks keeping the free memory apart");
                match pinning.first() {
                    Some(_) => {
                        let named: Vec<String> = pinning
                            .iter()
                            .take(3)
                            .map(|p| {
                                format!(
                                    "{} ({}, {} in {} block{} beside {} free{})",
                                    terminal_text(&p.site.label),
                                    p.role,
                                    bytes(p.bytes),
                                    count(p.blocks),
                                    if p.blocks == 1 { "" } else { "s" },
                                    bytes(p.free_beside_bytes),
                                    if p.would_make_room {
                                        "; freeing one would make room"
                                    } else {
                                        ""
                                    }
                                )
                            })
                            .collect();
                        let _ = write!(t, ": {}", named.join("; "));
                    }
                    None => t.push_str(" (none found beside the free blocks)"),
                }
                t.push_str(". Free or move them before the request, or lower the peak (smaller batches or sequences, activation checkpointing); max_split_size_mb does not apply with expandable segments.");
            } else {
                let _ = write!(
                    t,
                    "Set {setting}=expandable_segments:True so freed memory can be mapped contiguously"
                );
                match settings.max_split_size_bytes {
                    Some(m) => {
                        let _ = write!(
                            t,
                            " (max_split_size_mb is already set: blocks over {} are not split).",
                            bytes(m)
                        );
                    }
                    None => t.push_str(" (or max_split_size_mb to stop large blocks being split)."),
                }
            }
            (t, settings)
        }
        Advice::Growth { grew: g, settings } => (
            format!(
                "memory grew before the failure: {} keeps {} per window ({}, {} of {} windows); fix that first (`leakscope leaks`).",
                terminal_text(&g.site.label),
                bytes(g.bytes_per_window),
                g.kind,
                g.windows_growing,
                g.windows_total
            ),
            settings,
        ),
        Advice::DeviceFull {
            settings,
            needed_bytes,
            cached_free_in_pool_bytes,
            device_free_bytes,
        } => (
            format!(
                "the device was full: the request ({}) exceeded both the cached free memory of its pool ({}) and what the driver had free ({}); the working set itself is too large (smaller batches or sequences, activation checkpointing, sharding).",
                bytes(*needed_bytes),
                bytes(*cached_free_in_pool_bytes),
                bytes(*device_free_bytes)
            ),
            settings,
        ),
    }
}

/// One device's explanation.
pub fn device_text(r: &DeviceOom, style: Style) -> String {
    let mut o = String::new();
    let opt = |v: Option<u64>| v.map_or_else(|| "-".into(), bytes);
    if r.oom.found {
        let _ = writeln!(
            o,
            "{}",
            style.bold(&format!(
                "device {}: out of memory at event {} asking for {} ({} pool); the driver had {} free",
                r.device,
                r.oom.event_index.unwrap_or(0),
                opt(r.oom.request_bytes),
                r.oom.pool.unwrap_or("-"),
                opt(r.oom.device_free_bytes)
            ))
        );
    } else {
        let _ = writeln!(
            o,
            "{}",
            style.bold(&format!(
                "device {}: no oom event in the trace; the state at the end of the file (what grows per window: `leakscope leaks`)",
                r.device
            ))
        );
    }
    o.push('\n');
    let mut t = Table::new(&[("", Align::Left), ("bytes", Align::Right)]);
    t.row(["reserved (segments)".to_string(), bytes(r.reserved_bytes)]);
    t.row([
        "active (blocks held, pending frees too)".to_string(),
        bytes(r.active_bytes),
    ]);
    t.row([
        "allocated (blocks held, pending frees not)".to_string(),
        bytes(r.allocated_bytes),
    ]);
    t.row([
        "requested (bytes asked for, of active blocks)".to_string(),
        bytes(r.requested_bytes),
    ]);
    t.row(["cached free".to_string(), bytes(r.cached_free_bytes)]);
    if r.other_pools_free_bytes > 0 {
        t.row([
            "  in private pools (cannot serve the request)".to_string(),
            bytes(r.other_pools_free_bytes),
        ]);
    }
    if r.oom.found {
        t.row([
            format!("cached free in the {} pool", r.oom.pool.unwrap_or("-")),
            bytes(r.cached_free_in_pool_bytes),
        ]);
    }
    t.row([
        "largest free block".to_string(),
        bytes(r.largest_free_block_bytes),
    ]);
    t.row([
        "  small pool".to_string(),
        bytes(r.largest_free_block_by_pool.small),
    ]);
    t.row([
        "  large pool".to_string(),
        bytes(r.largest_free_block_by_pool.large),
    ]);
    o.push_str(&t.render(style));
    let _ = writeln!(
        o,
        "fragmentation {:.1}% (1 - largest free block / cached free){}",
        r.fragmentation * 100.0,
        match r.would_fit_if_contiguous {
            Some(true) => "; the request would have fit were the cached free memory contiguous",
            Some(false) => "; the request would not have fit even if contiguous",
            None => "",
        }
    );
    if r.reconstruction_unresolved > 0 {
        let _ = writeln!(
            o,
            "({} events after the failure could not be undone: numbers are approximate)",
            count(r.reconstruction_unresolved)
        );
    }
    if !r.top_holders.is_empty() {
        o.push('\n');
        let when = if r.oom.found {
            "held at the failure"
        } else {
            "held at the end"
        };
        let _ = writeln!(o, "{}", style.bold(when));
        let named = r.top_holders.iter().any(|h| !h.names.is_empty());
        let mut columns = vec![
            ("bytes", Align::Right),
            ("blocks", Align::Right),
            ("role", Align::Left),
            ("site", Align::Left),
        ];
        if named {
            columns.push(("names", Align::Left));
        }
        let mut t = Table::new(&columns);
        for h in &r.top_holders {
            let mut cells = vec![
                bytes(h.bytes),
                count(h.blocks),
                super::top::role_cell(&h.roles, h.bytes),
                h.site.label.clone(),
            ];
            if named {
                cells.push(super::names_text(&h.names));
            }
            t.row(cells);
        }
        o.push_str(&t.render(style));
    }
    if !r.grew_before.is_empty() {
        o.push('\n');
        let _ = writeln!(o, "{}", style.bold("grew per window before it"));
        for g in &r.grew_before {
            let _ = writeln!(
                o,
                "  {} per window in {} windows: {}",
                bytes(g.bytes_per_window),
                g.windows_growing,
                terminal_text(&g.site.label)
            );
        }
    }
    if let Some(first) = r.advice.first() {
        o.push('\n');
        let _ = writeln!(o, "allocator settings read: {}", advice_settings(first));
        for a in &r.advice {
            let _ = writeln!(o, "advice: {}", advice_text(a));
        }
    }
    o
}
