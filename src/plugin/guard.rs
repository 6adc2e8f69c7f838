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
//! to the parsed template ([`instrument`]): the depth of macro calls
//! ([`MAX_MACRO_DEPTH`]) and the number of macro calls plus loop iterations
//! ([`MAX_STEPS`]), and the size and depth of every value a template keeps
//! (`set`, `set_global`, a macro's arguments: [`MAX_VALUE_BYTES`],
//! [`MAX_VALUE_DEPTH`]), so a value doubled in a loop or through a recursive
//! macro stops at the limit, not at the machine's memory; one tag can combine
//! at most [`MAX_OPERATORS`] such values. Rendering runs on a thread with a known stack
//! ([`crate::deep::STACK_SIZE`]),
//! which these limits keep far from full (tests/it/hostile_parsers.rs renders
//! at each limit).

use std::cell::RefCell;
use std::collections::HashMap;

use tera::ast::{Expr, ExprVal, FunctionCall, Node, WS};
use tera::Value;

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
/// Most bytes of one value a template builds and keeps (`set`,
/// `set_global`, a macro's arguments): strings by their length, lists and
/// maps by the sum of their items (keys included, 8 bytes a number).
pub const MAX_VALUE_BYTES: usize = 4 * 1024 * 1024;
/// Most levels of lists and maps in one such value.
pub const MAX_VALUE_DEPTH: usize = 64;
/// Most bytes one rendered template may produce.
pub const MAX_OUTPUT: usize = 16 * 1024 * 1024;
/// Stack kept free below the limits: a guard call that finds less left refuses.
const STACK_RESERVE: usize = 32 * 1024 * 1024;

/// The functions templates may call.
pub const FUNCTIONS: &[&str] = &["range", "throw"];

const ENTER: &str = "__kube_aws_enter";
const LEAVE: &str = "__kube_aws_leave";
const STEP: &str = "__kube_aws_step";
const BOUND: &str = "__kube_aws_bound";

/// A refusal at a byte offset of the template text.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub offset: usize,
    pub message: String,
}

/// What the pre-scan learned: where each macro and loop tag starts.
#[derive(Debug, Default)]
pub struct Scan {
    /// Macro name → offset of its `{% macro` tag.
    pub macros: HashMap<String, usize>,
    /// Offsets of `{% for` tags, in order, outside any macro.
    pub top_loops: Vec<usize>,
    /// Offsets of `{% for` tags inside each macro, in order.
    pub macro_loops: HashMap<String, Vec<usize>>,
    /// Offsets of `{% set` and `{% set_global` tags, in order, outside any macro.
    pub top_sets: Vec<usize>,
    /// Offsets of `{% set` and `{% set_global` tags inside each macro, in order.
    pub macro_sets: HashMap<String, Vec<usize>>,
}

