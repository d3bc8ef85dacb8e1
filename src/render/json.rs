//! JSON output. Reports are `Serialize` and printed pretty; the call tree is written here
//! by hand, with an explicit stack, because serde would recurse once per tree level and a
//! tree is as deep as the deepest stack (thousands of frames in a crafted file).

use std::fmt::Write;

use petgraph::graph::NodeIndex;
use serde::Serialize;

use crate::analysis::tree::{CallTree, DeviceTree, NodeKind};
use crate::report::TreeReport;

/// `v` as pretty-printed JSON and a final newline.
pub fn pretty<T: Serialize>(v: &T) -> Result<String, serde_json::Error> {
    Ok(serde_json::to_string_pretty(v)? + "\n")
}

fn value<T: Serialize + ?Sized>(o: &mut String, v: &T) -> Result<(), serde_json::Error> {
    o.push_str(&serde_json::to_string(v)?);
    Ok(())
}

/// A node's own fields and the opening of its children:
/// `{name, [filename, line, function], bytes, self_bytes, blocks, self_blocks, children: [`.
fn open_node(o: &mut String, tree: &CallTree, n: NodeIndex) -> Result<(), serde_json::Error> {
    let node = tree.node(n);
    o.push_str("{\"name\":");
    value(o, &node.name)?;
    if let NodeKind::Frame(f) = &node.kind {
        o.push_str(",\"filename\":");
        value(o, &f.filename)?;
        o.push_str(",\"line\":");
        value(o, &f.line.known())?;
        o.push_str(",\"function\":");
        value(o, &f.function)?;
    }
    let _ = write!(
        o,
        ",\"bytes\":{},\"self_bytes\":{},\"blocks\":{},\"self_blocks\":{},\"children\":[",
        node.bytes, node.self_bytes, node.blocks, node.self_blocks
    );
    Ok(())
}

/// The tree as its root node with the subtrees nested, children largest first.
pub fn call_tree(o: &mut String, tree: &CallTree) -> Result<(), serde_json::Error> {
    // Each entry: a node, its children, and how many of them are written.
    let mut stack: Vec<(Vec<NodeIndex>, usize)> = Vec::new();
    open_node(o, tree, tree.root())?;
    stack.push((tree.children(tree.root()), 0));
    while let Some((children, done)) = stack.last_mut() {
        match children.get(*done).copied() {
            Some(c) => {
                if *done > 0 {
                    o.push(',');
                }
                *done += 1;
                open_node(o, tree, c)?;
                stack.push((tree.children(c), 0));
            }
            None => {
                o.push_str("]}");
                stack.pop();
            }
        }
    }
    Ok(())
}

fn device_tree(o: &mut String, d: &DeviceTree) -> Result<(), serde_json::Error> {
    let _ = write!(o, "{{\"device\":{},\"at\":", d.device);
    value(o, &d.at)?;
    let _ = write!(
        o,
        ",\"total_bytes\":{},\"total_blocks\":{},\"root\":",
        d.total_bytes, d.total_blocks
    );
    call_tree(o, &d.tree)?;
    o.push('}');
    Ok(())
}

/// The `tree` report as compact JSON (`leakscope.tree/4`) and a final newline.
pub fn tree(r: &TreeReport) -> Result<String, serde_json::Error> {
    let mut o = String::with_capacity(4096);
    o.push_str("{\"schema\":");
    value(&mut o, r.schema)?;
    o.push_str(",\"file\":");
    value(&mut o, &r.file)?;
    if let Some(at) = &r.at {
        o.push_str(",\"at\":");
        value(&mut o, at)?;
    }
    o.push_str(",\"devices\":[");
    for (i, d) in r.devices.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        device_tree(&mut o, d)?;
    }
    o.push(']');
    if !r.unresolved.is_empty() {
        o.push_str(",\"unresolved\":");
        value(&mut o, &r.unresolved)?;
    }
    o.push_str(",\"idle_devices\":");
    value(&mut o, &r.idle_devices)?;
    o.push_str("}\n");
    Ok(o)
}
