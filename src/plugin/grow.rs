//! The tera filters and operators that can make a value larger than their
//! input, bounded before they build it (issue 40, docs/limits.md).
//!
//! The guard on kept values ([`guard::MAX_VALUE_BYTES`]) sees a value only
//! once it is built: `{{ e | replace(from="a", to=e) | length }}` with a
//! 4 MiB `e` would build 16 TiB first. So:
//! - each growing builtin filter is registered again under its own name as a
//!   wrapper ([`Grow`]) that predicts the size of the result from the input
//!   and the arguments, refuses past the bound, and only then calls tera's
//!   own filter (so results and errors stay tera's);
//! - the values tera builds itself from several parts (the operands of `~`,
//!   the items of a list literal, the arguments of a call) are counted one
//!   part at a time as tera evaluates them ([`add_part`]), with what the
//!   enclosing expression already holds, and refused at the part that would
//!   pass the bound;
//! - the bytes a render writes, into its output or into the buffers tera
//!   keeps for a macro's result and a `filter` section's body, are counted
//!   ([`emit`], [`text`]) against [`guard::MAX_WRITTEN`].
//!
//! Sizes are in the measure of [`guard::value_size`]. The calls that feed
//! these functions are added to the parsed template by
//! [`super::instrument`].

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use tera::Value;
use unicode_segmentation::UnicodeSegmentation;

use super::guard::{self, Stop, ITEM_BYTES, MAX_HELD_BYTES, MAX_VALUE_BYTES, MAX_WRITTEN};

type Args = HashMap<String, Value>;

/// Predicts the size of a filter's result; 0 when the input or an argument
/// has a type the filter refuses (tera's own filter then says so).
pub type Predict = fn(&Value, &Args) -> usize;

/// The argument [`super::instrument`] adds to every filter call: the offset
/// of the filter's name in the template.
pub const AT_ARG: &str = "__kube_aws_at";

/// The builtin filters that can return more than they get, with how the size
/// of their result is predicted. Every other builtin returns a part, a
/// permutation or a count of its input, or one of its arguments
/// ([`NOT_GROWING`]).
pub const GROWING: &[(&str, Predict)] = &[
    ("replace", replace),
    ("join", join),
    ("concat", concat),
    ("split", split),
    ("indent", indent),
    ("truncate", truncate),
    ("escape", escape_html),
    ("escape_xml", escape_xml),
    ("addslashes", addslashes),
    ("linebreaksbr", linebreaksbr),
    ("upper", upper),
    ("lower", lower),
    ("capitalize", capitalize),
    ("title", title),
    ("json_encode", json_encode),
    ("as_str", as_str),
    ("group_by", group_by),
];

/// The builtin filters that cannot grow a value: a part, a permutation, a
/// count or a number of their input, or one of their arguments.
pub const NOT_GROWING: &[&str] = &[
    "trim",
    "trim_start",
    "trim_end",
    "trim_start_matches",
    "trim_end_matches",
    "wordcount",
    "striptags",
    "spaceless",
    "int",
    "float",
    "first",
    "last",
    "nth",
    "sort",
    "unique",
    "slice",
    "filter",
    "map",
    "abs",
    "pluralize",
    "round",
    "length",
    "reverse",
    "get",
];

/// A builtin filter behind a size check.
struct Grow {
    name: &'static str,
    inner: Arc<dyn tera::Filter>,
    predict: Predict,
}

impl tera::Filter for Grow {
    fn filter(&self, value: &Value, args: &Args) -> tera::Result<Value> {
        let size = (self.predict)(value, args);
        if size > MAX_VALUE_BYTES {
            return guard::stop(Stop::Grow {
                offset: offset(args),
                what: format!("filter `{}`", self.name),
                size: Some(size),
                limit: MAX_VALUE_BYTES,
            });
        }
        self.inner.filter(value, args)
    }

    fn is_safe(&self) -> bool {
        self.inner.is_safe()
    }
}

