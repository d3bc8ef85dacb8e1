//! Flame graphs of live memory: folded stacks (`outermost;...;innermost BYTES`, frames
//! written `basename:line:function` as PyTorch's `_memory_viz` writes them) and an SVG
//! drawn by the inferno library.

use std::collections::BTreeMap;
use std::io;

use inferno::flamegraph::{self, Options, Palette, color::BasicPalette};

use crate::analysis::tree::{CallTree, NodeKind};
use crate::attribute::NO_FRAME;
use crate::model::size::sum_sizes;
use crate::report::{ReportData, TreeReport};

use super::{bytes, count, device_list, terminal_text};

/// A frame as folded stacks write it: `basename:line:function`, with the characters the
/// format gives a meaning to replaced (`;` separates frames, a line ends a stack).
pub fn frame_text(filename: &str, line: crate::model::Line, function: &str) -> String {
    let base = filename.rsplit(['/', '\\']).next().unwrap_or(filename);
    sanitize(&format!("{base}:{line}:{function}"))
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect()
}

/// One line per distinct filtered stack of the tree's allocations: the frames outermost
/// first joined by `;`, and the bytes of the allocations whose stack it is. Stacks with
/// no frame are [`NO_FRAME`]. Lines are sorted by stack (what flame graph tools expect);
/// stacks whose allocations hold zero bytes are left out. Σ counts = the tree's bytes.
pub fn folded(tree: &CallTree) -> Vec<(String, u64)> {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for n in tree.graph().node_indices() {
        let node = tree.node(n);
        if node.self_bytes == 0 || matches!(node.kind, NodeKind::Root) {
            continue;
        }
        let mut stack = String::new();
        for (i, p) in tree.path(n).into_iter().enumerate() {
            if i > 0 {
                stack.push(';');
            }
            match &tree.node(p).kind {
                NodeKind::Frame(f) => stack.push_str(&frame_text(&f.filename, f.line, &f.function)),
                NodeKind::NoFrame | NodeKind::Root => stack.push_str(NO_FRAME),
                NodeKind::Label => stack.push_str(&tree.node(p).name),
            }
        }
        // Different full paths can share basenames: merge them, as `_memory_viz` does.
        let n = lines.entry(stack).or_insert(0);
        *n = n.saturating_add(node.self_bytes);
    }
    lines.into_iter().collect()
}

/// The folded lines of every device's tree: one device's lines as they are, several
/// devices' each under a `device N` root frame (the flame graph then has a tower per
/// device).
pub fn folded_devices(trees: &[(i64, &CallTree)]) -> Vec<(String, u64)> {
    match trees {
        [(_, t)] => folded(t),
        _ => trees
            .iter()
            .flat_map(|(d, t)| {
                folded(t)
                    .into_iter()
                    .map(move |(stack, n)| (format!("device {d};{stack}"), n))
            })
            .collect(),
    }
}

/// The folded lines as text, one `stack count` per line.
pub fn folded_text(lines: &[(String, u64)]) -> String {
    let mut o = String::with_capacity(lines.iter().map(|l| l.0.len() + 12).sum());
    for (stack, n) in lines {
        o.push_str(stack);
        o.push(' ');
        o.push_str(&n.to_string());
        o.push('\n');
    }
    o
}

/// An SVG flame graph of `lines` (self-contained: its script is inline), counts in bytes;
/// when the lines hold no bytes, a valid SVG that says so (see [`empty_svg`]).
pub fn svg(lines: &[(String, u64)], title: &str, subtitle: Option<&str>) -> io::Result<Vec<u8>> {
    svg_sized(lines, title, subtitle, None)
}

/// [`svg`] drawn `width` pixels wide; `None` is fluid (as wide as its window). Fluid
/// drawing measures the window when the SVG loads, which gives nothing inside a frame
/// that is not laid out yet, so the HTML report uses a fixed width.
pub fn svg_sized(
    lines: &[(String, u64)],
    title: &str,
    subtitle: Option<&str>,
    width: Option<usize>,
) -> io::Result<Vec<u8>> {
    if lines.iter().all(|l| l.1 == 0) {
        return Ok(empty_svg(title, subtitle.unwrap_or("nothing to draw")));
    }
    // inferno adds the counts up in 64 bits: counts whose total passes 2^53 (8 PiB, only
    // in an impossible file) are drawn divided by a factor it multiplies back when it
    // writes them, so the sums cannot wrap.
    let total: u128 = lines.iter().map(|l| u128::from(l.1)).sum();
    let scale = total.div_ceil(1 << 53).max(1) as u64;
    let text: Vec<String> = lines
        .iter()
        .map(|(stack, n)| {
            // inferno reads the last space-separated token as the count and, when the one
            // before it is a number too, the line as a differential one: keep a frame
            // name ending in ` 123` from being taken for a count.
            let mut stack = stack.clone();
            if let Some(i) = stack.rfind(' ') {
                let tail = &stack[i + 1..];
                if !tail.is_empty() && tail.chars().all(|c| c.is_ascii_digit() || c == '.') {
                    stack.replace_range(i..=i, "\u{a0}");
                }
            }
            format!("{stack} {}", n / scale)
        })
        .collect();
    let mut opts = Options::default();
    // inferno escapes markup (quick-xml) but not control characters, which XML forbids.
    opts.title = terminal_text(title).into_owned();
    opts.subtitle = subtitle.map(|s| terminal_text(s).into_owned());
    opts.count_name = "bytes".into();
    opts.name_type = "Frame:".into();
    opts.colors = Palette::Basic(BasicPalette::Mem);
    opts.deterministic = true;
    opts.image_width = width;
    opts.factor = scale as f64;
    let mut out = Vec::new();
    flamegraph::from_lines(&mut opts, text.iter().map(String::as_str), &mut out)?;
    Ok(out)
}

