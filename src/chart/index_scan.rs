//! The line pre-scan of block-layout Helm indexes (what every Helm version
//! writes): where each chart's text lies under `entries:`, the list items of
//! one chart, and an item's `version:` line, all read without a YAML parser.
//! Every function answers None for a layout it is unsure of, and the caller
//! in `index.rs` then parses the whole document instead.

/// Where each chart's text lies in a block-style index.
#[derive(Debug)]
pub(super) struct Layout {
    pub(super) has_api_version: bool,
    pub(super) api_version: Option<String>,
    pub(super) charts: Vec<ChartRange>,
}

#[derive(Debug)]
pub(super) struct ChartRange {
    pub(super) name: String,
    /// From the start of the key line to the end of its value.
    pub(super) start: usize,
    pub(super) end: usize,
}

/// Scans the lines of a block-style index. None means "not a layout this scan
/// understands": the caller parses the whole document instead.
pub(super) fn prescan(text: &str) -> Option<Layout> {
    #[derive(PartialEq)]
    enum State {
        Top,
        EntriesStart,
        Entries(usize),
        AfterEntries,
    }
    let bytes = text.as_bytes();
    let mut layout = Layout {
        has_api_version: false,
        api_version: None,
        charts: Vec::new(),
    };
    let mut state = State::Top;
    let mut pos = 0;
    let mut first_line = true;
    let mut seen = std::collections::HashSet::new();
    while pos < bytes.len() {
        let line_end = memchr::memchr(b'\n', &bytes[pos..]).map_or(bytes.len(), |i| pos + i);
        let line = &text[pos..line_end];
        let line_start = pos;
        pos = line_end + 1;
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        let content = trimmed.trim_end_matches(['\r', ' ']);
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if content.starts_with('\t') || (indent == 0 && content.starts_with('%')) {
            return None;
        }
        if first_line {
            first_line = false;
            let c = content.trim_start_matches('\u{feff}');
            if c == "---" {
                continue;
            }
        }
        if indent == 0 && (content == "---" || content == "..." || content.starts_with("--- ")) {
            return None;
        }
        if let State::Entries(n) = state {
            if indent > n || (indent == n && (content == "-" || content.starts_with("- "))) {
                continue;
            }
            if indent == n {
                let name = plain_key(content)?;
                if let Some(last) = layout.charts.last_mut() {
                    last.end = line_start;
                }
                if !seen.insert(name.clone()) {
                    return None;
                }
                layout.charts.push(ChartRange {
                    name,
                    start: line_start,
                    end: bytes.len(),
                });
                continue;
            }
            if let Some(last) = layout.charts.last_mut() {
                last.end = line_start;
            }
            if indent != 0 {
                return None;
            }
            state = State::AfterEntries;
        }
        if state == State::EntriesStart {
            if indent == 0 {
                // `entries:` with an empty value.
                state = State::AfterEntries;
            } else {
                state = State::Entries(indent);
                let name = plain_key(content)?;
                seen.insert(name.clone());
                layout.charts.push(ChartRange {
                    name,
                    start: line_start,
                    end: bytes.len(),
                });
                continue;
            }
        }
        if indent > 0 {
            continue; // inside a top-level value other than entries
        }
        let key = plain_key(content)?;
        let value = content[content.find(':')? + 1..].trim();
        let value = value.split(" #").next().unwrap_or("").trim();
        match key.as_str() {
            "entries" => {
                if state != State::Top || !value.is_empty() {
                    return None;
                }
                state = State::EntriesStart;
            }
            "apiVersion" => {
                let v = value.trim_matches(['"', '\'']);
                if !v.is_empty() {
                    layout.has_api_version = true;
                    layout.api_version = Some(v.to_string());
                }
            }
            _ => {}
        }
    }
    if state == State::Top {
        // No entries key at all: an empty index is fine, an odd one is parsed fully.
        return if layout.has_api_version { Some(layout) } else { None };
    }
    Some(layout)
}

/// The key of a `key:` or `key: value` line when it is a plain or simply
/// quoted scalar; None for anything fancier.
fn plain_key(content: &str) -> Option<String> {
    let first = content.chars().next()?;
    if first == '"' || first == '\'' {
        let rest = &content[1..];
        let close = rest.find(first)?;
        let key = &rest[..close];
        if key.contains('\\') || (first == '\'' && rest[close + 1..].starts_with('\'')) {
            return None;
        }
        let after = rest[close + 1..].trim_start();
        return after.starts_with(':').then(|| key.to_string());
    }
    if "&*!?|>{[@`%-,".contains(first) {
        return None;
    }
    let colon = content
        .find(": ")
        .or_else(|| content.strip_suffix(':').map(|s| s.len()))?;
    let key = content[..colon].trim_end();
    if key.is_empty() || key.contains(" #") {
        return None;
    }
    Some(key.to_string())
}

/// The list items of a chart's block sequence, each as its own text; None
/// when the layout is anything but `key:` followed by `- ` items.
pub(super) fn split_items(slice: &str) -> Option<Vec<&str>> {
    let first_end = slice.find('\n')?;
    let key_line = slice[..first_end].trim_end_matches('\r');
    let after_colon = key_line.trim_end().strip_suffix(':').is_some();
    if !after_colon {
        return None;
    }
    let mut starts = Vec::new();
    let mut item_indent = None;
    let mut pos = first_end + 1;
    let bytes = slice.as_bytes();
    while pos < bytes.len() {
        let line_end = memchr::memchr(b'\n', &bytes[pos..]).map_or(bytes.len(), |i| pos + i);
        let line = &slice[pos..line_end];
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        let content = trimmed.trim_end_matches(['\r', ' ']);
        let line_start = pos;
        pos = line_end + 1;
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if content.starts_with('\t') {
            return None;
        }
        let is_item = content == "-" || content.starts_with("- ");
        match item_indent {
            None if is_item => {
                item_indent = Some(indent);
                starts.push(line_start);
            }
            None => return None,
            Some(m) if indent == m && is_item => starts.push(line_start),
            Some(m) if indent <= m => return None,
            Some(_) => {}
        }
    }
    let mut items = Vec::with_capacity(starts.len());
    for (i, &st) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(slice.len());
        items.push(&slice[st..end]);
    }
    Some(items)
}

/// The `version:` value of one list item, read from its text: the key at the
/// item's mapping indent, a plain or simply quoted scalar. None when unsure.
pub(super) fn item_version(item: &str) -> Option<String> {
    let first = item.lines().next()?;
    let dash = first.find('-')?;
    let key_indent = dash + 2;
    let mut found = None;
    for (n, line) in item.lines().enumerate() {
        let body = if n == 0 {
            first.get(key_indent..)?
        } else {
            let trimmed = line.trim_start_matches(' ');
            if line.len() - trimmed.len() != key_indent {
                continue;
            }
            trimmed
        };
        let Some(rest) = body.strip_prefix("version:") else {
            continue;
        };
        if found.is_some() {
            return None;
        }
        let v = rest.trim().trim_end_matches('\r');
        let v = match v.chars().next()? {
            '"' | '\'' => {
                let q = v.chars().next()?;
                let inner = v.strip_prefix(q)?.strip_suffix(q)?;
                if inner.contains(q) || inner.contains('\\') {
                    return None;
                }
                inner
            }
            c if "[{&*!|>#%@`".contains(c) => return None,
            _ => {
                if v.contains(" #") || v.contains(": ") {
                    return None;
                }
                v
            }
        };
        found = Some(v.to_string());
    }
    found
}
