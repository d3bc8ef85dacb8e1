//! Stage last, `render`: the session's reports as terminal tables, JSON, an HTML page,
//! flame graphs and JUnit XML. Words and units live here; nothing here opens a file or
//! computes a finding.

pub mod allocations;
pub mod check;
pub mod compare_at;
pub mod consistency;
pub mod flamegraph;
pub mod gc_held;
pub mod html;
pub mod json;
pub mod junit;
pub mod leak_limit;
pub mod leaks;
pub mod memory_limit;
pub mod oom;
pub mod phases;
pub mod pickle;
pub mod pools;
pub mod ranks;
pub mod reserved;
pub mod rows;
pub mod segments;
pub mod slice;
pub mod summary;
mod table;
mod text;
pub mod top;
pub mod tree;
pub mod windows;

pub use table::{Align, Style, Table};
pub use text::Text;

use std::borrow::Cow;

/// `s` as text for a terminal: names come from the file, which may come from anyone, so
/// every control character (C0, DEL, C1) is written as an escape (`\x1b`, `\r`, `\n`,
/// `\t`, else `\xNN`) and so is every bidirectional override (`\u{202e}`), so a name
/// can neither move the cursor, recolour the terminal, forge a line nor reorder what is
/// shown. A backslash stays as it is. Borrowed when there is nothing to escape (the usual
/// case). The one place names become terminal (and HTML, XML) text: tables escape every
/// cell with it, renderers every name they write into a line.
///
/// ```
/// use leakscope::render::terminal_text;
/// assert_eq!(terminal_text("a\x1b[31m\r\0b"), "a\\x1b[31m\\r\\x00b");
/// assert_eq!(terminal_text("plain \\ text"), "plain \\ text");
/// ```
pub fn terminal_text(s: &str) -> Cow<'_, str> {
    let escaped = |c: char| c.is_control() || is_bidi_control(c);
    if !s.chars().any(escaped) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // C0, DEL and C1 are all below U+0100: two hex digits.
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if is_bidi_control(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The characters that reorder text shown after them (embeddings, overrides, isolates).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Bytes in binary units with three significant digits: `512 B`, `1.50 MiB`, `12.3 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else if v >= 10.0 {
        format!("{v:.1} {}", UNITS[u])
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// [`bytes`], then the exact count where the unit rounds it: `148 MiB (155,582,464 B)`;
/// what a failed limit shows, so the number can be compared with the limit's.
///
/// ```
/// use leakscope::render::bytes_exact;
/// assert_eq!(bytes_exact(100), "100 B");
/// assert_eq!(bytes_exact(1536), "1.50 KiB (1,536 B)");
/// ```
pub fn bytes_exact(n: u64) -> String {
    if n < 1024 {
        bytes(n)
    } else {
        format!("{} ({} B)", bytes(n), count(n))
    }
}

/// An integer with thousands separators: `1,234,567`.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Device indices as ranges: `0`, `1-7`, `0, 2-3`.
pub fn device_list(devices: &[i64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < devices.len() {
        let mut j = i;
        while j + 1 < devices.len() && devices[j + 1] == devices[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", devices[i], devices[j])
        } else {
            devices[i].to_string()
        });
        i = j + 1;
    }
    parts.join(", ")
}

/// The closing line of a per-device report: the devices with nothing recorded, summed up,
/// or a note that the file holds nothing at all. Empty when neither applies.
pub fn idle_line(file: &str, shown: usize, idle: &[i64]) -> String {
    if shown == 0 {
        return format!(
            "{}: nothing recorded (no segments and no trace events on any device)\n",
            terminal_text(file)
        );
    }
    match idle.len() {
        0 => String::new(),
        1 => format!("device {}: nothing recorded\n", idle[0]),
        _ => format!("devices {}: nothing recorded\n", device_list(idle)),
    }
}

/// Per-device sections, a blank line between them, then [`idle_line`].
pub fn per_device<T>(
    file: &str,
    devices: &[T],
    idle: &[i64],
    mut section: impl FnMut(&T) -> String,
) -> String {
    let mut o = String::new();
    for (i, d) in devices.iter().enumerate() {
        if i > 0 {
            o.push('\n');
        }
        o.push_str(&section(d));
    }
    let tail = idle_line(file, devices.len(), idle);
    if !tail.is_empty() && !devices.is_empty() {
        o.push('\n');
    }
    o.push_str(&tail);
    o
}

/// The names beside a site, as one cell: `annotation forward, metadata kept by autograd`
/// (empty when it has none).
pub fn names_text(names: &crate::attribute::names::Names) -> String {
    names
        .iter()
        .map(|(kind, name)| format!("{kind} {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A count with its noun: `1 range`, `1,024 ranges`.
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", count(n), if n == 1 { one } else { many })
}

/// A signed byte difference: `+1.50 MiB`, `-512 B`.
pub fn signed_bytes(d: i64) -> String {
    if d < 0 {
        format!("-{}", bytes(d.unsigned_abs()))
    } else {
        format!("+{}", bytes(d as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(20 << 20), "20.0 MiB");
        assert_eq!(bytes(300 << 30), "300 GiB");
    }

    #[test]
    fn device_ranges() {
        assert_eq!(device_list(&[]), "");
        assert_eq!(device_list(&[3]), "3");
        assert_eq!(device_list(&[1, 2, 3, 4, 5, 6, 7]), "1-7");
        assert_eq!(device_list(&[0, 2, 3, 5]), "0, 2-3, 5");
    }

    #[test]
    fn terminal_text_escapes_every_control() {
        assert!(matches!(
            terminal_text("train.py:12:step"),
            Cow::Borrowed(_)
        ));
        assert_eq!(terminal_text("\u{1b}[2J"), "\\x1b[2J");
        assert_eq!(terminal_text("a\rb\nc\td"), "a\\rb\\nc\\td");
        assert_eq!(
            terminal_text("\0\u{7f}\u{85}\u{9b}"),
            "\\x00\\x7f\\x85\\x9b"
        );
        assert_eq!(terminal_text("x\u{202e}y"), "x\\u{202e}y");
        // Printable text beyond ASCII and backslashes are kept.
        assert_eq!(terminal_text("é → \\x1b"), "é → \\x1b");
        // Escaping escaped text changes nothing: the escapes are printable.
        let once = terminal_text("\u{1b}\0").into_owned();
        assert_eq!(terminal_text(&once), once);
    }

    #[test]
    fn count_groups() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1234567), "1,234,567");
    }
}
