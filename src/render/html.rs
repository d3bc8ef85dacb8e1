//! The offline HTML report: one file, no network, a section per device. Tables and
//! numbers are written here as HTML (they read without JavaScript); the charts are drawn in
//! the browser by uPlot (vendored under `assets/vendor/uplot`, embedded in the binary)
//! from the report's data, embedded as JSON. Each device's flamegraph is inferno's SVG in
//! a sandboxed frame (a data: URL), so its own script runs without touching the page.
//! Element ids carry the device (`timeline-0`, `suspects-1`), so the page's script and its
//! tests find each device's parts.

use std::fmt::Write as _;

use crate::analysis::leaks::Growth;
use crate::analysis::oom::DeviceOom;
use crate::analysis::phases::DevicePhases;
use crate::analysis::point::Point;
use crate::analysis::top::{DeviceTop, TopRow};
use crate::attribute::Site;
use crate::attribute::names::Names;
use crate::report::{DeviceReport, ReportData};

use super::{bytes, count, device_list, terminal_text};

const UPLOT_JS: &str = include_str!("../../assets/vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../assets/vendor/uplot/uPlot.min.css");
const REPORT_JS: &str = include_str!("../../assets/report/report.js");
const ALLOCATIONS_JS: &str = include_str!("../../assets/report/allocations.js");
const FORMAT_JS: &str = include_str!("../../assets/report/format.js");
const REPORT_CSS: &str = include_str!("../../assets/report/report.css");
/// Records script errors, failed loads and `console.error` calls before anything else
/// runs, so the page can say whether it rendered cleanly (the browser test reads it).
const ERROR_TRAP: &str = "window.__lsErrors=[];\
window.addEventListener('error',function(e){__lsErrors.push(String(e.message||(e.target&&e.target.src)||e.type))},true);\
window.addEventListener('unhandledrejection',function(e){__lsErrors.push(String(e.reason))});\
(function(){var f=console.error;console.error=function(){__lsErrors.push(Array.prototype.join.call(arguments,' '));return f.apply(console,arguments)}})();";

