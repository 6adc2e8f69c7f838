//! Typed plugin parameters: checking a plugin's own declarations, and the
//! values cluster.yaml gives them, layered per scope (cluster, then the
//! controller's or a pool's overrides). Secret values are never quoted.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use indexmap::IndexMap;
use regex::Regex;
use serde_json::Value;

use super::discover::PluginDef;
use super::model::{ParamSpec, ParamType};
use crate::located::{did_you_mean, join_key, Located, SourceMap};

static PARAM_NAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[A-Za-z][A-Za-z0-9_]*$").unwrap());

/// A short description of a value for messages: its type and, unless
/// secret, the value itself.
pub fn describe(v: &Value, secret: bool) -> String {
    let kind = match v {
        Value::Null => return "null".into(),
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => return "a list".into(),
        Value::Object(_) => return "a map".into(),
    };
    if secret {
        format!("a {kind} (value hidden: the parameter is secret)")
    } else {
        format!("{kind} {v}")
    }
}

fn has_type(kind: ParamType, v: &Value) -> bool {
    match kind {
        ParamType::String => v.is_string(),
        ParamType::Integer => v.is_i64() || v.is_u64(),
        ParamType::Number => v.is_number(),
        ParamType::Boolean => v.is_boolean(),
        ParamType::List => v.is_array(),
        ParamType::Map => v.is_object(),
    }
}

/// "a string", "an integer", …
pub fn article(kind: ParamType) -> String {
    match kind {
        ParamType::Integer => "an integer".into(),
        k => format!("a {}", k.as_str()),
    }
}

/// Checks `v` against `spec`; the message says what is wrong and how to fix it.
pub fn check_value(spec: &ParamSpec, v: &Value) -> Result<(), String> {
    let shown = describe(v, spec.secret);
    if !has_type(spec.kind, v) {
        let mut msg = format!("expected {}, found {shown}", article(spec.kind));
        if spec.kind == ParamType::String && (v.is_number() || v.is_boolean()) {
            msg.push_str(" (quote it to make it a string)");
        }
        return Err(msg);
    }
    if let Some(allowed) = &spec.allowed {
        if !allowed.contains(v) {
            let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
            return Err(format!("{shown} is not allowed (use one of: {})", list.join(", ")));
        }
    }
    if let (Some(pattern), Some(s)) = (&spec.pattern, v.as_str()) {
        // The pattern was checked when the plugin was loaded.
        if let Ok(re) = compiled(pattern) {
            if !re.is_match(s) {
                return Err(format!("{shown} does not match the pattern {pattern:?}"));
            }
        }
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = spec.minimum {
            if n < min {
                return Err(format!("{shown} is below the minimum {min}"));
            }
        }
        if let Some(max) = spec.maximum {
            if n > max {
                return Err(format!("{shown} is above the maximum {max}"));
            }
        }
    }
    Ok(())
}

/// `pattern` compiled, once per process: a plugin's patterns are checked for
/// every value of every scope (the controllers, each pool) and again with the
/// specs, and compiling dominated the check (docs/testing.md, "The render's
/// speed").
fn compiled(pattern: &str) -> Result<Regex, regex::Error> {
    static SEEN: LazyLock<Mutex<HashMap<String, Regex>>> = LazyLock::new(Default::default);
    let mut seen = SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(re) = seen.get(pattern) {
        return Ok(re.clone());
    }
    let re = Regex::new(pattern)?;
    seen.insert(pattern.to_string(), re.clone());
    Ok(re)
}

/// Checks a plugin's parameter declarations: names, constraints that fit the
/// type, and defaults that pass their own constraints.
pub fn check_specs(def: &PluginDef) -> Vec<Located> {
    let mut errors = Vec::new();
    for (name, spec) in &def.manifest.spec.parameters {
        let base = join_key("spec.parameters", name);
        if !PARAM_NAME.is_match(name) {
            errors.push(def.err(
                &base,
                format!("{name:?} is not a valid parameter name (use letters, digits and '_', starting with a letter)"),
            ));
        }
        if name == "enabled" {
            errors.push(def.err(&base, "\"enabled\" is reserved (it turns the plugin on and off)"));
        }
        if let Some(p) = &spec.pattern {
            if spec.kind != ParamType::String {
                errors.push(def.err(
                    &join_key(&base, "pattern"),
                    format!("pattern only applies to strings, not to a {}", spec.kind.as_str()),
                ));
            } else if let Err(e) = compiled(p) {
                errors.push(def.err(
                    &join_key(&base, "pattern"),
                    format!("{p:?} is not a regular expression: {e}"),
                ));
            }
        }
        for (key, bound) in [("minimum", spec.minimum), ("maximum", spec.maximum)] {
            if bound.is_some() && !matches!(spec.kind, ParamType::Integer | ParamType::Number) {
                errors.push(def.err(
                    &join_key(&base, key),
                    format!("{key} only applies to numbers, not to a {}", spec.kind.as_str()),
                ));
            }
        }
        if let (Some(min), Some(max)) = (spec.minimum, spec.maximum) {
            if min > max {
                errors.push(def.err(
                    &join_key(&base, "minimum"),
                    format!("minimum {min} is above maximum {max}"),
                ));
            }
        }
        if let Some(allowed) = &spec.allowed {
            for (i, v) in allowed.iter().enumerate() {
                if !has_type(spec.kind, v) {
                    errors.push(def.err(
                        &format!("{base}.enum[{i}]"),
                        format!("expected {}, found {}", article(spec.kind), describe(v, false)),
                    ));
                }
            }
        }
        if let Some(d) = &spec.default {
            if spec.required {
                errors.push(def.err(
                    &join_key(&base, "default"),
                    "a required parameter cannot have a default (drop one of them)",
                ));
            } else if let Err(why) = check_value(spec, d) {
                errors.push(def.err(&join_key(&base, "default"), format!("the default is invalid: {why}")));
            }
        }
    }
    errors
}