/// 1-based line and column of byte `offset` in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let col = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
    (line, col)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok<'a> {
    Ident(&'a str),
    Punct(&'a str),
    Other,
}

/// Reads the tags of `text` and refuses what tera cannot render safely (see
/// the module docs). Syntax errors are left to tera, which locates them.
pub fn prescan(text: &str) -> Result<Scan, Refusal> {
    let b = text.as_bytes();
    let mut scan = Scan::default();
    let mut blocks: Vec<(&str, usize)> = Vec::new();
    let mut in_macro: Option<String> = None;
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] != b'{' || !matches!(b[i + 1], b'{' | b'%' | b'#') {
            i += 1;
            continue;
        }
        let start = i;
        let kind = b[i + 1];
        if kind == b'#' {
            match find(b, i + 2, b"#}") {
                Some(e) => {
                    i = e + 2;
                    continue;
                }
                None => return Ok(scan),
            }
        }
        let close: &[u8] = if kind == b'{' { b"}}" } else { b"%}" };
        // Tokens of the tag.
        let mut toks: Vec<(Tok, usize)> = Vec::new();
        let mut depth = 0usize;
        let mut operators = 0usize;
        let mut j = i + 2;
        let end = loop {
            if j >= b.len() {
                return Ok(scan); // unclosed tag: tera reports it
            }
            if b[j..].starts_with(close) {
                break j + 2;
            }
            let c = b[j];
            match c {
                b' ' | b'\t' | b'\r' | b'\n' => j += 1,
                b'"' | b'\'' | b'`' => match memchr::memchr(c, &b[j + 1..]) {
                    Some(k) => {
                        toks.push((Tok::Other, j));
                        j += k + 2;
                    }
                    None => return Ok(scan),
                },
                b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                    let s = j;
                    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                        j += 1;
                    }
                    let word = &text[s..j];
                    if word == "and" || word == "or" {
                        operators += 1;
                    }
                    toks.push((Tok::Ident(word), s));
                }
                b'(' | b'[' => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Err(Refusal {
                            offset: j,
                            message: format!(
                                "expression nested more than {MAX_NESTING} levels deep (the limit for plugin templates)"
                            ),
                        });
                    }
                    toks.push((Tok::Punct(if c == b'(' { "(" } else { "[" }), j));
                    j += 1;
                }
                b')' | b']' => {
                    depth = depth.saturating_sub(1);
                    toks.push((Tok::Punct(")"), j));
                    j += 1;
                }
                b':' if b.get(j + 1) == Some(&b':') => {
                    toks.push((Tok::Punct("::"), j));
                    j += 2;
                }
                b'|' => {
                    toks.push((Tok::Punct("|"), j));
                    j += 1;
                }
                b'+' | b'-' | b'*' | b'/' | b'%' => {
                    operators += 1;
                    toks.push((Tok::Other, j));
                    j += 1;
                }
                _ => {
                    toks.push((Tok::Other, j));
                    // Skip a whole UTF-8 character.
                    j += 1;
                    while j < b.len() && (b[j] & 0xC0) == 0x80 {
                        j += 1;
                    }
                }
            }
        };
        if operators > MAX_OPERATORS {
            return Err(Refusal {
                offset: start,
                message: format!("more than {MAX_OPERATORS} operators in one tag (the limit for plugin templates)"),
            });
        }
        check_calls(&toks, kind == b'%')?;
        i = end;
        if kind != b'%' {
            continue;
        }
        // `{%-` trims whitespace: the keyword follows the `-`.
        let first = match toks.first() {
            Some(&(Tok::Other, at)) if b[at] == b'-' => toks.get(1),
            t => t,
        };
        let Some(&(Tok::Ident(keyword), _)) = first else {
            continue;
        };
        match keyword {
            "include" | "extends" | "import" => {
                return Err(Refusal {
                    offset: start,
                    message: format!(
                        "`{keyword}` is not available in plugin templates: each template file is rendered on its own (use a macro in the same file)"
                    ),
                })
            }
            "raw" => match find_endraw(text, end) {
                Some(e) => i = e,
                None => return Ok(scan),
            },
            "if" | "for" | "macro" | "filter" | "block" => {
                blocks.push((keyword, start));
                if blocks.len() > MAX_NESTING {
                    return Err(Refusal {
                        offset: start,
                        message: format!(
                            "blocks nested more than {MAX_NESTING} levels deep (the limit for plugin templates)"
                        ),
                    });
                }
                if keyword == "macro" {
                    if let Some(&(Tok::Ident(name), _)) = toks.get(1) {
                        scan.macros.insert(name.to_string(), start);
                        in_macro = Some(name.to_string());
                    }
                } else if keyword == "for" {
                    match &in_macro {
                        Some(m) => scan.macro_loops.entry(m.clone()).or_default().push(start),
                        None => scan.top_loops.push(start),
                    }
                }
            }
            "set" | "set_global" => match &in_macro {
                Some(m) => scan.macro_sets.entry(m.clone()).or_default().push(start),
                None => scan.top_sets.push(start),
            },
            "endif" | "endfor" | "endmacro" | "endfilter" | "endblock" => {
                let closed = blocks.pop().map(|(k, _)| k);
                if closed == Some("macro") {
                    in_macro = None;
                }
            }
            _ => {}
        }
    }
    Ok(scan)
}

