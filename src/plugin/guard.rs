//! Limits on plugin templates, so that no template can crash, hang or read
//! outside kube-aws (docs/limits.md).
//!
//! tera recurses on the stack for every nested expression, block, macro call
//! and include, and has no limit of its own: a self-calling macro or a
//! template that includes itself overflows the stack and aborts the process.
//! So, before tera sees a template, [`prescan`] reads its tags and refuses:
//! - nesting of `(`/`[` or of blocks deeper than [`MAX_NESTING`], and more
//!   than [`MAX_OPERATORS`] operators in one tag (tera nests each operator);
//! - `include`, `extends` and `import` (each plugin file is rendered on its
//!   own, so the only template they could name is the file itself);
//! - any function but `range` and `throw`: tera's `get_env` reads the
//!   environment of the machine running kube-aws (`now` and `get_random` are
//!   not built in, see Cargo.toml's tera features).
//!
//! What can only be known while rendering is counted by calls kube-aws adds
//! to the parsed template ([`super::instrument`]): the depth of macro calls
//! ([`MAX_MACRO_DEPTH`]) and the number of macro calls plus loop iterations
//! ([`MAX_STEPS`]), and the size and depth of every value a template keeps
//! (`set`, `set_global`, a macro's arguments: [`MAX_VALUE_BYTES`],
//! [`MAX_VALUE_DEPTH`]), so a value doubled in a loop or through a recursive
//! macro stops at the limit, not at the machine's memory; one tag can combine
//! at most [`MAX_OPERATORS`] such values. Values built within one expression
//! (by a filter, `~`, a list literal, a call's arguments) and the bytes a
//! render writes are bounded too ([`super::grow`], [`MAX_WRITTEN`]).
//! Rendering runs on a thread with a known stack
//! ([`crate::deep::STACK_SIZE`]),
//! which these limits keep far from full (tests/it/hostile_parsers.rs renders
//! at each limit).

use std::cell::RefCell;
use std::collections::HashMap;

use tera::Value;

mod prescan;
pub use prescan::{line_col, prescan, Refusal, Scan, Tag};

/// Most levels of `(`/`[` in one tag, and of blocks (`if`, `for`, `macro`,
/// `filter`, `block`) around any point of a template.
pub const MAX_NESTING: usize = 32;
/// Most operators (`+ - * / % and or`) in one tag.
pub const MAX_OPERATORS: usize = 256;
/// Most macro calls open at once (a macro calling itself counts each level).
pub const MAX_MACRO_DEPTH: usize = 64;
/// Most macro calls plus loop iterations while rendering one template.
pub const MAX_STEPS: usize = 100_000;
/// Most items `range()` may produce.
pub const MAX_RANGE: usize = 100_000;
/// Most bytes of one value a template builds: kept (`set`, `set_global`, a
/// macro's arguments), made by a filter, or built from parts by tera (`~`, a
/// list literal, the arguments of one call, with what the enclosing
/// expression holds meanwhile), in the measure of [`value_size`].
pub const MAX_VALUE_BYTES: usize = 4 * 1024 * 1024;
/// What each item of a list or map counts on top of its contents (about
/// what it takes in memory).
pub const ITEM_BYTES: usize = 32;
/// Most bytes of the arguments of one call (filter, function, test, macro)
/// together: two values at the bound (`replace(from=a, to=b)`).
pub const MAX_ARGS_BYTES: usize = 2 * MAX_VALUE_BYTES;
/// Most bytes held at once by the values being built from parts inside one
/// another (a list literal whose item is a call whose argument is a `~`).
pub const MAX_HELD_BYTES: usize = 4 * MAX_VALUE_BYTES;
/// Most levels of lists and maps in one such value.
pub const MAX_VALUE_DEPTH: usize = 64;
/// Most bytes one rendered template may produce.
pub const MAX_OUTPUT: usize = 16 * 1024 * 1024;
/// Most bytes one render may write, counted where they are written: into
/// the output, and into the buffers tera fills with a macro's result or a
/// `filter` section's body (what a macro writes counts again where its
/// result is written).
pub const MAX_WRITTEN: usize = 32 * 1024 * 1024;
/// Stack kept free below the limits: a guard call that finds less left refuses.
const STACK_RESERVE: usize = 32 * 1024 * 1024;

