//! Located YAML: parse a document into typed data while keeping where every key
//! and value came from, so that every error can say `file:line:col: key.path: …`.
//!
//! The typed parse goes through `serde_yaml` (with `serde_path_to_error` for the
//! key path); positions come from a separate event pass with `yaml-rust2`, which
//! records the mark of every key and value by its dotted path.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

impl Pos {
    fn from_marker(m: Marker) -> Self {
        Pos {
            line: m.line(),
            col: m.col() + 1,
        }
    }

    /// Where serde_yaml says its error is, when it says.
    pub fn of_yaml_error(e: &serde_yaml::Error) -> Option<Pos> {
        e.location().map(|l| Pos {
            line: l.line(),
            col: l.column(),
        })
    }
}

/// The deepest nesting of maps and lists any YAML input may have.
pub const MAX_YAML_DEPTH: usize = 64;

/// The guard every YAML reader runs before it parses: `text` is at most
/// `limit` bytes and nests maps and lists at most [`MAX_YAML_DEPTH`] deep.
/// It stops at the first level too deep, so a hostile file (100 KB of `[`)
/// costs microseconds instead of the parsers' quadratic time, and no parser
/// recurses deeper than the limit. Syntax errors come back located.
pub fn check_yaml(file: &Path, text: &str, limit: &crate::limits::Limit) -> Result<(), Located> {
    struct Ignore;
    impl MarkedEventReceiver for Ignore {
        fn on_event(&mut self, _: Event, _: Marker) {}
    }
    walk_yaml(file, text, limit, &mut Ignore)
}

/// Pulls every document's events one by one (no recursion), refusing
/// input over `limit` or nested deeper than [`MAX_YAML_DEPTH`].
fn walk_yaml<R: MarkedEventReceiver>(
    file: &Path,
    text: &str,
    limit: &crate::limits::Limit,
    recv: &mut R,
) -> Result<(), Located> {
    if text.len() as u64 > limit.bytes {
        return Err(Located::new(
            file,
            Pos { line: 1, col: 1 },
            "",
            crate::limits::too_large(text.len() as u64, limit),
        ));
    }
    let mut parser = Parser::new_from_str(text);
    let mut depth = 0usize;
    loop {
        let (ev, mark) = match parser.next_token() {
            Ok(e) => e,
            Err(e) => return Err(scan_error(file, text, &e)),
        };
        match ev {
            Event::StreamEnd => return Ok(()),
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                depth += 1;
                if depth > MAX_YAML_DEPTH {
                    return Err(Located::new(file, Pos::from_marker(mark), "", too_deep()));
                }
            }
            Event::MappingEnd | Event::SequenceEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
        recv.on_event(ev, mark);
    }
}

fn too_deep() -> String {
    format!(
        "maps and lists nest deeper than {MAX_YAML_DEPTH} levels here; kube-aws refuses deeper YAML \
         (a fixed limit, see docs/limits.md): flatten the structure"
    )
}

fn scan_error(file: &Path, text: &str, e: &yaml_rust2::ScanError) -> Located {
    let pos = Pos::from_marker(*e.marker());
    // The scanner's own nesting limit trips first on unclosed flow collections.
    if e.info().contains("recursion limit exceeded") {
        return Located::new(file, pos, "", too_deep());
    }
    let mut message = e.info().to_string();
    let line = text.lines().nth(pos.line.saturating_sub(1)).unwrap_or("");
    if line.starts_with('\t') || line.trim_start_matches(' ').starts_with('\t') {
        message.push_str(" (YAML forbids tabs for indentation; indent with spaces)");
    }
    Located::new(file, pos, "", format!("malformed YAML: {message}"))
}

/// Where each key and value of a YAML document sits, by key path
/// (`worker.nodePools[1].name`).
#[derive(Debug, Default, Clone)]
pub struct SourceMap {
    keys: HashMap<String, Pos>,
    values: HashMap<String, Pos>,
}

impl SourceMap {
    /// Parses `text` for positions only, under the YAML guard (size and
    /// depth, see [`check_yaml`]). Syntax errors come back located.
    pub fn parse(file: &Path, text: &str) -> Result<Self, Located> {
        let mut builder = MapBuilder::default();
        walk_yaml(file, text, &crate::limits::TEXT_LIMIT, &mut builder)?;
        Ok(builder.map)
    }