/// One layer of values from cluster.yaml: the settings map and its key path
/// (`plugins.dex`, `controller.plugins.dex`, …).
pub struct Layer<'a> {
    pub values: &'a IndexMap<String, Value>,
    pub path: String,
}

/// Layers `layers` (lowest first) over the defaults and checks the result.
/// Errors are located in cluster.yaml. `missing_at` is where a missing
/// required parameter is reported.
pub fn resolve_values(
    def: &PluginDef,
    layers: &[Layer<'_>],
    file: &std::path::Path,
    map: &SourceMap,
    missing_at: &str,
) -> Result<IndexMap<String, Value>, Vec<Located>> {
    let params = &def.manifest.spec.parameters;
    let names: Vec<&str> = params.keys().map(String::as_str).collect();
    let mut errors = Vec::new();
    let mut out: IndexMap<String, Value> = IndexMap::new();
    // Parameters given a bad value are reported once, not also as missing.
    let mut given_bad: Vec<&str> = Vec::new();
    for (name, spec) in params {
        if let Some(d) = &spec.default {
            out.insert(name.clone(), d.clone());
        }
    }
    for layer in layers {
        for (key, v) in layer.values {
            let path = join_key(&layer.path, key);
            let Some(spec) = params.get(key) else {
                let mut hint = did_you_mean(key, &names);
                if hint.is_empty() {
                    hint = if names.is_empty() {
                        " (it takes no parameters)".into()
                    } else {
                        format!(" (parameters: {})", names.join(", "))
                    };
                }
                let msg = format!("plugin {:?} has no parameter {key:?}{hint}", def.name());
                errors.push(Located::new(
                    file,
                    map.key(&path).unwrap_or_else(|| map.locate(&path)),
                    &path,
                    msg,
                ));
                continue;
            };
            // null means "not set here": the layer below (or the default) stays.
            if v.is_null() {
                continue;
            }
            match check_value(spec, v) {
                Ok(()) => {
                    out.insert(key.clone(), v.clone());
                }
                Err(why) => {
                    given_bad.push(key);
                    errors.push(Located::new(file, map.locate(&path), &path, why))
                }
            }
        }
    }
    for (name, spec) in params {
        if spec.required && !out.contains_key(name) && !given_bad.contains(&name.as_str()) {
            errors.push(Located::new(
                file,
                map.key(missing_at).unwrap_or_else(|| map.locate(missing_at)),
                missing_at,
                format!(
                    "plugin {:?} needs parameter {name:?} ({}{}); set it under {missing_at}",
                    def.name(),
                    spec.kind.as_str(),
                    if spec.description.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", spec.description)
                    }
                ),
            ));
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(yaml: &str) -> ParamSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn types_are_strict() {
        let s = spec("type: string");
        assert!(check_value(&s, &json!("x")).is_ok());
        let e = check_value(&s, &json!(8080)).unwrap_err();
        assert_eq!(
            e,
            "expected a string, found integer 8080 (quote it to make it a string)"
        );
        let i = spec("type: integer");
        assert!(check_value(&i, &json!(3)).is_ok());
        assert!(check_value(&i, &json!(3.5)).unwrap_err().contains("found number 3.5"));
        assert!(check_value(&spec("type: number"), &json!(3)).is_ok());
        assert!(check_value(&spec("type: boolean"), &json!("true")).is_err());
        assert!(check_value(&spec("type: list"), &json!([1])).is_ok());
        assert_eq!(
            check_value(&spec("type: map"), &json!([1])).unwrap_err(),
            "expected a map, found a list"
        );
    }

    #[test]
    fn constraints() {
        let s = spec("type: string\npattern: '^https://'");
        assert!(check_value(&s, &json!("https://x")).is_ok());
        assert!(check_value(&s, &json!("http://x"))
            .unwrap_err()
            .contains("does not match the pattern"));
        let e = spec("type: string\nenum: [a, b]");
        assert_eq!(
            check_value(&e, &json!("c")).unwrap_err(),
            "string \"c\" is not allowed (use one of: \"a\", \"b\")"
        );
        let n = spec("type: integer\nminimum: 1\nmaximum: 10");
        assert!(check_value(&n, &json!(0)).unwrap_err().contains("below the minimum 1"));
        assert!(check_value(&n, &json!(11))
            .unwrap_err()
            .contains("above the maximum 10"));
        assert!(check_value(&n, &json!(10)).is_ok());
    }

    #[test]
    fn secrets_are_never_quoted() {
        let s = spec("type: string\nsecret: true\npattern: '^[a-z]+$'");
        let e = check_value(&s, &json!("Hunter2")).unwrap_err();
        assert!(!e.contains("Hunter2"), "{e}");
        assert!(e.contains("value hidden"), "{e}");
        let e = check_value(&s, &json!(12345)).unwrap_err();
        assert!(!e.contains("12345"), "{e}");
    }
}