/// Escapes text for HTML element content and attribute values; control characters are
/// shown escaped as on a terminal ([`terminal_text`]), since most are not allowed in HTML.
pub fn escape(s: &str) -> String {
    let s = terminal_text(s);
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

/// JSON made safe as the text of a `<script>` element, the one way the page inlines
/// data: `</script` would end the element and `<!--` with `<script` would make the parser
/// skip past its end (the rest of the page becomes script), so `<`, `>` and `&` are
/// written `\u003c`, `\u003e`, `\u0026` (they occur only inside JSON strings, where
/// the escapes mean the same characters); U+2028/9 end lines in older JavaScript parsers,
/// and control characters are written as escapes too.
fn script_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            // serde_json leaves DEL and C1 as they are in strings; HTML calls them parse
            // errors. (Tab, CR and newline occur only as whitespace between tokens.)
            c if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
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

/// The whole page. `flamegraphs[i]` holds the SVGs drawn from device `i`'s call tree at its
/// peak (`None` when nothing was live to draw); `data_json` is `data` serialized.
pub fn page(data: &ReportData, data_json: &str, flamegraphs: &[[Option<String>; 2]]) -> String {
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
    let f = &data.summary.format;
    let devices: Vec<i64> = data.devices.iter().map(|d| d.device).collect();
    let _ = writeln!(
        h,
        "<header><h1>leakscope report</h1><p class=\"file\">{}</p><p class=\"meta\">{} · {} · schema {}</p>{}</header>",
        escape(&data.file),
        match devices.len() {
            0 => "no device recorded anything".to_string(),
            1 => format!("device {}", devices[0]),
            _ => format!("devices {}", device_list(&devices)),
        },
        escape(&format!(
            "{} {}{}",
            f.producer,
            f.container,
            f.pickle_protocol
                .map_or(String::new(), |p| format!(" protocol {p}"))
        )),
        data.schema,
        nav(data)
    );
    h.push_str("<main>\n");
    for c in &data.disagreements {
        let _ = writeln!(
            h,
            "<p class=\"warn\" id=\"disagrees-{}\">{}</p>",
            c.device,
            escape(&super::consistency::line(c))
        );
    }
    for (i, d) in data.devices.iter().enumerate() {
        device_section(&mut h, data, d, flamegraphs.get(i));
    }
    if data.devices.is_empty() {
        h.push_str("<p id=\"nothing-recorded\">Nothing recorded: the file has no segments and no trace events.</p>\n");
    } else if !data.idle_devices.is_empty() {
        let _ = writeln!(
            h,
            "<p class=\"hint\" id=\"idle-devices\">Devices {}: nothing recorded.</p>",
            device_list(&data.idle_devices)
        );
    }
    h.push_str("</main>\n");
    h.push_str(
        "<footer id=\"ls-status\" data-ready=\"0\" data-errors=\"\" data-charts=\"0\">\
         Charts need JavaScript; the tables above do not.</footer>\n",
    );
    let _ = write!(
        h,
        "<script type=\"application/json\" id=\"ls-data\">{}</script>\n<script>{UPLOT_JS}</script>\n<script>{FORMAT_JS}\n{ALLOCATIONS_JS}</script>\n<script>{REPORT_JS}</script>\n</body>\n</html>\n",
        script_json(data_json)
    );
    h
}

/// What `report` wrote, for the line on standard error.
pub fn written(path: &std::path::Path, data: &ReportData, len: usize) -> String {
    let peaks: Vec<String> = data
        .devices
        .iter()
        .map(|d| {
            format!(
                "device {} peak {} after event {}",
                d.device,
                bytes(d.peak.requested_bytes),
                d.peak
                    .event_index
                    .map_or("(none)".into(), |i| count(i as u64))
            )
        })
        .collect();
    format!(
        "{} ({}; {})",
        terminal_text(&path.display().to_string()),
        bytes(len as u64),
        if peaks.is_empty() {
            "nothing recorded".to_string()
        } else {
            peaks.join("; ")
        }
    )
}

/// Links to each device's section, when there are several.
fn nav(data: &ReportData) -> String {
    if data.devices.len() < 2 {
        return String::new();
    }
    let links: Vec<String> = data
        .devices
        .iter()
        .map(|d| format!("<a href=\"#device-{0}\">device {0}</a>", d.device))
        .collect();
    format!("<nav class=\"devices\">{}</nav>", links.join(" · "))
}

fn device_section(
    h: &mut String,
    data: &ReportData,
    d: &DeviceReport,
    svgs: Option<&[Option<String>; 2]>,
) {
    let n = d.device;
    let _ = writeln!(
        h,
        "<section class=\"device\" id=\"device-{n}\" data-device=\"{n}\"><h2 class=\"device-title\">Device {n}</h2>"
    );
    cards(h, data, d);
    let _ = writeln!(
        h,
        "<section class=\"timeline-section\"><h2>Memory over the trace</h2>\
         {hint}\
         <div id=\"timeline-{n}\" class=\"chart\"></div>\
         <p class=\"readout\">Peak of the timeline: <span id=\"timeline-peak-{n}\" data-bytes=\"\">(drawing…)</span></p>\
         <h3 id=\"allocations-title-{n}\">Every allocation over the trace ({schema})</h3>\
         <p class=\"hint\">One band per allocation, from the event that made it to the event that freed it, \
         stacked in the order they were made (as memory_viz draws them); the largest by bytes x lifetime one by one, \
         the rest summed in the grey band. Hover for size, site and role; click to pin its stack and open the segment map there.</p>\
         <div id=\"allocations-{n}\" class=\"allocations\" data-schema=\"{schema}\"></div>\
         <h3>Memory by role over time (stacked)</h3><div id=\"roles-{n}\" class=\"chart\"></div>\
         <h3>Largest sites over time (stacked)</h3><div id=\"sites-{n}\" class=\"chart\"></div></section>",
        schema = crate::analysis::allocations::SCHEMA,
        hint = if d.timeline.total_events == 0 {
            "<p class=\"hint\">No trace recorded: the file holds the state at the dump only.</p>"
        } else {
            "<p class=\"hint\">Drag across a chart to zoom (the charts of this device follow); \
             double-click to zoom out. Dashed lines: window starts; red: the peak; black: OOM.</p>"
        }
    );
    leaks_section(h, d);
    phases_section(h, &d.phases);
    h.push_str("<section class=\"top-section\"><h2>What holds memory</h2>");
    top_table(h, &format!("top-peak-{n}"), "At the peak", &d.top_peak);
    top_table(h, &format!("top-end-{n}"), "At the end", &d.top_end);
    h.push_str("</section>\n");
    if let Some(o) = &d.oom {
        oom_section(h, o);
    }
    h.push_str("<section class=\"flamegraph-section\"><h2>Flamegraph at the peak</h2>");
    let [python, full] = match svgs {
        Some([p, f]) => [p.as_deref(), f.as_deref()],
        None => [None, None],
    };
    match python.or(full) {
        Some(first) => {
            if let (Some(_), Some(_)) = (python, full) {
                let _ = write!(
                    h,
                    "<p class=\"hint\"><label><input type=\"checkbox\" id=\"flamegraph-all-{n}\" \
                     onchange=\"var a=document.getElementById('flamegraph-{n}'),b=document.getElementById('flamegraph-full-{n}');\
                     a.style.display=this.checked?'none':'';b.style.display=this.checked?'':'none';\"> \
                     every frame (C++ and interpreter too); Python frames only otherwise</label></p>"
                );
            }
            flame_frame(h, &format!("flamegraph-{n}"), first, true);
            if let (Some(_), Some(f)) = (python, full) {
                flame_frame(h, &format!("flamegraph-full-{n}"), f, false);
            }
        }
        None => h.push_str("<p>No live allocations at the peak to draw.</p>"),
    }
    h.push_str("</section>\n</section>\n");
}

/// One flame graph in its frame: a data: URL keeps the SVG its own XML document (its
/// script expects that; `srcdoc` would parse it as HTML and its fluid layout collapses
/// there), sized to the drawing, which the frame would otherwise scale down to fit.
fn flame_frame(h: &mut String, id: &str, svg: &str, shown: bool) {
    let _ = write!(
        h,
        "<iframe id=\"{id}\" class=\"flamegraph\" title=\"flamegraph\" sandbox=\"allow-scripts\" \
         style=\"height:{}px{}\" src=\"data:image/svg+xml;base64,{}\"></iframe>",
        svg_height(svg).map_or(720, |px| px + 24),
        if shown { "" } else { ";display:none" },
        base64(svg.as_bytes())
    );
}

fn cards(h: &mut String, data: &ReportData, d: &DeviceReport) {
    let n = d.device;
    let summary = data.summary.devices.iter().find(|s| s.device == n);
    let totals = summary.map(|s| &s.totals);
    let private: Vec<&crate::analysis::pools::PoolRow> = summary
        .map(|s| s.pools.iter().filter(|p| p.private).collect())
        .unwrap_or_default();
    let _ = write!(h, "<div class=\"cards\" id=\"summary-{n}\">");
    let mut card = |id: &str, label: &str, value: String, attr: Option<u64>| {
        let _ = write!(
            h,
            "<div class=\"card\" id=\"{id}-{n}\"{}><div class=\"label\">{label}</div><div class=\"value\">{value}</div></div>",
            attr.map_or(String::new(), |b| format!(" data-bytes=\"{b}\""))
        );
    };
    card(
        "card-peak",
        "Peak live (requested) bytes",
        format!(
            "{}<div class=\"sub\">after event {}</div>",
            num(d.peak.requested_bytes),
            d.peak
                .event_index
                .map_or("(before the trace)".into(), |i| count(i as u64))
        ),
        Some(d.peak.requested_bytes),
    );
    card(
        "card-peak-reserved",
        "Peak reserved bytes",
        format!(
            "{}<div class=\"sub\">{} at the peak of live bytes</div>",
            num(d.peak_reserved_bytes),
            bytes(d.reserved_at_peak_bytes)
        ),
        Some(d.peak_reserved_bytes),
    );
    if let Some(t) = totals {
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
    }
    if !private.is_empty() {
        // A private pool's free memory serves only its own allocations: say so beside the
        // totals it is folded into.
        let lines: Vec<String> = private
            .iter()
            .map(|p| {
                format!(
                    "<div class=\"sub\">{}: {} reserved, {} allocated, {} free{}</div>",
                    p.pool_id,
                    bytes(p.reserved_bytes),
                    bytes(p.allocated_bytes),
                    bytes(p.cached_free_bytes),
                    p.created_by.as_ref().map_or(String::new(), |s| format!(
                        "; created at {}",
                        escape(&s.label)
                    ))
                )
            })
            .collect();
        let reserved: u64 = private.iter().map(|p| p.reserved_bytes).sum();
        card(
            "card-pools",
            "Private pools at the end (CUDA graphs, MemPools)",
            format!("{}{}", num(reserved), lines.join("")),
            Some(reserved),
        );
    }
    card(
        "card-events",
        "Trace events",
        format!(
            "{}<div class=\"sub\">{} in the file</div>",
            count(d.timeline.total_events as u64),
            count(data.summary.totals.totals.trace_events)
        ),
        None,
    );
    let suspects = d.leaks.suspects.len() as u64 + d.leak_rows_left_out.0;
    card(
        "card-suspects",
        "Leak suspects",
        if d.leaks.windows.verdicts {
            format!(
                "{}<div class=\"sub\">{} windows ({})</div>",
                suspects,
                count(d.leaks.windows.count),
                d.leaks.windows.source
            )
        } else {
            "no verdicts<div class=\"sub\">no repeated unit of work in the trace</div>".into()
        },
        None,
    );
    if let Some(o) = &d.oom {
        card(
            "card-oom",
            "OOM: requested",
            num(o.oom.request_bytes.unwrap_or(0)),
            o.oom.request_bytes,
        );
    }
    let mut roles_card = |id: &str, label: &str, t: &DeviceTop| {
        let list: Vec<String> = t
            .rows
            .iter()
            .map(|r| format!("{} {}", escape(&r.site.label), bytes(r.bytes)))
            .collect();
        card(
            id,
            label,
            format!("<div class=\"sub roles\">{}</div>", list.join("<br>")),
            None,
        );
    };
    roles_card("card-roles-peak", "At the peak, by role", &d.roles_peak);
    if let Some(t) = &d.roles_oom {
        roles_card("card-roles-oom", "At the OOM, by role", t);
    }
    if d.timeline.total_events == 0 {
        card(
            "card-no-trace",
            "Trace",
            "none recorded<div class=\"sub\">the state at the dump only</div>".into(),
            None,
        );
    } else if d.leaks.trace.wrapped {
        card(
            "card-wrapped",
            "Trace",
            "incomplete<div class=\"sub\">the ring buffer wrapped or recording started late</div>"
                .into(),
            None,
        );
    }
    h.push_str("</div>\n");
}

/// A site as a table cell: the function, then `file:line` with the file's base name; the
/// whole label (the full path) in the tooltip, with the names people gave the memory
/// (annotation, metadata, compiled region), also shown under the site.
fn named_site_cell(site: &Site, names: &Names) -> String {
    let location = site.location().map(|loc| {
        let (file, line) = match loc.rsplit_once(':') {
            Some((f, l)) if site.line.is_some() => (f.to_string(), format!(":{l}")),
            _ => (loc.clone(), String::new()),
        };
        let base = file.rsplit(['/', '\\']).next().unwrap_or(&file).to_string();
        format!("{base}{line}")
    });
    let named = super::names_text(names);
    let title = if named.is_empty() {
        escape(&site.label)
    } else {
        escape(&format!("{}\n{named}", site.label))
    };
    let under = if named.is_empty() {
        String::new()
    } else {
        format!("<br><span class=\"names\">{}</span>", escape(&named))
    };
    match (&site.name, location) {
        (Some(name), Some(loc)) => format!(
            "<td class=\"site\" title=\"{title}\"><span class=\"fn\">{}</span> <span class=\"loc\">{}</span>{under}</td>",
            escape(name),
            escape(&loc)
        ),
        (None, Some(loc)) => format!(
            "<td class=\"site\" title=\"{title}\"><span class=\"loc\">{}</span>{under}</td>",
            escape(&loc)
        ),
        _ => format!(
            "<td class=\"site\" title=\"{title}\"><span class=\"fn\">{}</span>{under}</td>",
            escape(&site.label)
        ),
    }
}

fn top_table(h: &mut String, id: &str, title: &str, r: &DeviceTop) {
    let _ = write!(
        h,
        "<h3>{title}: {} live {}</h3><table id=\"{id}\"><thead><tr><th>site</th><th>role</th>\
         <th class=\"n\">bytes</th><th class=\"n\">share</th><th class=\"n\">allocations</th></tr></thead><tbody>",
        bytes(r.at.requested_bytes),
        r.at.event_index.map_or(String::new(), |i| format!(
            "(after event {})",
            count(i as u64)
        )),
    );
    let row = |h: &mut String, row: &TopRow| {
        let _ = write!(
            h,
            "<tr>{}<td class=\"role\">{}</td><td class=\"n\" data-bytes=\"{}\">{}</td><td class=\"n\">{:.1}%</td><td class=\"n\">{}</td></tr>",
            named_site_cell(&row.site, &row.names),
            escape(&super::top::role_cell(&row.roles, row.bytes)),
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
            "<tr class=\"rest\"><td>{} more sites</td><td></td><td class=\"n\" data-bytes=\"{}\">{}</td><td></td><td class=\"n\">{}</td></tr>",
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
            r.site.as_ref().map_or(String::new(), |s| format!(
                " at <code title=\"{}\">{}</code>",
                escape(&s.label),
                escape(s.function())
            ))
        ),
        None if g.bytes_at_end > 0 => "never (held at the end)".into(),
        None => "—".into(),
    };
    let _ = write!(
        h,
        "<tr class=\"kind-{kind}\"><td>{kind}</td>{site}<td class=\"role\">{role}</td><td class=\"n\" data-bytes=\"{bpw}\">{bpw_h}</td>\
         <td class=\"n\">{grew} / {total}</td><td class=\"n\">{since}</td><td class=\"n\">{ret}</td><td class=\"n\">{end}</td><td>{released}</td></tr>",
        kind = g.kind,
        site = named_site_cell(&g.site, &g.names),
        role = escape(&g.role),
        bpw = g.bytes_per_window,
        bpw_h = bytes(g.bytes_per_window),
        grew = count(g.windows_growing),
        total = count(g.windows_total),
        since = g.onset_window,
        ret = bytes(g.retained_bytes),
        end = bytes(g.bytes_at_end),
    );
}

fn leaks_section(h: &mut String, d: &DeviceReport) {
    let (n, l) = (d.device, &d.leaks);
    let _ = write!(
        h,
        "<section class=\"leaks-section\"><h2>Growth per window</h2><p id=\"windows-{n}\">{} windows from {}: {}</p>",
        count(l.windows.count),
        l.windows.source,
        escape(&l.windows.reason)
    );
    if let Some(warn) = l.windows.quality.as_ref().and_then(super::windows::warning) {
        let _ = write!(h, "<p class=\"warn\">{}</p>", escape(&warn));
    }
    if !l.windows.verdicts {
        let _ = write!(
            h,
            "<p id=\"no-verdicts-{n}\">No per-window verdicts: the trace holds no repeated unit of work. {}.</p>",
            escape(&capitalized(super::leaks::HOW_TO_GET_VERDICTS))
        );
        if let Some(nv) = &l.no_verdicts {
            holders_table(h, n, "peak", &nv.peak, &nv.at_peak);
            holders_table(h, n, "end", &nv.end, &nv.at_end);
        }
        h.push_str("</section>\n");
        return;
    }
    let head = "<colgroup><col class=\"kind\"><col class=\"site\"></colgroup>\
                <thead><tr><th>kind</th><th>site</th><th>role</th><th class=\"n\">bytes / window</th>\
                <th class=\"n\">windows grown</th><th class=\"n\">since window</th><th class=\"n\">retained</th><th class=\"n\">at end</th><th>released</th></tr></thead>";
    if l.suspects.is_empty() {
        let _ = write!(
            h,
            "<p id=\"no-suspects-{n}\">No site grows in most windows or since a window to the end: no leak suspect.</p>"
        );
    } else {
        let _ = write!(
            h,
            "<table id=\"suspects-{n}\" class=\"growth\">{head}<tbody>"
        );
        for g in &l.suspects {
            growth_row(h, g);
        }
        let _ = write!(
            h,
            "</tbody></table><h3>Survivor bytes per window, per suspect</h3><div id=\"growth-{n}\" class=\"chart\"></div>"
        );
    }
    if let Some(g) = &l.reserved_growth {
        let _ = write!(
            h,
            "<p id=\"reserved-growth-{n}\" class=\"warn\"><b>{}</b><br>{}</p>",
            escape(&super::reserved::headline(g)),
            escape(&super::reserved::cause_text(g))
        );
    }
    if let Some(g) = &l.gc_held {
        let lines: Vec<String> = super::gc_held::sites_text(g)
            .iter()
            .map(|s| escape(s))
            .collect();
        let _ = write!(
            h,
            "<p id=\"gc-held-{n}\" class=\"warn\"><b>{}</b><br>{}</p>",
            escape(&super::gc_held::headline(g)),
            lines.join("<br>")
        );
    }
    if !l.not_suspects.is_empty() {
        let _ = write!(
            h,
            "<details><summary>{} other growing sites (warm-up, bounded, sporadic, in flight, too late to judge, held until GC)</summary><table id=\"others-{n}\" class=\"growth\">{head}<tbody>",
            count(l.not_suspects.len() as u64 + d.leak_rows_left_out.1)
        );
        for g in &l.not_suspects {
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

/// Memory per annotated phase: the families of names, then the first ranges (as the
/// `phases` text lists them); nothing when the device has no `record_function` range.
fn phases_section(h: &mut String, d: &DevicePhases) {
    if d.phases.is_empty() {
        return;
    }
    let n = d.device;
    let _ = write!(
        h,
        "<section class=\"phases-section\"><h2>Memory per annotated phase</h2>\
         <p>Live requested bytes at the start, highest point and end of each <code>record_function</code> range \
         (<code>leakscope phases --json</code> has every range).</p>\
         <table id=\"phase-names-{n}\"><thead><tr><th>name</th><th class=\"n\">ranges</th><th class=\"n\">peak</th>\
         <th class=\"n\">most rise</th><th class=\"n\">left live</th><th class=\"n\">grew</th></tr></thead><tbody>"
    );
    for p in &d.names {
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\" data-bytes=\"{}\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{} / {}</td></tr>",
            escape(&p.name),
            count(p.count),
            p.peak_bytes,
            bytes(p.peak_bytes),
            bytes(p.max_rise_bytes),
            super::signed_bytes(p.growth_bytes),
            count(p.grew),
            count(p.count)
        );
    }
    let shown = d.phases.len().min(super::phases::RANGES_SHOWN);
    let _ = write!(
        h,
        "</tbody></table><h3>Ranges in start order ({} of {})</h3><table id=\"phases-{n}\"><thead><tr><th>range</th>\
         <th class=\"n\">events</th><th class=\"n\">start</th><th class=\"n\">peak</th><th class=\"n\">end</th></tr></thead><tbody>",
        count(shown as u64),
        count(d.phases.len() as u64)
    );
    for p in &d.phases[..shown] {
        let _ = write!(
            h,
            "<tr><td style=\"padding-left: {}em\">{}</td><td class=\"n\">{}..{}</td><td class=\"n\">{}</td><td class=\"n\" data-bytes=\"{}\">{}</td><td class=\"n\">{}</td></tr>",
            p.depth.min(16),
            escape(&p.name),
            count(p.start_event as u64),
            count(p.end_event as u64),
            bytes(p.start_bytes),
            p.peak_bytes,
            bytes(p.peak_bytes),
            bytes(p.end_bytes)
        );
    }
    h.push_str("</tbody></table></section>\n");
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// What holds memory at a point, where there are no verdicts to show.
fn holders_table(h: &mut String, n: i64, what: &str, at: &Point, rows: &[TopRow]) {
    let _ = write!(
        h,
        "<h3>Held at the {what} ({}): {}</h3><table id=\"held-{what}-{n}\"><thead><tr><th class=\"n\">bytes</th><th class=\"n\">blocks</th><th>site</th></tr></thead><tbody>",
        at.event_index.map_or_else(
            || "before the first event".into(),
            |e| format!("after event {e}")
        ),
        bytes(at.requested_bytes)
    );
    for r in rows {
        let _ = write!(
            h,
            "<tr><td class=\"n\" data-bytes=\"{}\">{}</td><td class=\"n\">{}</td><td><code>{}</code></td></tr>",
            r.bytes,
            bytes(r.bytes),
            count(r.blocks),
            escape(&r.site.label)
        );
    }
    h.push_str("</tbody></table>");
}

fn oom_section(h: &mut String, o: &DeviceOom) {
    let n = o.device;
    let _ = write!(
        h,
        "<section class=\"oom-section\"><h2>Out of memory</h2><table id=\"oom-{n}\"><tbody>\
         <tr><th>requested</th><td class=\"n\" data-bytes=\"{}\">{}</td></tr>\
         <tr><th>free on the device (driver)</th><td class=\"n\">{}</td></tr>\
         <tr><th>reserved</th><td class=\"n\">{}</td></tr>\
         <tr><th>allocated</th><td class=\"n\">{}</td></tr>\
         <tr><th>cached free</th><td class=\"n\">{}</td></tr>\
         <tr><th>largest free block</th><td class=\"n\">{}</td></tr>\
         <tr><th>at event</th><td class=\"n\">{}</td></tr></tbody></table>",
        o.oom.request_bytes.unwrap_or(0),
        num(o.oom.request_bytes.unwrap_or(0)),
        o.oom.device_free_bytes.map_or("unknown".into(), num),
        num(o.reserved_bytes),
        num(o.allocated_bytes),
        num(o.cached_free_bytes),
        num(o.largest_free_block_bytes),
        o.oom
            .event_index
            .map_or("(no oom event)".into(), |i| count(i as u64)),
    );
    if let Some(first) = o.advice.first() {
        let _ = write!(
            h,
            "<p>allocator settings read: {}</p>",
            escape(&super::oom::advice_settings(first))
        );
        h.push_str("<ul class=\"advice\">");
        for a in &o.advice {
            let _ = write!(h, "<li>{}</li>", escape(&super::oom::advice_text(a)));
        }
        h.push_str("</ul>");
    }
    if !o.top_holders.is_empty() {
        let _ = write!(
            h,
            "<h3>Largest holders at the OOM</h3><table id=\"oom-holders-{n}\"><thead><tr><th>site</th><th class=\"n\">bytes</th><th class=\"n\">allocations</th></tr></thead><tbody>"
        );
        for x in &o.top_holders {
            let _ = write!(
                h,
                "<tr>{}<td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                named_site_cell(&x.site, &x.names),
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
            "{\"k\":\"\\u003c/script\\u003e\"}"
        );
        let json = "{\"k\":\"<!--<script> & \u{2028}\"}";
        let safe = script_json(json);
        assert_eq!(
            safe,
            "{\"k\":\"\\u003c!--\\u003cscript\\u003e \\u0026 \\u2028\"}"
        );
        // The same data, read back.
        let a: serde_json::Value = serde_json::from_str(json).unwrap();
        let b: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(a, b);
        // Pretty JSON's whitespace stays; DEL and C1, which serde_json keeps, do not.
        let pretty =
            serde_json::to_string_pretty(&serde_json::json!({"k": "a\u{7f}\u{9b}"})).unwrap();
        let safe = script_json(&pretty);
        assert!(
            safe.contains("\\u007f\\u009b") && safe.contains('\n'),
            "{safe}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&safe).unwrap(),
            serde_json::from_str::<serde_json::Value>(&pretty).unwrap()
        );
        assert_eq!(escape("a\u{1b}[1m"), "a\\x1b[1m");
    }
}