/// The functions templates may call.
pub const FUNCTIONS: &[&str] = &["range", "throw"];

pub(super) const ENTER: &str = "__kube_aws_enter";
pub(super) const LEAVE: &str = "__kube_aws_leave";
pub(super) const STEP: &str = "__kube_aws_step";
pub(super) const BOUND: &str = "__kube_aws_bound";

/// What stopped a render, found by the calls [`super::instrument`] adds.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// Macro calls nested deeper than [`MAX_MACRO_DEPTH`] (or the stack ran
    /// low) in the macro whose tag starts at `offset`.
    Depth { macro_name: String, offset: usize },
    /// More than [`MAX_STEPS`] macro calls and loop iterations; `offset` is
    /// the tag that took the last step.
    Steps { offset: usize },
    /// A value over [`MAX_VALUE_BYTES`] or [`MAX_VALUE_DEPTH`], kept by the
    /// `set` tag or passed to the macro (`macro_name`) at `offset`.
    Value {
        offset: usize,
        macro_name: Option<String>,
        why: String,
    },
    /// A filter (`what` is "filter `replace`") whose result would be `size`
    /// bytes, or an operator, list literal or call's arguments (`size`
    /// unknown) whose value would pass `limit`, at `offset`.
    Grow {
        offset: usize,
        what: String,
        size: Option<usize>,
        limit: usize,
    },
    /// More than [`MAX_WRITTEN`] bytes written; `offset` is the tag (or the
    /// block around the text) that passed it.
    Written { offset: usize },
}

#[derive(Default)]
struct State {
    depth: usize,
    steps: usize,
    stack_base: usize,
    stop: Option<Stop>,
    /// Values being built from parts: (group, bytes so far), innermost last.
    groups: Vec<(usize, usize)>,
    written: usize,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

fn stack_address() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// Starts counting for one render on this thread.
pub fn begin() {
    STATE.with(|s| {
        *s.borrow_mut() = State {
            stack_base: stack_address(),
            ..State::default()
        }
    });
}

/// Why the last render on this thread was stopped, if a limit stopped it.
pub fn stopped() -> Option<Stop> {
    STATE.with(|s| s.borrow().stop.clone())
}

fn offset_arg(args: &HashMap<String, Value>) -> usize {
    args.get("at").and_then(Value::as_u64).unwrap_or(0) as usize
}

/// Records why the render stops (the first reason, if tera swallows the
/// error and goes on) and returns the error that stops it.
pub(super) fn stop(reason: Stop) -> tera::Result<Value> {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        if s.stop.is_none() {
            s.stop = Some(reason);
        }
    });
    Err(tera::Error::msg("stopped by a kube-aws template limit"))
}

/// Adds `size` to the value group `group` is building; returns its total
/// and what all open groups hold together. A `first` part opens the group.
/// Groups left open by an error that tera swallowed are closed when an
/// enclosing group goes on.
pub(super) fn add_to_group(group: usize, first: bool, size: usize) -> (usize, usize) {
    STATE.with(|s| {
        let groups = &mut s.borrow_mut().groups;
        let found = groups.iter().rposition(|g| g.0 == group);
        match found {
            Some(at) if !first => groups.truncate(at + 1),
            _ => groups.push((group, 0)),
        }
        let top = groups.last_mut().expect("a group was just found or opened");
        top.1 = top.1.saturating_add(size);
        let own = top.1;
        let held = groups.iter().fold(0usize, |n, g| n.saturating_add(g.1));
        (own, held)
    })
}

/// Closes group `group` (and any left open inside it).
pub(super) fn end_group(group: usize) {
    STATE.with(|s| {
        let groups = &mut s.borrow_mut().groups;
        if let Some(at) = groups.iter().rposition(|g| g.0 == group) {
            groups.truncate(at);
        }
    });
}

/// Counts `bytes` written by the tag at `offset`; refuses past [`MAX_WRITTEN`].
pub(super) fn written(bytes: usize, offset: usize) -> tera::Result<()> {
    let over = STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.written = s.written.saturating_add(bytes);
        s.written > MAX_WRITTEN
    });
    if over {
        stop(Stop::Written { offset })?;
    }
    Ok(())
}