/// Refuses calls of functions other than [`FUNCTIONS`]. An identifier before
/// `(` is a function unless it is a filter (`| f(`), a macro (`ns::f(`), a
/// test (`is f(`, `is not f(`), a macro definition or a filter section.
fn check_calls(toks: &[(Tok, usize)], statement: bool) -> Result<(), Refusal> {
    for (k, w) in toks.windows(2).enumerate() {
        let ((Tok::Ident(name), at), (Tok::Punct("("), _)) = (w[0], w[1]) else {
            continue;
        };
        let prev = k.checked_sub(1).map(|p| toks[p].0);
        let prev2 = k.checked_sub(2).map(|p| toks[p].0);
        let not_a_function = matches!(
            prev,
            Some(Tok::Punct("|")) | Some(Tok::Punct("::")) | Some(Tok::Ident("is"))
        ) || (prev == Some(Tok::Ident("not")) && prev2 == Some(Tok::Ident("is")))
            || (statement && k == 1 && matches!(prev, Some(Tok::Ident("macro")) | Some(Tok::Ident("filter"))));
        if not_a_function || FUNCTIONS.contains(&name) {
            continue;
        }
        let why = if name == "get_env" {
            " (it would read the environment of the machine running kube-aws)".to_string()
        } else {
            String::new()
        };
        return Err(Refusal {
            offset: at,
            message: format!(
                "function `{name}` is not available in plugin templates{why}; the functions are: {}",
                FUNCTIONS.join(", ")
            ),
        });
    }
    Ok(())
}

fn find(b: &[u8], from: usize, pat: &[u8]) -> Option<usize> {
    memchr::memmem::find(b.get(from..)?, pat).map(|k| from + k)
}

/// The offset just past the `{% endraw %}` tag after `from`.
fn find_endraw(text: &str, from: usize) -> Option<usize> {
    let b = text.as_bytes();
    let mut at = from;
    while let Some(s) = find(b, at, b"{%") {
        let mut j = s + 2;
        let skip_ws = |j: &mut usize| {
            while *j < b.len() && (b[*j] == b'-' || b[*j].is_ascii_whitespace()) {
                *j += 1;
            }
        };
        skip_ws(&mut j);
        if b[j..].starts_with(b"endraw") {
            j += 6;
            skip_ws(&mut j);
            if b[j..].starts_with(b"%}") {
                return Some(j + 2);
            }
        }
        at = s + 2;
    }
    None
}

/// What stopped a render, found by the calls [`instrument`] adds.
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
}

#[derive(Default)]
struct State {
    depth: usize,
    steps: usize,
    stack_base: usize,
    stop: Option<Stop>,
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

fn stop(reason: Stop) -> tera::Result<Value> {
    STATE.with(|s| s.borrow_mut().stop = Some(reason));
    Err(tera::Error::msg("stopped by a kube-aws template limit"))
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

/// Why `v` is over [`MAX_VALUE_BYTES`] or [`MAX_VALUE_DEPTH`], if it is;
/// walks without recursion and stops at the first limit passed.
pub fn value_problem(v: &Value) -> Option<String> {
    let mut bytes = 0usize;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, depth)) = stack.pop() {
        match v {
            Value::String(s) => bytes += s.len(),
            Value::Array(_) | Value::Object(_) if depth > MAX_VALUE_DEPTH => {
                return Some(format!("nests lists and maps more than {MAX_VALUE_DEPTH} levels deep"))
            }
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, depth + 1))),
            Value::Object(m) => {
                for (k, i) in m {
                    bytes += k.len();
                    stack.push((i, depth + 1));
                }
            }
            _ => bytes += 8,
        }
        if bytes > MAX_VALUE_BYTES {
            return Some(format!("is larger than {MAX_VALUE_BYTES} bytes"));
        }
    }
    None
}