/// Registers the bounded filters over tera's own, under the same names.
pub fn register(t: &mut tera::Tera) {
    for &(name, predict) in GROWING {
        if let Some(inner) = t.filters.get(name).cloned() {
            t.register_filter(name, Grow { name, inner, predict });
        }
    }
    t.register_function(PART, Part);
    t.register_filter(MEMBER, member);
    t.register_filter(EMIT, emit);
    t.register_function(TEXT, text);
}

fn offset(args: &Args) -> usize {
    args.get(AT_ARG)
        .or_else(|| args.get("at"))
        .and_then(Value::as_u64)
        .unwrap_or(0) as usize
}

fn str_arg<'a>(args: &'a Args, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// tera reads `\n` and `\t` in `split`'s and `join`'s patterns as escapes.
fn unescape(p: &str) -> String {
    p.replace("\\n", "\n").replace("\\t", "\t")
}

fn times(count: usize, bytes: usize) -> usize {
    count.saturating_mul(bytes)
}

fn replace(v: &Value, args: &Args) -> usize {
    let (Some(s), Some(from), Some(to)) = (v.as_str(), str_arg(args, "from"), str_arg(args, "to")) else {
        return 0;
    };
    // An empty `from` matches before every character and at the end.
    let count = if from.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(from).count()
    };
    (s.len() - times(count, from.len())).saturating_add(times(count, to.len()))
}

fn join(v: &Value, args: &Args) -> usize {
    let Some(items) = v.as_array() else { return 0 };
    let sep = str_arg(args, "sep").map(unescape).unwrap_or_default();
    let rendered = items.iter().fold(0usize, |n, i| n.saturating_add(rendered_len(i)));
    rendered.saturating_add(times(items.len().saturating_sub(1), sep.len()))
}

fn concat(v: &Value, args: &Args) -> usize {
    let (Some(_), Some(with)) = (v.as_array(), args.get("with")) else {
        return 0;
    };
    let added = match with {
        Value::Array(_) => guard::value_size(with),
        one => ITEM_BYTES.saturating_add(guard::value_size(one)),
    };
    guard::value_size(v).saturating_add(added)
}

fn split(v: &Value, args: &Args) -> usize {
    let (Some(s), Some(pat)) = (v.as_str(), str_arg(args, "pat")) else {
        return 0;
    };
    let pat = unescape(pat);
    // An empty pattern splits before and after every character.
    let (pieces, bytes) = if pat.is_empty() {
        (s.chars().count() + 2, s.len())
    } else {
        let found = s.matches(pat.as_str()).count();
        (found + 1, s.len() - found * pat.len())
    };
    bytes.saturating_add(times(pieces, ITEM_BYTES))
}

/// What tera's `indent` reserves before it writes: the prefix once per line,
/// blank lines included.
fn indent(v: &Value, args: &Args) -> usize {
    let Some(s) = v.as_str() else { return 0 };
    let prefix = args.get("prefix").map_or(Some(4), |p| p.as_str().map(str::len));
    let Some(prefix) = prefix else { return 0 };
    let lines = memchr::memchr_iter(b'\n', s.as_bytes()).count() + 1;
    s.len().saturating_add(times(lines, prefix))
}

fn truncate(v: &Value, args: &Args) -> usize {
    let Some(s) = v.as_str() else { return 0 };
    let length = match args.get("length") {
        Some(l) => match l.as_u64() {
            Some(l) => l as usize,
            None => return 0,
        },
        None => 255,
    };
    let end = match args.get("end") {
        Some(e) => match e.as_str() {
            Some(e) => e.len(),
            None => return 0,
        },
        None => "…".len(),
    };
    match s.grapheme_indices(true).nth(length) {
        Some((at, _)) => at.saturating_add(end),
        None => s.len(),
    }
}

/// The input's length plus what each byte `extra` names adds.
fn escaped(v: &Value, extra: fn(u8) -> usize) -> usize {
    let Some(s) = v.as_str() else { return 0 };
    s.bytes().fold(s.len(), |n, b| n.saturating_add(extra(b)))
}

fn escape_html(v: &Value, _: &Args) -> usize {
    escaped(v, |b| match b {
        b'&' => 4,
        b'<' | b'>' => 3,
        b'"' | b'\'' | b'/' => 5,
        _ => 0,
    })
}