/// A flame graph with nothing to draw: a valid standalone SVG holding the title and why
/// it is empty (an empty snapshot, or nothing live at the point).
pub fn empty_svg(title: &str, note: &str) -> Vec<u8> {
    let esc = |s: &str| {
        terminal_text(s)
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    format!(
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"1200\" height=\"80\" viewBox=\"0 0 1200 80\" xmlns=\"http://www.w3.org/2000/svg\">\n\
         <rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#eeeeee\"/>\n\
         <text x=\"600\" y=\"30\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"17\">{}</text>\n\
         <text x=\"600\" y=\"60\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"12\" fill=\"#555555\">{}</text>\n\
         </svg>\n",
        esc(title),
        esc(note)
    )
    .into_bytes()
}

/// The folded lines of a `tree` report (every device's, see [`folded_devices`]).
pub fn report_lines(r: &TreeReport) -> Vec<(String, u64)> {
    let trees: Vec<(i64, &CallTree)> = r.devices.iter().map(|d| (d.device, &d.tree)).collect();
    folded_devices(&trees)
}

/// The title and subtitle of a `tree` report's flame graph.
fn titles(r: &TreeReport) -> (String, String) {
    let file = std::path::Path::new(&r.file)
        .file_name()
        .map_or(r.file.clone(), |n| n.to_string_lossy().into_owned());
    let live = sum_sizes(r.devices.iter().map(|d| d.at.requested_bytes));
    let drawn = sum_sizes(r.devices.iter().map(|d| d.total_bytes));
    let blocks: u64 = r.devices.iter().map(|d| d.total_blocks).sum();
    let (title, devices) = match r.devices.as_slice() {
        [d] => (
            format!("live memory at {}", super::tree::point_text(&d.at)),
            format!("device {}", d.device),
        ),
        ds => {
            let idx: Vec<i64> = ds.iter().map(|d| d.device).collect();
            (
                format!("live memory at {}", r.at.unwrap_or_default()),
                format!("devices {}", device_list(&idx)),
            )
        }
    };
    let mut subtitle = format!("{file}, {devices}: {} bytes live", count(live));
    if drawn == live {
        subtitle += &format!(" in {} allocations", count(blocks));
    } else {
        subtitle += &format!(
            "; drawn: {} bytes in {} allocations",
            count(drawn),
            count(blocks)
        );
    }
    (title, subtitle)
}

/// The SVG of a `tree` report: its flame graph, or a valid SVG that says why there is
/// nothing to draw (nothing recorded, nothing live, nothing matching `--focus`).
pub fn report_svg(r: &TreeReport, lines: &[(String, u64)], focus: bool) -> io::Result<Vec<u8>> {
    let (title, subtitle) = titles(r);
    if lines.iter().all(|l| l.1 == 0) {
        let why = if r.devices.is_empty() {
            "nothing recorded: the snapshot has no segments and no trace events"
        } else if focus {
            "nothing to draw: no live allocation matches --focus"
        } else {
            "nothing to draw: no bytes are live at this point"
        };
        return Ok(empty_svg(&title, why));
    }
    svg(lines, &title, Some(&subtitle))
}

/// What `flamegraph` wrote, for the line on standard error.
pub fn written(path: &std::path::Path, r: &TreeReport, lines: &[(String, u64)]) -> String {
    let total = sum_sizes(lines.iter().map(|l| l.1));
    if r.devices.is_empty() {
        return format!(
            "{} (nothing recorded)",
            terminal_text(&path.display().to_string())
        );
    }
    format!(
        "{} ({} in {} stack{})",
        terminal_text(&path.display().to_string()),
        bytes(total),
        count(lines.len() as u64),
        if lines.len() == 1 { "" } else { "s" }
    )
}

/// The HTML report's flame graphs: each device's call tree at its peak, fixed-width (see
/// [`svg_sized`]); `None` where nothing was live.
pub fn report_page_svgs(data: &ReportData) -> io::Result<Vec<[Option<String>; 2]>> {
    use rayon::prelude::*;
    // Devices are drawn side by side: inferno takes tens of milliseconds per large graph.
    data.devices
        .par_iter()
        .map(|d| {
            let draw = |t: &crate::analysis::tree::DeviceTree,
                        which: &str|
             -> io::Result<Option<String>> {
                let lines = folded(&t.tree);
                if lines.is_empty() {
                    return Ok(None);
                }
                let title = format!(
                    "device {}: live memory at {} ({which})",
                    d.device,
                    super::tree::point_text(&t.at)
                );
                let svg = svg_sized(&lines, &title, None, Some(1200))?;
                Ok(Some(String::from_utf8_lossy(&svg).into_owned()))
            };
            Ok([
                draw(&d.peak_tree_python, "Python frames")?,
                draw(&d.peak_tree, "every frame")?,
            ])
        })
        .collect()
}