/// The filter [`instrument`] puts after each `set` value.
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
/// counting calls [`instrument`] adds.
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
    t
}

fn call_args(args: &[(&str, Value)]) -> HashMap<String, Expr> {
    args.iter()
        .map(|(k, v)| {
            let val = match v {
                Value::String(s) => ExprVal::String(s.clone()),
                v => ExprVal::Int(v.as_i64().unwrap_or(0)),
            };
            (k.to_string(), Expr::new(val))
        })
        .collect()
}

fn call(name: &str, args: &[(&str, Value)]) -> Node {
    call_with(name, call_args(args))
}

fn call_with(name: &str, args: HashMap<String, Expr>) -> Node {
    Node::VariableBlock(
        WS::default(),
        Expr::new(ExprVal::FunctionCall(FunctionCall {
            name: name.to_string(),
            args,
        })),
    )
}

/// The offsets of a body's loop and set tags, in text order.
struct Tags<L, S> {
    loops: L,
    sets: S,
}

/// Adds the counting calls to template `name` of `t`: each macro body starts
/// with an enter call and ends with a leave call; each loop body starts with
/// a step call; each `set` value gets a bounding filter. Calls carry the
/// offset of their tag, from `scan`; the enter call also carries the macro's
/// arguments, to bound them.
///
/// This edits tera's parsed template (`Tera::templates` and `tera::ast` are
/// public but hidden from tera's docs); Cargo.lock pins tera, and the tests
/// at the limits fail if a tera update changes them.
pub fn instrument(t: &mut tera::Tera, name: &str, scan: &Scan) {
    let Some(tpl) = t.templates.get_mut(name) else { return };
    let mut top = Tags {
        loops: scan.top_loops.iter().copied(),
        sets: scan.top_sets.iter().copied(),
    };
    add_steps(&mut tpl.ast, &mut top);
    for (mname, def) in tpl.macros.iter_mut() {
        let at = scan.macros.get(mname).copied().unwrap_or(0);
        let mut tags = Tags {
            loops: scan.macro_loops.get(mname).cloned().unwrap_or_default().into_iter(),
            sets: scan.macro_sets.get(mname).cloned().unwrap_or_default().into_iter(),
        };
        add_steps(&mut def.body, &mut tags);
        let mut args = call_args(&[("m", Value::String(mname.clone())), ("at", Value::from(at as u64))]);
        for name in def.args.keys() {
            args.insert(format!("v_{name}"), Expr::new(ExprVal::Ident(name.clone())));
        }
        def.body.insert(0, call_with(ENTER, args));
        def.body.push(call(LEAVE, &[]));
    }
}

fn add_steps<L: Iterator<Item = usize>, S: Iterator<Item = usize>>(body: &mut [Node], tags: &mut Tags<L, S>) {
    for node in body {
        match node {
            Node::Forloop(_, f, _) => {
                let at = tags.loops.next().unwrap_or(0);
                add_steps(&mut f.body, tags);
                f.body.insert(0, call(STEP, &[("at", Value::from(at as u64))]));
                if let Some(e) = &mut f.empty_body {
                    add_steps(e, tags);
                }
            }
            Node::Set(_, set) => {
                let at = tags.sets.next().unwrap_or(0);
                set.value.filters.push(FunctionCall {
                    name: BOUND.to_string(),
                    args: call_args(&[("at", Value::from(at as u64))]),
                });
            }
            Node::If(i, _) => {
                for (_, _, b) in &mut i.conditions {
                    add_steps(b, tags);
                }
                if let Some((_, b)) = &mut i.otherwise {
                    add_steps(b, tags);
                }
            }
            Node::FilterSection(_, f, _) => add_steps(&mut f.body, tags),
            Node::Block(_, bl, _) => add_steps(&mut bl.body, tags),
            _ => {}
        }
    }
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