    /// The position of the key at `path` (the `name` in `name: x`).
    pub fn key(&self, path: &str) -> Option<Pos> {
        self.keys.get(path).copied()
    }

    /// The position of the value at `path`.
    pub fn value(&self, path: &str) -> Option<Pos> {
        self.values.get(path).copied()
    }

    /// The best position for an error about `path`: its value, else its key,
    /// else the nearest ancestor that exists, else the top of the file.
    pub fn locate(&self, path: &str) -> Pos {
        let mut p = path.to_string();
        loop {
            if let Some(pos) = self.value(&p).or_else(|| self.key(&p)) {
                return pos;
            }
            match parent_path(&p) {
                Some(parent) => p = parent,
                None => return Pos { line: 1, col: 1 },
            }
        }
    }
}

fn parent_path(path: &str) -> Option<String> {
    if path.is_empty() {
        return None;
    }
    let cut = path.rfind(['.', '[']).unwrap_or(0);
    Some(path[..cut].to_string())
}

/// Joins a parent path and a map key.
pub fn join_key(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Joins a parent path and a list index.
pub fn join_index(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

enum Frame {
    Map { path: String, pending_key: Option<String> },
    Seq { path: String, next: usize },
}

#[derive(Default)]
struct MapBuilder {
    map: SourceMap,
    stack: Vec<Frame>,
    depth_in_key: usize,
}

impl MapBuilder {
    /// Claims the path for a new node in the current container: the next list
    /// slot, or the pending map key. Returns None when the node is itself a key.
    fn claim(&mut self) -> Option<String> {
        match self.stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Seq { path, next }) => {
                let p = join_index(path, *next);
                *next += 1;
                Some(p)
            }
            Some(Frame::Map { path, pending_key }) => pending_key.take().map(|k| join_key(path, &k)),
        }
    }
}

impl MarkedEventReceiver for MapBuilder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let pos = Pos::from_marker(mark);
        // Complex keys (maps or lists used as keys) are skipped wholesale.
        if self.depth_in_key > 0 {
            match ev {
                Event::MappingStart(..) | Event::SequenceStart(..) => self.depth_in_key += 1,
                Event::MappingEnd | Event::SequenceEnd => self.depth_in_key -= 1,
                _ => {}
            }
            if self.depth_in_key == 0 {
                if let Some(Frame::Map { pending_key, .. }) = self.stack.last_mut() {
                    *pending_key = Some("?".into());
                }
            }
            return;
        }
        match ev {
            Event::Scalar(value, ..) => match self.claim() {
                Some(p) => {
                    self.map.values.insert(p, pos);
                }
                None => {
                    if let Some(Frame::Map { path, pending_key }) = self.stack.last_mut() {
                        // A block map's start mark can trail its first key; use the earlier one.
                        if let Some(start) = self.map.values.get_mut(path.as_str()) {
                            if pos < *start {
                                *start = pos;
                            }
                        }
                        self.map.keys.insert(join_key(path, &value), pos);
                        *pending_key = Some(value);
                    }
                }
            },
            Event::Alias(..) => {
                if let Some(p) = self.claim() {
                    self.map.values.insert(p, pos);
                }
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let is_map = matches!(ev, Event::MappingStart(..));
                match self.claim() {
                    Some(p) => {
                        self.map.values.insert(p.clone(), pos);
                        self.stack.push(if is_map {
                            Frame::Map {
                                path: p,
                                pending_key: None,
                            }
                        } else {
                            Frame::Seq { path: p, next: 0 }
                        });
                    }
                    None => self.depth_in_key = 1,
                }
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            _ => {}
        }
    }
}

/// One error at one place in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub file: PathBuf,
    pub pos: Pos,
    /// Dotted key path; empty for the whole document.
    pub path: String,
    pub message: String,
}

