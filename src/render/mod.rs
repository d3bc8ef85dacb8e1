//! Stage last, `render`: the session's reports as terminal tables, JSON, an HTML page,
//! flame graphs and JUnit XML. Words and units live here; nothing here opens a file or
//! computes a finding.

pub mod check;
pub mod consistency;
pub mod exported;
pub mod flamegraph;
pub mod html;
pub mod json;
pub mod junit;
pub mod leaks;
pub mod oom;
pub mod parquet;
pub mod perfetto;
pub mod pprof;
pub mod protobuf;
pub mod ranks;
pub mod segments;
pub mod summary;
mod table;
pub mod top;
pub mod tree;
pub mod windows;

pub use table::{Align, Style, Table};

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
            "{file}: nothing recorded (no segments and no trace events on any device)\n"
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
    fn count_groups() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1234567), "1,234,567");
    }
}
