//! Each report's main table, one row per site, segment, rank or case: what Python's
//! `rows()` and `to_pandas()` give. Read from the report's `--json` document, so a table
//! names its columns as the schema does and cannot disagree with it.

use serde_json::{Map, Value};

/// One row of a table: column name -> value, in column order.
pub type Row = Map<String, Value>;

/// The main table of a `--json` document, chosen by its `schema` (`leakscope.leaks/8` ->
/// the leaks table); `None` for a document of no known schema.
///
/// ```
/// let doc = serde_json::json!({
///     "schema": "leakscope.top/4",
///     "devices": [{"device": 0, "rows": [
///         {"site": {"label": "a.py:1:f"}, "role": "activation", "bytes": 512,
///          "share": 1.0, "blocks": 1}]}],
/// });
/// let rows = leakscope::render::rows::rows(&doc).unwrap();
/// assert_eq!(rows[0]["site"], "a.py:1:f");
/// assert_eq!(rows[0]["bytes"], 512);
/// ```
pub fn rows(doc: &Value) -> Option<Vec<Row>> {
    let schema = doc.get("schema")?.as_str()?;
    let name = schema.strip_prefix("leakscope.")?.split('/').next()?;
    Some(match name {
        "summary" => per_device(doc, None, summary),
        "leaks" => per_device(doc, None, leaks),
        "top" => per_device(doc, Some("rows"), |d, r| {
            vec![row(d, r, &["role", "bytes", "share", "blocks"], true)]
        }),
        "oom" => per_device(doc, Some("top_holders"), |d, h| {
            vec![row(d, h, &["role", "bytes", "blocks"], true)]
        }),
        "segments" => per_device(doc, Some("segments"), |d, s| {
            vec![row(d, s, SEGMENT, false)]
        }),
        "timeline" => per_device(doc, Some("allocations"), |d, a| {
            vec![row(d, a, ALLOCATION, false)]
        }),
        "tree" => per_device(doc, None, tree),
        "phases" => per_device(doc, Some("phases"), |d, p| vec![row(d, p, PHASE, false)]),
        "windows" => per_device(doc, None, windows),
        "report" => per_device(doc, None, report),
        "compare" => compare(doc),
        "compare_at" => compare_at(doc),
        "compare_steps" => compare_steps(doc),
        "ranks" => list(doc, "ranks")
            .map(|r| {
                let mut out = pick(r, RANK);
                out.insert("top_suspect".into(), label(r.get("top_suspect")));
                out
            })
            .collect(),
        "check" => check(doc),
        _ => return None,
    })
}

const SUMMARY: &[&str] = &[
    "segments",
    "blocks",
    "active_blocks",
    "reserved_bytes",
    "allocated_bytes",
    "active_bytes",
    "requested_bytes",
    "rounding_overhead_bytes",
    "cached_free_bytes",
    "trace_events",
];
const PHASE: &[&str] = &[
    "name",
    "depth",
    "start_time_us",
    "end_time_us",
    "start_event",
    "end_event",
    "start_bytes",
    "peak_bytes",
    "peak_event",
    "end_bytes",
];
const SUSPECT: &[&str] = &[
    "bytes_per_window",
    "bytes_per_occurrence",
    "period_windows",
    "windows_growing",
    "windows_total",
    "onset_window",
    "retained_bytes",
    "bytes_at_end",
];
const SEGMENT: &[&str] = &[
    "address",
    "total_size",
    "pool",
    "stream",
    "expandable",
    "allocated_bytes",
    "active_bytes",
    "requested_bytes",
    "internal_free_bytes",
    "external_free_bytes",
    "largest_free_block_bytes",
];
const ALLOCATION: &[&str] = &[
    "address",
    "bytes",
    "alloc_event",
    "first_event",
    "free_event",
    "alloc_time_us",
    "free_time_us",
    "role",
    "site",
];
const RANK: &[&str] = &[
    "rank",
    "step",
    "file",
    "device",
    "peak_requested_bytes",
    "end_allocated_bytes",
    "growth_bytes_per_window",
    "top_suspect_bytes_per_window",
    "windows",
    "verdicts",
    "outlier",
    "disagrees",
    "error",
    "error_kind",
];

