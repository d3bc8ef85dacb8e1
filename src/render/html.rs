//! The offline HTML report: one file, no network. Tables and numbers are written here as
//! HTML (they read without JavaScript); the charts are drawn in the browser by uPlot
//! (vendored under `assets/vendor/uplot`, embedded in the binary) from the report's data,
//! embedded as JSON. The flamegraph is inferno's SVG in a sandboxed frame (a data: URL),
//! so its own script runs without touching the page.

use std::fmt::Write as _;

use crate::analysis::report::ReportData;
use crate::analysis::top::{TopReport, TopRow};
use crate::analysis::{leaks::Growth, oom::OomReport};

use super::{bytes, count};

const UPLOT_JS: &str = include_str!("../../assets/vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../assets/vendor/uplot/uPlot.min.css");
const REPORT_JS: &str = include_str!("../../assets/report/report.js");
const REPORT_CSS: &str = include_str!("../../assets/report/report.css");
/// Records script errors, failed loads and `console.error` calls before anything else
/// runs, so the page can say whether it rendered cleanly (the browser test reads it).
const ERROR_TRAP: &str = "window.__lsErrors=[];\
window.addEventListener('error',function(e){__lsErrors.push(String(e.message||(e.target&&e.target.src)||e.type))},true);\
window.addEventListener('unhandledrejection',function(e){__lsErrors.push(String(e.reason))});\
(function(){var f=console.error;console.error=function(){__lsErrors.push(Array.prototype.join.call(arguments,' '));return f.apply(console,arguments)}})();";

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON made safe inside `<script>`: `</` could close the element early, and U+2028/9
/// end lines in older JavaScript parsers. Both are escaped as JSON allows.
fn script_json(json: &str) -> String {
    json.replace("</", "<\\/")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// The `height` attribute of the SVG's root element, in pixels.
fn svg_height(svg: &str) -> Option<u64> {
    let root = &svg[svg.find("<svg")?..];
    let root = &root[..root.find('>')?];
    let at = root.find(" height=\"")? + " height=\"".len();
    let rest = &root[at..];
    rest[..rest.find('"')?]
        .parse::<f64>()
        .ok()
        .map(|v| v.ceil() as u64)
}

/// Standard base64 with padding (RFC 4648), for the data: URL.
fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn num(n: u64) -> String {
    format!("{} <span class=\"exact\">({} B)</span>", bytes(n), count(n))
}

/// The whole page. `flamegraph_svg` is the SVG drawn from the peak's call tree (or `None`
/// when it could not be drawn); `data_json` is `data` serialized.
pub fn page(data: &ReportData, data_json: &str, flamegraph_svg: Option<&str>) -> String {
    let mut h = String::with_capacity(256 << 10);
    let name = std::path::Path::new(&data.file)
        .file_name()
        .map_or(data.file.clone(), |n| n.to_string_lossy().into_owned());
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; frame-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>leakscope: {}</title>\n<script>{ERROR_TRAP}</script>\n<style>{UPLOT_CSS}\n{REPORT_CSS}</style>\n</head>\n<body>\n",
        escape(&name)
    );
    let _ = writeln!(
        h,
        "<header><h1>leakscope report</h1><p class=\"file\">{}</p><p class=\"meta\">device {} · \
         {} · schema {}</p></header>",
        escape(&data.file),
        data.device,
        escape(&format!(
            "{} {}{}",
            data.summary.format.producer,
            data.summary.format.container,
            data.summary
                .format
                .pickle_protocol
                .map_or(String::new(), |p| format!(" protocol {p}"))
        )),
        data.schema
    );
    h.push_str("<main>\n");
    cards(&mut h, data);
    h.push_str(
        "<section id=\"timeline-section\"><h2>Memory over the trace</h2>\
         <p class=\"hint\">Drag across a chart to zoom (both charts follow); double-click to zoom out. \
         Dashed lines: window starts; red: the peak; black: OOM.</p>\
         <div id=\"timeline\" class=\"chart\"></div>\
         <p class=\"readout\">Peak of the timeline: <span id=\"timeline-peak\" data-bytes=\"\">(drawing…)</span></p>\
         <h3>Largest sites over time (stacked)</h3><div id=\"sites\" class=\"chart\"></div></section>\n",
    );
    leaks_section(&mut h, data);
    h.push_str("<section id=\"top-section\"><h2>What holds memory</h2>");
    top_table(&mut h, "top-peak", "At the peak", &data.top_peak);
    top_table(&mut h, "top-end", "At the end", &data.top_end);
    h.push_str("</section>\n");
    if let Some(o) = &data.oom {
        oom_section(&mut h, o);
    }
    h.push_str("<section id=\"flamegraph-section\"><h2>Flamegraph at the peak</h2>");
    match flamegraph_svg {
        Some(svg) => {
            // A data: URL keeps the SVG its own XML document (its script expects that);
            // `srcdoc` would parse it as HTML and its fluid layout collapses there.
            // Sized to the drawing, which the frame would otherwise scale down to fit.
            let _ = write!(
                h,
                "<iframe id=\"flamegraph\" title=\"flamegraph\" sandbox=\"allow-scripts\" \
                 style=\"height:{}px\" src=\"data:image/svg+xml;base64,{}\"></iframe>",
                svg_height(svg).map_or(720, |px| px + 24),
                base64(svg.as_bytes())
            );
        }
        None => h.push_str("<p>No live allocations at the peak to draw.</p>"),
    }
    h.push_str("</section>\n</main>\n");
    h.push_str(
        "<footer id=\"ls-status\" data-ready=\"0\" data-errors=\"\" data-charts=\"0\">\
         Charts need JavaScript; the tables above do not.</footer>\n",
    );
    let _ = write!(
        h,
        "<script type=\"application/json\" id=\"ls-data\">{}</script>\n<script>{UPLOT_JS}</script>\n<script>{REPORT_JS}</script>\n</body>\n</html>\n",
        script_json(data_json)
    );
    h
}

