//! Terminal rendering of [`TreeReport`]: an indented call tree, one line per node,
//! `inclusive  share  self  name`.

use std::fmt::Write;

use petgraph::graph::NodeIndex;

use super::{Align, Style, Table, bytes, count, counted, per_device};
use crate::analysis::point::Point;
use crate::analysis::tree::DeviceTree;
use crate::report::TreeReport;

/// Default of `--min-share`: nodes under 1% of the tree's bytes are summed up.
pub const DEFAULT_MIN_SHARE: f64 = 0.01;

/// `peak (after event 2078, time_us 1767225600267210)`.
pub fn point_text(at: &Point) -> String {
    let ev = at.event_index.map_or_else(
        || "before the first event".into(),
        |i| format!("after event {i}"),
    );
    let t = at
        .time_us
        .map_or_else(String::new, |t| format!(", time_us {t}"));
    format!("{} ({ev}{t})", at.kind)
}

/// Levels of indentation drawn; deeper nodes stay at this indentation and show their
/// depth as `[N]`, so that a stack thousands of frames deep cannot make every line
/// thousands of characters wide.
pub const MAX_INDENT: u32 = 64;

/// A line still to print.
enum Item {
    /// A node, with the indentation of its line and whether it is the last sibling.
    Node(NodeIndex, String, bool),
    /// Siblings below the threshold: how many, their bytes and allocations.
    Smaller(u64, u64, u64, String, bool),
}

/// Renders every device's tree (see [`device_text`]).
pub fn text(r: &TreeReport, min_share: f64, style: Style) -> String {
    let mut o = per_device(&r.file, &r.devices, &r.idle_devices, |d| {
        device_text(d, min_share, style)
    });
    for u in &r.unresolved {
        let _ = writeln!(o, "device {}: {}", u.device, u.reason);
    }
    o
}

/// Renders a device's tree, pruning nodes whose inclusive bytes are below `min_share` of
/// the tree's total; each parent's pruned children are summed in one `(N smaller)` line,
/// so every parent's bytes are its self bytes plus the lines under it.
pub fn device_text(r: &DeviceTree, min_share: f64, style: Style) -> String {
    let tree = &r.tree;
    let total = r.total_bytes;
    let mut o = String::new();
    let _ = write!(
        o,
        "device {}, at {}: {} live",
        r.device,
        point_text(&r.at),
        bytes(r.at.requested_bytes),
    );
    let blocks = counted(r.total_blocks, "allocation", "allocations");
    if total == r.at.requested_bytes {
        let _ = writeln!(o, " in {blocks}");
    } else {
        let _ = writeln!(o, "; the tree holds {} in {blocks}", bytes(total));
    }
    let _ = writeln!(
        o,
        "call tree, outermost frame first; lines under {:.1}% of {} summed up",
        min_share * 100.0,
        bytes(total)
    );
    o.push('\n');

    let share = |b: u64| {
        if total == 0 {
            "-".to_string()
        } else {
            format!("{:.1}%", b as f64 / total as f64 * 100.0)
        }
    };
    let shown = |b: u64| total == 0 || (b as f64) >= min_share * total as f64;
    let mut t = Table::new(&[
        ("bytes", Align::Right),
        ("share", Align::Right),
        ("self", Align::Right),
        ("frame", Align::Left),
    ]);
    let mut stack = vec![Item::Node(tree.root(), String::new(), true)];
    while let Some(item) = stack.pop() {
        match item {
            Item::Smaller(n, b, blocks, indent, last) => {
                let branch = if last { "└─ " } else { "├─ " };
                t.row([
                    bytes(b),
                    share(b),
                    String::new(),
                    format!(
                        "{indent}{branch}({} smaller, {})",
                        count(n),
                        counted(blocks, "allocation", "allocations")
                    ),
                ]);
            }
            Item::Node(n, indent, last) => {
                let node = tree.node(n);
                let is_root = n == tree.root();
                let (line_prefix, mut child_indent) = if is_root {
                    (String::new(), String::new())
                } else if last {
                    (format!("{indent}└─ "), format!("{indent}   "))
                } else {
                    (format!("{indent}├─ "), format!("{indent}│  "))
                };
                if node.depth >= MAX_INDENT {
                    child_indent = indent;
                }
                let depth_mark = if node.depth > MAX_INDENT {
                    format!("[{}] ", node.depth)
                } else {
                    String::new()
                };
                t.row([
                    bytes(node.bytes),
                    share(node.bytes),
                    bytes(node.self_bytes),
                    format!("{line_prefix}{depth_mark}{}", node.name),
                ]);
                let children = tree.children(n);
                let (keep, pruned): (Vec<NodeIndex>, Vec<NodeIndex>) = children
                    .into_iter()
                    .partition(|&c| shown(tree.node(c).bytes));
                let mut items: Vec<Item> = keep
                    .iter()
                    .map(|&c| Item::Node(c, child_indent.clone(), false))
                    .collect();
                if !pruned.is_empty() {
                    let (b, blocks) = pruned.iter().fold((0, 0), |acc, &c| {
                        let c = tree.node(c);
                        (acc.0 + c.bytes, acc.1 + c.blocks)
                    });
                    items.push(Item::Smaller(
                        pruned.len() as u64,
                        b,
                        blocks,
                        child_indent.clone(),
                        false,
                    ));
                }
                if let Some(last) = items.last_mut() {
                    match last {
                        Item::Node(_, _, l) | Item::Smaller(_, _, _, _, l) => *l = true,
                    }
                }
                stack.extend(items.into_iter().rev());
            }
        }
    }
    o.push_str(&t.render(style));
    o
}