fn escape_xml(v: &Value, _: &Args) -> usize {
    escaped(v, |b| match b {
        b'&' => 4,
        b'<' | b'>' => 3,
        b'"' | b'\'' => 5,
        _ => 0,
    })
}

fn addslashes(v: &Value, _: &Args) -> usize {
    escaped(v, |b| usize::from(matches!(b, b'\\' | b'"' | b'\'')))
}

fn linebreaksbr(v: &Value, _: &Args) -> usize {
    let Some(s) = v.as_str() else { return 0 };
    let crlf = s.matches("\r\n").count();
    let lf = memchr::memchr_iter(b'\n', s.as_bytes()).count();
    // `\r\n` (2 bytes) and a lone `\n` (1 byte) both become `<br>`.
    s.len() + 2 * crlf + 3 * (lf - crlf)
}

fn chars_len(s: &str, map: fn(char) -> usize) -> usize {
    s.chars().fold(0usize, |n, c| n.saturating_add(map(c)))
}

fn upper_len(c: char) -> usize {
    c.to_uppercase().map(char::len_utf8).sum()
}

fn lower_len(c: char) -> usize {
    c.to_lowercase().map(char::len_utf8).sum()
}

fn upper(v: &Value, _: &Args) -> usize {
    v.as_str().map_or(0, |s| chars_len(s, upper_len))
}

fn lower(v: &Value, _: &Args) -> usize {
    v.as_str().map_or(0, |s| chars_len(s, lower_len))
}

fn capitalize(v: &Value, _: &Args) -> usize {
    let Some(s) = v.as_str() else { return 0 };
    let mut chars = s.chars();
    chars.next().map_or(0, |first| {
        upper_len(first).saturating_add(chars_len(chars.as_str(), lower_len))
    })
}

/// An upper bound: each character as long as the longest of itself, its
/// upper case and its lower case.
fn title(v: &Value, _: &Args) -> usize {
    v.as_str().map_or(0, |s| {
        chars_len(s, |c| c.len_utf8().max(upper_len(c)).max(lower_len(c)))
    })
}

fn json_encode(v: &Value, args: &Args) -> usize {
    let pretty = args.get("pretty").and_then(Value::as_bool).unwrap_or(false);
    json_len(v, pretty)
}

fn as_str(v: &Value, _: &Args) -> usize {
    rendered_len(v)
}

/// An upper bound: every item, and a key for each as long as its attribute
/// rendered (a group per item).
fn group_by(v: &Value, args: &Args) -> usize {
    let (Some(items), Some(attr)) = (v.as_array(), str_arg(args, "attribute")) else {
        return 0;
    };
    items.iter().fold(0usize, |n, item| {
        let key = match tera::dotted_pointer(item, attr) {
            Some(Value::Null) | None => 0,
            Some(Value::String(k)) => ITEM_BYTES + k.len(),
            Some(k) => ITEM_BYTES.saturating_add(json_len(k, false)),
        };
        n.saturating_add(ITEM_BYTES)
            .saturating_add(guard::value_size(item))
            .saturating_add(key)
    })
}

/// Counts bytes written, and fails once past [`MAX_VALUE_BYTES`] so that
/// nothing larger is ever measured in full.
#[derive(Default)]
struct Counter(usize);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        if self.0 > MAX_VALUE_BYTES {
            return Err(std::io::Error::other("over the bound"));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The length of `v` as JSON, or more than [`MAX_VALUE_BYTES`] if longer.
pub fn json_len(v: &Value, pretty: bool) -> usize {
    let mut c = Counter::default();
    let _ = if pretty {
        serde_json::to_writer_pretty(&mut c, v)
    } else {
        serde_json::to_writer(&mut c, v)
    };
    c.0
}

/// The length of `v` as tera writes it into a template (`{{ v }}`, `join`,
/// `as_str`), or more than [`MAX_VALUE_BYTES`] if longer.
pub fn rendered_len(v: &Value) -> usize {
    let mut c = Counter::default();
    let _ = render(v, &mut c);
    c.0
}

/// tera's rendering of a value (`ValueRender`, not public in tera).
fn render(v: &Value, w: &mut Counter) -> std::io::Result<()> {
    match v {
        Value::String(s) => w.write_all(s.as_bytes()),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => write!(w, "{i}"),
            (None, Some(u), _) => write!(w, "{u}"),
            (None, None, f) => write!(w, "{}", f.unwrap_or(0.0)),
        },
        Value::Bool(b) => write!(w, "{b}"),
        Value::Null => Ok(()),
        Value::Array(items) => {
            w.write_all(b"[")?;
            for (k, i) in items.iter().enumerate() {
                if k > 0 {
                    w.write_all(b", ")?;
                }
                render(i, w)?;
            }
            w.write_all(b"]")
        }
        Value::Object(_) => w.write_all(b"[object]"),
    }
}