fn cards(h: &mut String, d: &ReportData) {
    let t = &d.summary.totals.totals;
    h.push_str("<section id=\"summary\" class=\"cards\">");
    let mut card = |id: &str, label: &str, value: String, attr: Option<u64>| {
        let _ = write!(
            h,
            "<div class=\"card\" id=\"{id}\"{}><div class=\"label\">{label}</div><div class=\"value\">{value}</div></div>",
            attr.map_or(String::new(), |b| format!(" data-bytes=\"{b}\""))
        );
    };
    card(
        "card-peak",
        "Peak live (requested) bytes",
        format!(
            "{}<div class=\"sub\">after event {}</div>",
            num(d.peak.live_bytes),
            d.peak
                .event_index
                .map_or("(before the trace)".into(), |i| count(i as u64))
        ),
        Some(d.peak.live_bytes),
    );
    card(
        "card-reserved",
        "Reserved at the end",
        num(t.reserved_bytes),
        Some(t.reserved_bytes),
    );
    card(
        "card-allocated",
        "Allocated at the end",
        num(t.allocated_bytes),
        Some(t.allocated_bytes),
    );
    card(
        "card-events",
        "Trace events (device)",
        format!(
            "{}<div class=\"sub\">{} in the file</div>",
            count(d.timeline.total_events as u64),
            count(t.trace_events)
        ),
        None,
    );
    let suspects = d.leaks.suspects.len() as u64 + d.leak_rows_left_out.0;
    card(
        "card-suspects",
        "Leak suspects",
        format!(
            "{}<div class=\"sub\">{} windows ({})</div>",
            suspects,
            count(d.leaks.windows.count),
            escape(&d.leaks.windows.source)
        ),
        None,
    );
    if let Some(o) = &d.oom {
        card(
            "card-oom",
            "OOM: requested",
            num(o.oom.requested_bytes.unwrap_or(0)),
            o.oom.requested_bytes,
        );
    }
    if d.summary.trace.wrapped {
        card(
            "card-wrapped",
            "Trace",
            "incomplete<div class=\"sub\">the ring buffer wrapped or recording started late</div>"
                .into(),
            None,
        );
    }
    h.push_str("</section>\n");
}