impl Located {
    pub fn new(file: &Path, pos: Pos, path: &str, message: impl Into<String>) -> Self {
        Located {
            file: file.to_path_buf(),
            pos,
            path: path.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Located {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file.display(), self.pos.line, self.pos.col)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for Located {}

/// Several located errors, reported together, sorted by position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Located>);

impl Diagnostics {
    pub fn sorted(mut list: Vec<Located>) -> Self {
        list.sort_by(|a, b| (&a.file, a.pos).cmp(&(&b.file, b.pos)));
        list.dedup();
        Diagnostics(list)
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

impl From<Located> for Diagnostics {
    fn from(l: Located) -> Self {
        Diagnostics(vec![l])
    }
}

/// Parses `text` (the contents of `file`) as `T`, with positions.
///
/// Unknown keys get the closest known key as a suggestion; type errors quote
/// the value. Returns the typed value and the source map for later checks.
pub fn parse_yaml<T: DeserializeOwned>(file: &Path, text: &str) -> Result<(T, SourceMap), Located> {
    let map = SourceMap::parse(file, text)?;
    if text.trim().is_empty()
        || text
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        return Err(Located::new(file, Pos { line: 1, col: 1 }, "", "the file is empty"));
    }
    let de = serde_yaml::Deserializer::from_str(text);
    match serde_path_to_error::deserialize::<_, T>(de) {
        Ok(v) => Ok((v, map)),
        Err(e) => {
            let path = clean_path(&e.path().to_string());
            let inner = e.into_inner();
            let fallback = Pos::of_yaml_error(&inner).unwrap_or(Pos { line: 1, col: 1 });
            let raw = inner.to_string();
            let raw = strip_serde_path(strip_serde_location(&raw), &path);
            Err(explain_serde_error(file, &map, &path, raw, fallback))
        }
    }
}

/// A serde_yaml error at `file:line:col` (serde_yaml's own " at line N
/// column M" removed): the one format for YAML read as plain data.
pub fn serde_yaml_error(file: &Path, e: &serde_yaml::Error) -> Located {
    let pos = Pos::of_yaml_error(e).unwrap_or(Pos { line: 1, col: 1 });
    let raw = e.to_string();
    Located::new(file, pos, "", format!("malformed YAML: {}", strip_serde_location(&raw)))
}

/// serde_path_to_error prints `.` for the root and `?` for unknown segments.
fn clean_path(p: &str) -> String {
    if p == "." {
        String::new()
    } else {
        p.to_string()
    }
}

/// serde_yaml prefixes "key.path: " (its own path, or the parent's for an
/// unknown field); we print our own.
fn strip_serde_path<'a>(msg: &'a str, path: &str) -> &'a str {
    let mut p = Some(path.to_string());
    while let Some(candidate) = p {
        if candidate.is_empty() {
            break;
        }
        if let Some(rest) = msg.strip_prefix(&format!("{candidate}: ")) {
            return rest;
        }
        p = parent_path(&candidate);
    }
    msg
}

/// serde_yaml appends " at line L column C"; we print our own location.
fn strip_serde_location(msg: &str) -> &str {
    match msg.find(" at line ") {
        Some(i) => &msg[..i],
        None => msg,
    }
}

fn explain_serde_error(file: &Path, map: &SourceMap, path: &str, msg: &str, fallback: Pos) -> Located {
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        let (field, expected) = split_unknown(rest);
        // serde_path_to_error's path already ends at the unknown key.
        let key_path = if path == field || path.ends_with(&format!(".{field}")) {
            path.to_string()
        } else {
            join_key(path, field)
        };
        let pos = map.key(&key_path).unwrap_or(fallback);
        let mut message = format!("unknown key {field:?}");
        match closest(field, &expected) {
            Some(best) => message.push_str(&format!(" (did you mean {best:?}?)")),
            None if !expected.is_empty() => message.push_str(&format!(" (valid keys: {})", expected.join(", "))),
            None => {}
        }
        return Located::new(file, pos, &key_path, message);
    }
    if let Some(rest) = msg.strip_prefix("unknown variant `") {
        let (variant, expected) = split_unknown(rest);
        let pos = map.value(path).unwrap_or(fallback);
        let mut message = format!("{variant:?} is not a valid value");
        if !expected.is_empty() {
            message.push_str(&format!(" (use one of: {})", expected.join(", ")));
        }
        return Located::new(file, pos, path, message);
    }
    if let Some(rest) = msg.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or(rest);
        let pos = map.value(path).unwrap_or(fallback);
        return Located::new(file, pos, path, format!("missing required key {field:?}"));
    }
    if let Some(rest) = msg.strip_prefix("invalid type: ") {
        let pos = map.value(path).unwrap_or(fallback);
        let (found, expected) = match rest.split_once(", expected ") {
            Some((f, e)) => (f, e),
            None => (rest, "another type"),
        };
        return Located::new(
            file,
            pos,
            path,
            format!("expected {}, found {}", plain_type(expected), found),
        );
    }
    if let Some(rest) = msg.strip_prefix("duplicate field `") {
        let field = rest.split('`').next().unwrap_or(rest);
        return Located::new(
            file,
            fallback,
            &join_key(path, field),
            format!("key {field:?} is set twice"),
        );
    }
    if let Some(rest) = msg.strip_prefix("invalid value: ") {
        let pos = map.value(path).unwrap_or(fallback);
        let (found, expected) = match rest.split_once(", expected ") {
            Some((f, e)) => (f, e),
            None => (rest, "another value"),
        };
        return Located::new(
            file,
            pos,
            path,
            format!("expected {}, found {}", plain_type(expected), found),
        );
    }
    let pos = if path.is_empty() {
        fallback
    } else {
        map.value(path).unwrap_or(fallback)
    };
    Located::new(file, pos, path, msg.to_string())
}