/// The items of `doc[key]` (none when it is missing or not a list).
fn list<'a>(doc: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    doc.get(key).and_then(Value::as_array).into_iter().flatten()
}

/// A site's label (`site.label`), or null.
fn label(site: Option<&Value>) -> Value {
    site.and_then(|s| s.get("label"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// `keys` of `item`, a missing one as null.
fn pick(item: &Value, keys: &[&str]) -> Row {
    keys.iter()
        .map(|k| (k.to_string(), item.get(*k).cloned().unwrap_or(Value::Null)))
        .collect()
}

/// A row of `device` with its `site` label first (when `site`) and then `keys`.
fn row(device: &Value, item: &Value, keys: &[&str], site: bool) -> Row {
    let mut out = Row::new();
    out.insert("device".into(), device.clone());
    if site {
        out.insert("site".into(), label(item.get("site")));
    }
    out.extend(pick(item, keys));
    out
}

/// One table over the devices: each device's `items` (or, without `items`, what `each`
/// makes of the device itself) with the device's index.
fn per_device(
    doc: &Value,
    items: Option<&str>,
    each: impl Fn(&Value, &Value) -> Vec<Row> + Copy,
) -> Vec<Row> {
    let mut out = Vec::new();
    for dev in list(doc, "devices") {
        let index = dev.get("device").cloned().unwrap_or(Value::Null);
        match items {
            Some(key) => out.extend(list(dev, key).flat_map(|i| each(&index, i))),
            None => out.extend(each(&index, dev)),
        }
    }
    out
}

fn summary(device: &Value, dev: &Value) -> Vec<Row> {
    vec![row(device, dev, SUMMARY, false)]
}

/// The suspects, then the sites judged not to be (`suspect` says which).
fn leaks(device: &Value, dev: &Value) -> Vec<Row> {
    let mut out = Vec::new();
    for (key, suspect) in [("suspects", true), ("not_suspects", false)] {
        for s in list(dev, key) {
            let mut r = row(device, s, &["role", "kind"], true);
            r.insert("suspect".into(), suspect.into());
            r.extend(pick(s, SUSPECT));
            out.push(r);
        }
    }
    out
}

/// The call tree, depth first, each node with its depth.
fn tree(device: &Value, dev: &Value) -> Vec<Row> {
    let mut out = Vec::new();
    let mut stack: Vec<(&Value, u64)> = dev.get("root").into_iter().map(|r| (r, 0)).collect();
    while let Some((node, depth)) = stack.pop() {
        if node.is_null() {
            continue;
        }
        let mut r = Row::new();
        r.insert("device".into(), device.clone());
        r.insert("depth".into(), depth.into());
        r.extend(pick(node, &["name", "bytes", "self_bytes", "blocks"]));
        out.push(r);
        let children: Vec<&Value> = list(node, "children").collect();
        stack.extend(children.into_iter().rev().map(|c| (c, depth + 1)));
    }
    out
}

/// One row per window: its index, first event and name.
fn windows(device: &Value, dev: &Value) -> Vec<Row> {
    let names: Vec<&Value> = list(dev, "names").collect();
    list(dev, "starts")
        .enumerate()
        .map(|(i, start)| {
            let mut r = Row::new();
            r.insert("device".into(), device.clone());
            r.insert("window".into(), i.into());
            r.insert("start_event".into(), start.clone());
            let name = names.get(i).map_or(Value::Null, |n| (*n).clone());
            r.insert("name".into(), name);
            r
        })
        .collect()
}

/// Per device: the peak and how many suspects.
fn report(device: &Value, dev: &Value) -> Vec<Row> {
    let peak = dev.get("peak");
    let at = |k: &str| peak.and_then(|p| p.get(k)).cloned().unwrap_or(Value::Null);
    let suspects = dev.get("leaks").map_or(0, |l| list(l, "suspects").count());
    let mut r = Row::new();
    r.insert("device".into(), device.clone());
    r.insert("peak_event".into(), at("event_index"));
    r.insert("peak_requested_bytes".into(), at("requested_bytes"));
    let reserved = dev.get("peak_reserved_bytes").cloned();
    r.insert(
        "peak_reserved_bytes".into(),
        reserved.unwrap_or(Value::Null),
    );
    r.insert("suspects".into(), suspects.into());
    vec![r]
}

/// A value at a path of keys, or null.
fn at(v: &Value, path: &[&str]) -> Value {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .cloned()
        .unwrap_or(Value::Null)
}

/// One row per site of each paired device: both sides' rates and kinds.
fn compare(doc: &Value) -> Vec<Row> {
    let mut out = Vec::new();
    for dev in list(doc, "devices") {
        for s in list(dev, "sites") {
            let mut r = Row::new();
            r.insert("device_a".into(), at(dev, &["a", "device"]));
            r.insert("device_b".into(), at(dev, &["b", "device"]));
            r.insert("site".into(), label(s.get("site")));
            r.insert("role".into(), at(s, &["role"]));
            for side in ["a", "b"] {
                for k in ["bytes_per_window", "kind"] {
                    r.insert(format!("{side}_{k}"), at(s, &[side, k]));
                }
            }
            r.extend(pick(s, &["difference", "kind_changed"]));
            out.push(r);
        }
    }
    out
}

/// One row per site at the point: what each side holds there.
fn compare_at(doc: &Value) -> Vec<Row> {
    let mut out = Vec::new();
    for dev in list(doc, "devices") {
        for x in list(dev, "rows") {
            let mut r = pick(dev, &["device_a", "device_b"]);
            r.insert("site".into(), label(x.get("site")));
            r.extend(pick(x, &["role", "a_bytes", "b_bytes", "difference"]));
            out.push(r);
        }
    }
    out
}

/// One row per step, rank and device: the totals and the largest change; a pair that
/// could not be compared keeps one row with its error.
fn compare_steps(doc: &Value) -> Vec<Row> {
    let mut out = Vec::new();
    for p in list(doc, "steps") {
        let base = pick(p, &["step", "rank", "error"]);
        let devices: Vec<&Value> = p
            .get("compare")
            .map(|c| list(c, "devices").collect())
            .unwrap_or_default();
        if devices.is_empty() {
            let mut r = base.clone();
            r.insert("device".into(), Value::Null);
            out.push(r);
        }
        for dev in devices {
            let top = dev.get("rows").and_then(|r| r.get(0));
            let mut r = base.clone();
            r.insert("device".into(), at(dev, &["device_b"]));
            r.insert("a_bytes".into(), at(dev, &["a_total"]));
            r.insert("b_bytes".into(), at(dev, &["b_total"]));
            r.insert("difference".into(), at(dev, &["difference"]));
            let change = top.map_or(Value::Null, |t| at(t, &["difference"]));
            r.insert("largest_change".into(), change);
            r.insert(
                "largest_change_site".into(),
                label(top.and_then(|t| t.get("site"))),
            );
            out.push(r);
        }
    }
    out
}

/// One row per case of each file and device.
fn check(doc: &Value) -> Vec<Row> {
    let mut out = Vec::new();
    for f in list(doc, "files") {
        for dev in list(f, "devices") {
            for c in list(dev, "cases") {
                let mut r = pick(f, &["file"]);
                r.insert("device".into(), at(dev, &["device"]));
                r.extend(pick(c, &["name", "value", "limit", "passed"]));
                r.insert("site".into(), label(c.get("site")));
                r.extend(pick(c, &["role", "kind", "unjudged"]));
                out.push(r);
            }
        }
    }
    out
}