/// The function an operand of `~` becomes (see [`super::instrument`]).
pub const PART: &str = "__kube_aws_part";
/// The filter put after each item of a list literal and each argument of a
/// call.
pub const MEMBER: &str = "__kube_aws_member";
/// The filter put after the expression of each `{{ }}` tag.
pub const EMIT: &str = "__kube_aws_emit";
/// The call put at the start of each body with text in it.
pub const TEXT: &str = "__kube_aws_text";

fn num(args: &Args, key: &str) -> usize {
    args.get(key).and_then(Value::as_u64).unwrap_or(0) as usize
}

fn flag(args: &Args, key: &str) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// One part of a value built from parts (group `g`, bounded by `max`): adds
/// `size` to what the group holds and refuses past `max`, or past
/// [`MAX_HELD_BYTES`] with what the enclosing groups hold meanwhile. The
/// last part ends the group.
fn add_part(args: &Args, size: usize) -> tera::Result<()> {
    let group = num(args, "g");
    let max = num(args, "max");
    let (own, held) = guard::add_to_group(group, flag(args, "first"), size);
    let what = || str_arg(args, "w").unwrap_or("this expression").to_string();
    let over = if own > max {
        Some((what(), max))
    } else if held > MAX_HELD_BYTES {
        Some((
            format!("{}, with what the expression around it holds,", what()),
            MAX_HELD_BYTES,
        ))
    } else {
        None
    };
    if let Some((what, limit)) = over {
        return guard::stop(Stop::Grow {
            offset: offset(args),
            what,
            size: None,
            limit,
        })
        .map(|_| ());
    }
    if flag(args, "last") {
        guard::end_group(group);
    }
    Ok(())
}

/// An operand of `~` that is a variable or a function call: `v` is its
/// value; `pre` the bytes of the literal operands before it. Returns the
/// operand, which tera then appends.
struct Part;

impl tera::Function for Part {
    fn call(&self, args: &Args) -> tera::Result<Value> {
        let v = args.get("v").cloned().unwrap_or_else(|| Value::String(String::new()));
        let len = match &v {
            Value::String(s) => s.len(),
            Value::Number(n) => n.to_string().len(),
            _ => {
                return Err(tera::Error::msg(format!(
                    "Tried to concat a value that is not a string or a number from {}",
                    str_arg(args, "name").unwrap_or("an operand")
                )))
            }
        };
        add_part(args, num(args, "pre").saturating_add(len))?;
        Ok(v)
    }

    fn is_safe(&self) -> bool {
        true
    }
}

/// An item of a list literal (`item`: it counts [`ITEM_BYTES`] more) or an
/// argument of a call, once evaluated.
fn member(v: &Value, args: &Args) -> tera::Result<Value> {
    let extra = if flag(args, "item") { ITEM_BYTES } else { 0 };
    add_part(args, extra.saturating_add(guard::value_size(v)))?;
    Ok(v.clone())
}

/// What a `{{ }}` tag writes.
fn emit(v: &Value, args: &Args) -> tera::Result<Value> {
    guard::written(rendered_len(v).min(MAX_WRITTEN + 1), offset(args))?;
    Ok(v.clone())
}

/// The text of a body, written each time the body renders.
fn text(args: &Args) -> tera::Result<Value> {
    guard::written(num(args, "n"), offset(args))?;
    Ok(Value::String(String::new()))
}

#[cfg(test)]
mod tests;
