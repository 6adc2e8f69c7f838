//! A chart's values.schema.json: its structure bounded before the jsonschema
//! crate sees it (it follows `$ref` and the combinators on the stack), and
//! the merged values checked against it, each error located at the layer
//! that set the value.

use super::*;

/// Most schemas one value can be checked against in a row without moving
/// into it: `$ref`, `allOf`/`anyOf`/`oneOf`, `not`, `if`/`then`/`else` and
/// schema dependencies chained. The jsonschema crate follows each on the stack.
pub const MAX_SCHEMA_CHAIN: usize = 64;
/// Most subschemas a values.schema.json may hold.
pub const MAX_SCHEMA_NODES: usize = 100_000;

/// Keywords whose schema applies to the same value (a chain of them does not
/// move into the value, so a cycle of them never ends).
const SAME_VALUE_ONE: &[&str] = &["not", "if", "then", "else"];
const SAME_VALUE_LIST: &[&str] = &["allOf", "anyOf", "oneOf"];
const SAME_VALUE_MAP: &[&str] = &["dependentSchemas", "dependencies"];
/// Keywords whose schemas apply to parts of the value.
const INNER_ONE: &[&str] = &[
    "additionalProperties",
    "additionalItems",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "items",
];
const INNER_LIST: &[&str] = &["items", "prefixItems"];
const INNER_MAP: &[&str] = &["properties", "patternProperties"];
/// Keywords holding schemas that apply only through a `$ref`.
const DEFINITIONS: &[&str] = &["definitions", "$defs"];