fn site_cell(key: &str) -> String {
    format!("<td class=\"site\"><code>{}</code></td>", escape(key))
}

fn top_table(h: &mut String, id: &str, title: &str, r: &TopReport) {
    let _ = write!(
        h,
        "<h3>{title}: {} live {}</h3><table id=\"{id}\"><thead><tr><th>site ({})</th>\
         <th class=\"n\">bytes</th><th class=\"n\">share</th><th class=\"n\">allocations</th></tr></thead><tbody>",
        bytes(r.at.live_bytes),
        r.at.event_index.map_or(String::new(), |i| format!(
            "(after event {})",
            count(i as u64)
        )),
        escape(r.by)
    );
    let row = |h: &mut String, row: &TopRow| {
        let _ = write!(
            h,
            "<tr>{}<td class=\"n\" data-bytes=\"{}\">{}</td><td class=\"n\">{:.1}%</td><td class=\"n\">{}</td></tr>",
            site_cell(&row.key),
            row.bytes,
            bytes(row.bytes),
            row.share * 100.0,
            count(row.blocks)
        );
    };
    for r in &r.rows {
        row(h, r);
    }
    if r.rest.keys > 0 {
        let _ = write!(
            h,
            "<tr class=\"rest\"><td>{} more sites</td><td class=\"n\" data-bytes=\"{}\">{}</td><td></td><td class=\"n\">{}</td></tr>",
            count(r.rest.keys),
            r.rest.bytes,
            bytes(r.rest.bytes),
            count(r.rest.blocks)
        );
    }
    h.push_str("</tbody></table>\n");
}

fn growth_row(h: &mut String, g: &Growth) {
    let released = match &g.released_at {
        Some(r) => format!(
            "event {}{}",
            count(r.event_index as u64),
            r.site
                .as_ref()
                .map_or(String::new(), |s| format!(" at <code>{}</code>", escape(s)))
        ),
        None if g.bytes_at_end > 0 => "never (held at the end)".into(),
        None => "—".into(),
    };
    let _ = write!(
        h,
        "<tr class=\"kind-{kind}\"><td>{kind}</td>{site}<td class=\"n\" data-bytes=\"{bpw}\">{bpw_h}</td>\
         <td class=\"n\">{grew} / {total}</td><td class=\"n\">{ret}</td><td class=\"n\">{end}</td><td>{released}</td></tr>",
        kind = escape(g.kind),
        site = site_cell(&g.key),
        bpw = g.bytes_per_window,
        bpw_h = bytes(g.bytes_per_window),
        grew = count(g.windows_growing),
        total = count(g.windows_total),
        ret = bytes(g.retained_bytes),
        end = bytes(g.bytes_at_end),
    );
}