fn step(offset: usize) -> tera::Result<()> {
    let over = STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.steps += 1;
        s.steps > MAX_STEPS
    });
    if over {
        stop(Stop::Steps { offset })?;
    }
    Ok(())
}

/// The size of `v` as the limits count it: a string by its length, a
/// number, a boolean or null 8 bytes, and each item of a list or map
/// [`ITEM_BYTES`] more (plus its key's length), so that a list of many small
/// items counts what it takes in memory. Stops counting past
/// [`MAX_VALUE_BYTES`] (the result is then larger than the bound, not exact).
pub fn value_size(v: &Value) -> usize {
    let mut bytes = 0usize;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        bytes = bytes.saturating_add(own_size(v));
        if bytes > MAX_VALUE_BYTES {
            break;
        }
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(m) => stack.extend(m.values()),
            _ => {}
        }
    }
    bytes
}

/// What `v` counts without its items' contents.
fn own_size(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Array(items) => items.len().saturating_mul(ITEM_BYTES),
        Value::Object(m) => m.keys().fold(0usize, |n, k| n.saturating_add(ITEM_BYTES + k.len())),
        _ => 8,
    }
}

/// Why `v` is over [`MAX_VALUE_BYTES`] or [`MAX_VALUE_DEPTH`], if it is;
/// walks without recursion and stops at the first limit passed.
pub fn value_problem(v: &Value) -> Option<String> {
    let mut stack = vec![(v, 1usize)];
    while let Some((v, depth)) = stack.pop() {
        match v {
            Value::Array(_) | Value::Object(_) if depth > MAX_VALUE_DEPTH => {
                return Some(format!("nests lists and maps more than {MAX_VALUE_DEPTH} levels deep"))
            }
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, depth + 1))),
            Value::Object(m) => stack.extend(m.values().map(|i| (i, depth + 1))),
            _ => {}
        }
    }
    (value_size(v) > MAX_VALUE_BYTES).then(|| format!("is larger than {MAX_VALUE_BYTES} bytes"))
}

/// The filter [`super::instrument`] puts after each `set` value.
fn bound(v: &Value, args: &HashMap<String, Value>) -> tera::Result<Value> {
    match value_problem(v) {
        Some(why) => stop(Stop::Value {
            offset: offset_arg(args),
            macro_name: None,
            why,
        }),
        None => Ok(v.clone()),
    }
}

fn enter(args: &HashMap<String, Value>) -> tera::Result<Value> {
    let offset = offset_arg(args);
    step(offset)?;
    let macro_name = args.get("m").and_then(Value::as_str).unwrap_or("").to_string();
    // The macro's arguments, passed as `v_<name>` (see `instrument`).
    let mut passed: Vec<_> = args.iter().filter(|(k, _)| k.starts_with("v_")).collect();
    passed.sort_by_key(|(k, _)| k.as_str());
    for (k, v) in passed {
        if let Some(why) = value_problem(v) {
            return stop(Stop::Value {
                offset,
                macro_name: Some(macro_name),
                why: format!("its argument `{}` {why}", &k[2..]),
            });
        }
    }
    let (depth, base) = STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.depth += 1;
        (s.depth, s.stack_base)
    });
    let used = base.saturating_sub(stack_address());
    if depth > MAX_MACRO_DEPTH || used > crate::deep::STACK_SIZE - STACK_RESERVE {
        return stop(Stop::Depth { macro_name, offset });
    }
    Ok(Value::String(String::new()))
}

fn leave(_: &HashMap<String, Value>) -> tera::Result<Value> {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.depth = s.depth.saturating_sub(1);
    });
    Ok(Value::String(String::new()))
}

fn loop_step(args: &HashMap<String, Value>) -> tera::Result<Value> {
    step(offset_arg(args))?;
    Ok(Value::String(String::new()))
}

