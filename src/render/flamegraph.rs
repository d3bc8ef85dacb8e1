//! Flame graphs of live memory: folded stacks (`outermost;...;innermost BYTES`, frames
//! written `basename:line:function` as PyTorch's `_memory_viz` writes them) and an SVG
//! drawn by the inferno library.

use std::collections::BTreeMap;
use std::io;

use inferno::flamegraph::{self, Options, Palette, color::BasicPalette};

use crate::analysis::tree::{CallTree, NodeKind};
use crate::attribute::NO_FRAME;

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
            }
        }
        // Different full paths can share basenames: merge them, as `_memory_viz` does.
        *lines.entry(stack).or_insert(0) += node.self_bytes;
    }
    lines.into_iter().collect()
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

/// An SVG flame graph of `lines` (self-contained: its script is inline), counts in bytes.
/// Fails with [`io::ErrorKind::InvalidInput`] when the lines hold no bytes.
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
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no bytes to draw",
        ));
    }
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
            format!("{stack} {n}")
        })
        .collect();
    let mut opts = Options::default();
    opts.title = title.to_string();
    opts.subtitle = subtitle.map(str::to_string);
    opts.count_name = "bytes".into();
    opts.name_type = "Frame:".into();
    opts.colors = Palette::Basic(BasicPalette::Mem);
    opts.deterministic = true;
    opts.image_width = width;
    let mut out = Vec::new();
    flamegraph::from_lines(&mut opts, text.iter().map(String::as_str), &mut out)?;
    Ok(out)
}