fn leaks_section(h: &mut String, d: &ReportData) {
    let l = &d.leaks;
    let _ = write!(
        h,
        "<section id=\"leaks-section\"><h2>Growth per window</h2><p>{} windows from {}{}. {}</p>",
        count(l.windows.count),
        escape(&l.windows.source),
        if l.windows.detail.is_empty() {
            String::new()
        } else {
            format!(" (<code>{}</code>)", escape(&l.windows.detail))
        },
        if l.windows.guessed {
            "These windows are a guess from a repeating function; they may be layers rather \
             than micro-batches (choose them with <code>--windows</code>)."
        } else {
            ""
        }
    );
    let head = "<thead><tr><th>kind</th><th>site</th><th class=\"n\">bytes / window</th>\
                <th class=\"n\">windows grown</th><th class=\"n\">retained</th><th class=\"n\">at end</th><th>released</th></tr></thead>";
    if l.suspects.is_empty() {
        h.push_str("<p id=\"no-suspects\">No site grows in most windows: no leak suspect.</p>");
    } else {
        let _ = write!(h, "<table id=\"suspects\">{head}<tbody>");
        for g in &l.suspects {
            growth_row(h, g);
        }
        h.push_str("</tbody></table>");
        h.push_str("<h3>Survivor bytes per window, per suspect</h3><div id=\"growth\" class=\"chart\"></div>");
    }
    if !l.warmup.is_empty() {
        let _ = write!(
            h,
            "<details><summary>{} other growing sites (warm-up, bounded, sporadic, in flight)</summary><table id=\"others\">{head}<tbody>",
            count(l.warmup.len() as u64 + d.leak_rows_left_out.1)
        );
        for g in &l.warmup {
            growth_row(h, g);
        }
        h.push_str("</tbody></table></details>");
    }
    let (sus_out, other_out) = d.leak_rows_left_out;
    if sus_out + other_out > 0 {
        let _ = write!(
            h,
            "<p class=\"hint\">{} more suspects and {} more growing sites are not shown here; \
             <code>leakscope leaks</code> lists them all.</p>",
            count(sus_out),
            count(other_out)
        );
    }
    h.push_str("</section>\n");
}

fn oom_section(h: &mut String, o: &OomReport) {
    let _ = write!(
        h,
        "<section id=\"oom-section\"><h2>Out of memory</h2><table id=\"oom\"><tbody>\
         <tr><th>requested</th><td class=\"n\" data-bytes=\"{}\">{}</td></tr>\
         <tr><th>free on the device (driver)</th><td class=\"n\">{}</td></tr>\
         <tr><th>reserved</th><td class=\"n\">{}</td></tr>\
         <tr><th>allocated</th><td class=\"n\">{}</td></tr>\
         <tr><th>cached free</th><td class=\"n\">{}</td></tr>\
         <tr><th>largest free block</th><td class=\"n\">{}</td></tr>\
         <tr><th>at event</th><td class=\"n\">{}</td></tr></tbody></table>",
        o.oom.requested_bytes.unwrap_or(0),
        num(o.oom.requested_bytes.unwrap_or(0)),
        o.oom.device_free_bytes.map_or("unknown".into(), num),
        num(o.reserved_bytes),
        num(o.allocated_bytes),
        num(o.cached_free_bytes),
        num(o.largest_free_block_bytes),
        o.oom
            .event_index
            .map_or("(no oom event)".into(), |i| count(i as u64)),
    );
    if !o.advice.is_empty() {
        h.push_str("<ul class=\"advice\">");
        for a in &o.advice {
            let _ = write!(h, "<li>{}</li>", escape(a));
        }
        h.push_str("</ul>");
    }
    if !o.top_holders.is_empty() {
        h.push_str("<h3>Largest holders at the OOM</h3><table id=\"oom-holders\"><thead><tr><th>site</th><th class=\"n\">bytes</th><th class=\"n\">allocations</th></tr></thead><tbody>");
        for x in &o.top_holders {
            let _ = write!(
                h,
                "<tr>{}<td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                site_cell(&x.site),
                bytes(x.bytes),
                count(x.blocks)
            );
        }
        h.push_str("</tbody></table>");
    }
    h.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_height_reads_the_root_element() {
        let svg = "<?xml version=\"1.0\"?><svg version=\"1.1\" width=\"1200\" height=\"814\" \
                   viewBox=\"0 0 1200 814\"><rect height=\"3\"/></svg>";
        assert_eq!(svg_height(svg), Some(814));
        assert_eq!(svg_height("<svg width=\"1\">"), None);
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        // RFC 4648, section 10.
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in cases {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
    }

    #[test]
    fn escapes_markup_and_script_ends() {
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(
            script_json("{\"k\":\"</script>\"}"),
            "{\"k\":\"<\\/script>\"}"
        );
    }
}