/// tera's `range`, refusing more than [`MAX_RANGE`] items and a zero step
/// (tera's own loops forever on `step_by=0`).
fn range(args: &HashMap<String, Value>) -> tera::Result<Value> {
    let num = |k: &str, default: Option<u64>| -> tera::Result<u64> {
        match args.get(k) {
            Some(v) => v
                .as_u64()
                .ok_or_else(|| tera::Error::msg(format!("`range` got {k}={v}, but {k} must be a whole number"))),
            None => default.ok_or_else(|| tera::Error::msg(format!("`range` needs `{k}`"))),
        }
    };
    let start = num("start", Some(0))?;
    let end = num("end", None)?;
    let step = num("step_by", Some(1))?;
    if step == 0 {
        return Err(tera::Error::msg("`range` got step_by=0, which never ends"));
    }
    if start > end {
        return Err(tera::Error::msg("`range` got a start greater than its end"));
    }
    let count = (end - start).div_ceil(step);
    if count > MAX_RANGE as u64 {
        return Err(tera::Error::msg(format!(
            "`range` would make {count} items, more than the limit of {MAX_RANGE}"
        )));
    }
    Ok(Value::Array(
        (start..end).step_by(step as usize).map(Value::from).collect(),
    ))
}

/// A fresh tera with only the functions plugin templates may call, and the
/// counting calls [`super::instrument`] adds.
pub fn tera() -> tera::Tera {
    let mut t = tera::Tera::default();
    // Not callable even if a template got past the pre-scan.
    t.register_function("get_env", |_: &HashMap<String, Value>| -> tera::Result<Value> {
        Err(tera::Error::msg("`get_env` is not available in plugin templates"))
    });
    t.register_function("range", range);
    t.register_function(ENTER, enter);
    t.register_function(LEAVE, leave);
    t.register_function(STEP, loop_step);
    t.register_filter(BOUND, bound);
    // Templates write YAML and JSON: never HTML-escaped, whatever the
    // template's name (tera escapes names ending .html, .htm, .xml).
    t.autoescape_on(vec![]);
    super::grow::register(&mut t);
    t
}

/// A writer that refuses to grow past [`MAX_OUTPUT`] bytes.
#[derive(Default)]
pub struct Bounded(pub Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_OUTPUT {
            return Err(std::io::Error::other(OUTPUT_TOO_BIG));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The message of [`Bounded`]'s refusal.
pub const OUTPUT_TOO_BIG: &str = "the rendered template is larger than 16 MiB (the limit for one plugin template)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prescan_refuses_get_env_and_allows_filters_tests_macros() {
        let e = prescan("a\n{{ get_env(name=\"HOME\") }}").unwrap_err();
        assert_eq!(line_col("a\n{{ get_env(name=\"HOME\") }}", e.offset), (2, 4));
        assert!(e.message.contains("get_env"), "{}", e.message);
        prescan("{% macro f(a) %}{{ a | replace(from=\"x\", to=\"y\") }}{% endmacro %}{{ self::f(a=1) }}").unwrap();
        prescan("{% if x is divisibleby(3) or x is not divisibleby(2) %}{% endif %}").unwrap();
        prescan("{% for i in range(end=3) %}{% filter upper() %}x{% endfilter %}{% endfor %}").unwrap();
        prescan("{% raw %}{{ get_env(name='X') }}{% endraw %}").unwrap();
        prescan("{{ \"get_env(\" }}").unwrap();
        assert!(prescan("{% set x = now() %}").is_err());
    }

    #[test]
    fn prescan_bounds_nesting_and_refuses_includes() {
        let deep = format!(
            "{{{{ {}1{} }}}}",
            "(".repeat(MAX_NESTING + 1),
            ")".repeat(MAX_NESTING + 1)
        );
        assert!(prescan(&deep).unwrap_err().message.contains("nested"));
        let ok = format!("{{{{ {}1{} }}}}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        prescan(&ok).unwrap();
        let blocks = "{% if a %}".repeat(MAX_NESTING + 1);
        assert!(prescan(&blocks).unwrap_err().message.contains("blocks"));
        assert!(prescan("{% include \"t\" %}").unwrap_err().message.contains("include"));
        let ops = format!("{{{{ 1{} }}}}", "+1".repeat(MAX_OPERATORS + 1));
        assert!(prescan(&ops).unwrap_err().message.contains("operators"));
    }

    #[test]
    fn range_is_bounded() {
        let args =
            |e: u64, s: u64| HashMap::from([("end".to_string(), Value::from(e)), ("step_by".into(), Value::from(s))]);
        assert_eq!(range(&args(5, 2)).unwrap(), serde_json::json!([0, 2, 4]));
        assert!(range(&args(5, 0)).is_err());
        assert!(range(&args(MAX_RANGE as u64 + 1, 1)).is_err());
    }
}