/// Turns serde's Rust type names into words a user knows.
fn plain_type(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a non-negative whole number".into(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number".into(),
        "f32" | "f64" => "a number".into(),
        "a boolean" | "bool" => "true or false".into(),
        "a string" => "a string".into(),
        "a sequence" => "a list".into(),
        "a map" => "a map".into(),
        other if other.starts_with("struct ") => "a map".into(),
        other if other.starts_with("a sequence") => "a list".into(),
        other => other.to_string(),
    }
}

/// Splits "name`, expected one of `a`, `b`" into ("name", ["a", "b"]).
fn split_unknown(rest: &str) -> (&str, Vec<String>) {
    let (name, tail) = rest.split_once('`').unwrap_or((rest, ""));
    let expected = tail
        .split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect();
    (name, expected)
}

/// The hint every "unknown name" message ends with: ` (did you mean "x"?)`
/// when a candidate is close enough to be a typo, else empty. The one
/// spelling of that hint; callers append it to their message.
pub fn did_you_mean<S: AsRef<str>>(word: &str, candidates: &[S]) -> String {
    closest(word, candidates)
        .map(|best| format!(" (did you mean {best:?}?)"))
        .unwrap_or_default()
}

/// The candidate closest to `word`, when it is close enough to be a typo.
pub fn closest<S: AsRef<str>>(word: &str, candidates: &[S]) -> Option<String> {
    let lower = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| {
            let c = c.as_ref();
            let score = strsim::jaro_winkler(&lower, &c.to_ascii_lowercase());
            (score, c)
        })
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_keys_and_values_by_path() {
        let text = "a: 1\nb:\n  c: [x, y]\n  d:\n    - name: p\n    - name: q\n";
        let map = SourceMap::parse(Path::new("f.yaml"), text).unwrap();
        assert_eq!(map.key("a"), Some(Pos { line: 1, col: 1 }));
        assert_eq!(map.value("a"), Some(Pos { line: 1, col: 4 }));
        assert_eq!(map.value("b.c[1]"), Some(Pos { line: 3, col: 10 }));
        assert_eq!(map.key("b.d[1].name"), Some(Pos { line: 6, col: 7 }));
        assert_eq!(map.value("b.d[1].name"), Some(Pos { line: 6, col: 13 }));
        assert_eq!(map.locate("b.d[1].missing"), Pos { line: 6, col: 7 });
        assert_eq!(map.locate("zzz"), Pos { line: 1, col: 1 });
    }

    #[test]
    fn syntax_error_is_located() {
        let err = SourceMap::parse(Path::new("f.yaml"), "a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.message.starts_with("malformed YAML"), "{err}");
        assert!(err.pos.line >= 1);
    }

    #[test]
    fn did_you_mean_is_empty_unless_a_typo() {
        assert_eq!(
            did_you_mean("nodePool", &["nodePools", "controller"]),
            " (did you mean \"nodePools\"?)"
        );
        assert_eq!(did_you_mean("zzz", &["nodePools"]), "");
    }

    #[test]
    fn closest_suggests_typos_only() {
        let keys = ["nodePools", "name", "count"];
        assert_eq!(closest("nodePool", &keys).as_deref(), Some("nodePools"));
        assert_eq!(closest("zzzzzz", &keys), None);
    }

    #[test]
    fn parent_paths() {
        assert_eq!(parent_path("a.b[1].c").as_deref(), Some("a.b[1]"));
        assert_eq!(parent_path("a.b[1]").as_deref(), Some("a.b"));
        assert_eq!(parent_path("a").as_deref(), Some(""));
        assert_eq!(parent_path(""), None);
    }
}
