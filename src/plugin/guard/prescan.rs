//! The static half of the template limits (guard.rs's module doc): a
//! template's tags read before tera sees it, and what is refused there.

use super::*;

/// A refusal at a byte offset of the template text.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub offset: usize,
    pub message: String,
}

/// What the pre-scan learned: where each macro starts, and where each tag
/// that tera turns into an expression is, with what is in it.
#[derive(Debug, Default)]
pub struct Scan {
    /// Macro name → offset of its `{% macro` tag.
    pub macros: HashMap<String, usize>,
    /// The expression tags outside any macro, in order.
    pub top: Vec<Tag>,
    /// The expression tags inside each macro, in order.
    pub in_macro: HashMap<String, Vec<Tag>>,
}

/// A tag with an expression: `{{ }}`, or `{%` `if`, `elif`, `for`, `set`,
/// `set_global`, `filter`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tag {
    pub offset: usize,
    /// The filters named in the tag (a `filter` section's own first), with
    /// the offset of each name, in text order.
    pub filters: Vec<(String, usize)>,
    /// Offsets of each `~`, in order.
    pub tildes: Vec<usize>,
    /// Offsets of each `[` that opens a list literal (not an index), in order.
    pub lists: Vec<usize>,
}

/// The keywords of statement tags that hold an expression.
const EXPRESSION_TAGS: &[&str] = &["if", "elif", "for", "set", "set_global", "filter"];

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
                b'~' => {
                    toks.push((Tok::Punct("~"), j));
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
        // `{{-` and `{%-` trim whitespace: the keyword follows the `-`.
        let toks = match toks.first() {
            Some(&(Tok::Other, at)) if b[at] == b'-' => &toks[1..],
            _ => &toks[..],
        };
        let keyword = match toks.first() {
            Some(&(Tok::Ident(k), _)) if kind == b'%' => Some(k),
            _ => None,
        };
        if kind == b'{' || keyword.is_some_and(|k| EXPRESSION_TAGS.contains(&k)) {
            let tag = tag_of(start, toks, keyword == Some("filter"));
            match &in_macro {
                Some(m) => scan.in_macro.entry(m.clone()).or_default().push(tag),
                None => scan.top.push(tag),
            }
        }
        if kind != b'%' {
            continue;
        }
        let Some(keyword) = keyword else {
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
                }
            }
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

/// The [`Tag`] at `offset` with tokens `toks` (`section`: a `{% filter %}`
/// tag, whose filter is the word after the keyword).
fn tag_of(offset: usize, toks: &[(Tok, usize)], section: bool) -> Tag {
    let mut tag = Tag {
        offset,
        ..Tag::default()
    };
    if let (true, Some(&(Tok::Ident(name), at))) = (section, toks.get(1)) {
        tag.filters.push((name.to_string(), at));
    }
    for (k, &(tok, at)) in toks.iter().enumerate() {
        let prev = k.checked_sub(1).map(|p| toks[p].0);
        match tok {
            Tok::Punct("~") => tag.tildes.push(at),
            Tok::Ident(name) if prev == Some(Tok::Punct("|")) => tag.filters.push((name.to_string(), at)),
            Tok::Punct("[") if opens_list(prev) => tag.lists.push(at),
            _ => {}
        }
    }
    tag
}

/// Does a `[` after `prev` open a list literal (not index a value)?
fn opens_list(prev: Option<Tok>) -> bool {
    match prev {
        Some(Tok::Ident(w)) => matches!(w, "in" | "and" | "or" | "not" | "is"),
        Some(Tok::Punct(")")) => false,
        _ => true,
    }
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