/// A JSON pointer segment, escaped.
fn pointer_segment(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The pointer a `$ref` names, when it is one inside the document (`#`,
/// `#/a/b`, percent-encoded as a URI fragment).
fn ref_pointer(r: &str) -> Option<String> {
    let frag = r.strip_prefix('#')?;
    if !(frag.is_empty() || frag.starts_with('/')) {
        return None;
    }
    let bytes = frag.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The subschemas of the schema at `ptr`: (pointer, applies to the same value).
fn subschemas(ptr: &str, node: &Value) -> Result<Vec<(String, bool)>, String> {
    let Value::Object(m) = node else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    let at = |k: &str| format!("{ptr}/{}", pointer_segment(k));
    if let Some(r) = m.get("$ref").and_then(Value::as_str) {
        match ref_pointer(r) {
            Some(p) => out.push((p, true)),
            None => {
                return Err(format!(
                    "{}: $ref {r:?}: only references inside values.schema.json (`#/...`) are supported",
                    display_pointer(ptr)
                ))
            }
        }
    }
    if !ptr.is_empty() {
        for id in ["$id", "id"] {
            if let Some(v) = m.get(id).and_then(Value::as_str).filter(|v| !v.starts_with('#')) {
                return Err(format!(
                    "{}: {id} {v:?}: a nested {id} is not supported (it changes what `#` refers to)",
                    display_pointer(ptr)
                ));
            }
        }
    }
    for (k, v) in m {
        let same = SAME_VALUE_ONE.contains(&k.as_str())
            || SAME_VALUE_LIST.contains(&k.as_str())
            || SAME_VALUE_MAP.contains(&k.as_str());
        let base = at(k);
        match v {
            Value::Object(inner)
                if SAME_VALUE_MAP.contains(&k.as_str())
                    || INNER_MAP.contains(&k.as_str())
                    || DEFINITIONS.contains(&k.as_str()) =>
            {
                for (name, sub) in inner {
                    if sub.is_object() || sub.is_boolean() {
                        out.push((format!("{base}/{}", pointer_segment(name)), same));
                    }
                }
            }
            Value::Object(_) | Value::Bool(_)
                if SAME_VALUE_ONE.contains(&k.as_str()) || INNER_ONE.contains(&k.as_str()) =>
            {
                out.push((base, same));
            }
            Value::Array(items) if SAME_VALUE_LIST.contains(&k.as_str()) || INNER_LIST.contains(&k.as_str()) => {
                for (i, _) in items.iter().enumerate() {
                    out.push((format!("{base}/{i}"), same));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

fn display_pointer(p: &str) -> String {
    if p.is_empty() {
        "#".into()
    } else {
        format!("#{p}")
    }
}

/// Refuses a schema that the jsonschema crate would follow without end (a
/// `$ref` back to itself, directly or through `allOf` and the like, without
/// moving into the value) or too far ([`MAX_SCHEMA_CHAIN`]), and references
/// it cannot see through. Cycles that move into the value (a tree type:
/// `properties: {children: {items: {$ref: "#"}}}`) end with the value and are
/// fine.
pub fn check_schema_structure(schema: &Value) -> Result<(), String> {
    // Every subschema reachable from the root, and its same-value edges.
    let mut edges: HashMap<String, Vec<String>> = HashMap::new();
    let mut todo = vec![String::new()];
    while let Some(ptr) = todo.pop() {
        if edges.contains_key(&ptr) {
            continue;
        }
        if edges.len() >= MAX_SCHEMA_NODES {
            return Err(format!(
                "more than {MAX_SCHEMA_NODES} subschemas (the limit for values.schema.json)"
            ));
        }
        let Some(node) = schema.pointer(&ptr) else {
            // A $ref to nothing: the jsonschema crate reports it.
            edges.insert(ptr, Vec::new());
            continue;
        };
        let mut same = Vec::new();
        for (sub, is_same) in subschemas(&ptr, node)? {
            if is_same {
                same.push(sub.clone());
            }
            todo.push(sub);
        }
        edges.insert(ptr, same);
    }
    // Longest same-value chain from each subschema, without recursion: 0 =
    // unvisited, 1 = on the current path, 2 = done.
    let mut state: HashMap<&str, u8> = HashMap::new();
    let mut longest: HashMap<&str, usize> = HashMap::new();
    for start in edges.keys() {
        if state.get(start.as_str()).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut stack: Vec<(&str, usize)> = vec![(start.as_str(), 0)];
        state.insert(start, 1);
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let out = &edges[node];
            if *next < out.len() {
                let child = out[*next].as_str();
                *next += 1;
                match state.get(child).copied().unwrap_or(0) {
                    0 => {
                        state.insert(child, 1);
                        stack.push((child, 0));
                    }
                    1 => {
                        let from = stack.iter().position(|(n, _)| *n == child).unwrap_or(0);
                        let path: Vec<String> = stack[from..].iter().map(|(n, _)| display_pointer(n)).collect();
                        return Err(format!(
                            "{} refers back to itself through {} without moving into the value: checking it would never end",
                            display_pointer(child),
                            path.join(" -> ")
                        ));
                    }
                    _ => {}
                }
            } else {
                let len = 1 + out
                    .iter()
                    .map(|c| longest.get(c.as_str()).copied().unwrap_or(0))
                    .max()
                    .unwrap_or(0);
                if len > MAX_SCHEMA_CHAIN {
                    return Err(format!(
                        "{} starts a chain of more than {MAX_SCHEMA_CHAIN} schemas ($ref, allOf, ...) applied to one value (the limit for values.schema.json)",
                        display_pointer(node)
                    ));
                }
                longest.insert(node, len);
                state.insert(node, 2);
                stack.pop();
            }
        }
    }
    Ok(())
}

pub(super) fn validate_schema(
    release: &str,
    chart: &str,
    schema: &Value,
    merged: &Value,
    layers: &[ValuesLayer],
) -> Result<(), ValuesError> {
    let bad = |message: String| ValuesError::BadSchema {
        release: release.into(),
        chart: chart.into(),
        message,
    };
    check_schema_structure(schema).map_err(bad)?;
    // The jsonschema crate recurses once per schema it follows and per level
    // of the value: bounded above, run on a known stack.
    let errors = crate::deep::on_big_stack(|| {
        let compiled = jsonschema::JSONSchema::compile(schema).map_err(|e| e.to_string())?;
        let errors: Vec<_> = match compiled.validate(merged) {
            Ok(()) => Vec::new(),
            Err(errors) => errors.map(|e| (e.instance_path.clone(), e.to_string())).collect(),
        };
        Ok::<_, String>(errors)
    })
    .map_err(|e| bad(format!("cannot start a thread to check values: {e}")))?
    .map_err(bad)?;
    if errors.is_empty() {
        return Ok(());
    }
    let mut out = Vec::new();
    for (instance_path, e) in errors {
        let segments: Vec<String> = instance_path
            .iter()
            .map(|c| match c {
                jsonschema::paths::PathChunk::Property(p) => p.to_string(),
                jsonschema::paths::PathChunk::Index(i) => i.to_string(),
                jsonschema::paths::PathChunk::Keyword(k) => k.to_string(),
            })
            .collect();
        let (path, origin) = locate_value(&segments, merged, layers);
        let shown = if path.is_empty() {
            "(top level)".to_string()
        } else {
            path
        };
        out.push(format!("{origin}: release {release:?}: value {shown}: {e}"));
    }
    Err(ValuesError::Schema(out))
}
