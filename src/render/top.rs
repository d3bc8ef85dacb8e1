//! Terminal rendering of `top`: per device, what holds memory at the point.

use std::fmt::Write;

use super::{Align, Style, Table, bytes, count, per_device};
use crate::analysis::top::{DeviceTop, RoleBytes};
use crate::report::TopReport;

/// Renders the report: a table per device, then the devices where the point does not
/// exist and those with nothing recorded.
pub fn text(r: &TopReport, style: Style) -> String {
    let mut o = per_device(&r.file, &r.devices, &r.idle_devices, |d| {
        device_text(d, r.by.unwrap_or_default().name(), style)
    });
    for u in &r.unresolved {
        let _ = writeln!(o, "device {}: {}", u.device, u.reason);
    }
    o
}

fn share(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 / whole as f64 * 100.0)
    }
}

/// The role cell of a row: its role, with the role's share of the row when the row's
/// memory has several roles (`activation 85%`).
pub fn role_cell(roles: &[RoleBytes], total: u64) -> String {
    match roles {
        [] => String::new(),
        // A share of 99.5% or more prints as 100%: the name alone says it.
        [first, ..] if roles.len() == 1 || first.bytes as f64 >= 0.995 * total as f64 => {
            first.role.clone()
        }
        [first, ..] => format!(
            "{} {:.0}%",
            first.role,
            first.bytes as f64 / total.max(1) as f64 * 100.0
        ),
    }
}

/// One device's table.
pub fn device_text(r: &DeviceTop, by: &str, style: Style) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "device {}, at {}: {} live in {} allocations, by {}",
        r.device,
        super::tree::point_text(&r.at),
        bytes(r.at.requested_bytes),
        count(r.total_blocks),
        by
    );
    o.push('\n');
    // Shares are of the larger of the live bytes and the rows' sum, as in the report's
    // rows (they differ only where an impossible file's sizes stopped a count at the top).
    let whole = r.at.requested_bytes.max(r.total_bytes);
    // Under `--by role` the key is the role: no second role column.
    let with_role = by != "role";
    let mut columns = vec![
        ("bytes", Align::Right),
        ("share", Align::Right),
        ("blocks", Align::Right),
    ];
    if with_role {
        columns.push(("role", Align::Left));
    }
    columns.push((by, Align::Left));
    // The names people gave the memory, where the snapshot carries any.
    let named = r.rows.iter().any(|row| !row.names.is_empty());
    if named {
        columns.push(("names", Align::Left));
    }
    let mut t = Table::new(&columns);
    let push = |t: &mut Table, mut cells: Vec<String>, role: String| {
        if with_role {
            cells.insert(3, role);
        }
        t.row(cells);
    };
    for row in &r.rows {
        push(
            &mut t,
            vec![
                bytes(row.bytes),
                format!("{:.1}%", row.share * 100.0),
                count(row.blocks),
                row.site.label.clone(),
                if named {
                    super::names_text(&row.names)
                } else {
                    String::new()
                },
            ],
            role_cell(&row.roles, row.bytes),
        );
    }
    if r.rest.keys > 0 {
        let rest_share = if whole == 0 {
            "0.0%".into()
        } else {
            share(r.rest.bytes, whole)
        };
        push(
            &mut t,
            vec![
                bytes(r.rest.bytes),
                rest_share,
                count(r.rest.blocks),
                format!("({} more)", count(r.rest.keys)),
            ],
            String::new(),
        );
    }
    push(
        &mut t,
        vec![
            bytes(r.total_bytes),
            share(r.total_bytes, whole),
            count(r.total_blocks),
            "total".into(),
        ],
        String::new(),
    );
    o.push_str(&t.render(style));
    o
}
