//! Writing data into YAML so it comes back byte-exact: quoted scalars for
//! short values, literal blocks for text that survives them, base64 otherwise.

use base64::Engine;

/// A YAML double-quoted scalar holding exactly `s` (JSON escapes plus the
/// characters YAML 1.1 readers treat as line breaks or a BOM).
pub fn quote(s: &str) -> String {
    let json = serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    json.replace('\u{85}', "\\N")
        .replace('\u{2028}', "\\L")
        .replace('\u{2029}', "\\P")
        .replace('\u{feff}', "\\uFEFF")
}

/// Can `s` be a `|` literal block (clip chomping) and read back unchanged?
fn block_safe(s: &str) -> bool {
    s.ends_with('\n')
        && !s.ends_with("\n\n")
        && !s.starts_with([' ', '\t', '\n'])
        && s.chars().all(|c| c == '\n' || c == '\t' || (c >= ' ' && c != '\u{7f}' && !is_special(c)))
        // A line of only spaces followed by more text is kept, but indentation
        // detection looks at the first non-empty line, checked above; a line
        // starting with a tab is content, yet some readers reject it, so avoid it.
        && !s.lines().any(|l| l.starts_with('\t'))
}

fn is_special(c: char) -> bool {
    matches!(
        c,
        '\u{80}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
    )
}

/// How a file's content is written under a `write_files` entry.
pub struct FileContent {
    /// `true` when the content is base64 (`encoding: b64`).
    pub b64: bool,
    /// The YAML text after `content: `, already indented by `indent` spaces for block lines.
    pub yaml: String,
}

/// The `content:` value for `s`, with block lines indented by `indent` spaces.
pub fn file_content(s: &str, indent: usize) -> FileContent {
    if s.is_empty() {
        return FileContent {
            b64: false,
            yaml: "\"\"".into(),
        };
    }
    if block_safe(s) {
        let pad = " ".repeat(indent);
        let mut out = String::with_capacity(s.len() + s.lines().count() * (indent + 1) + 2);
        out.push('|');
        for line in s.lines() {
            out.push('\n');
            if !line.is_empty() {
                out.push_str(&pad);
                out.push_str(line);
            }
        }
        return FileContent { b64: false, yaml: out };
    }
    FileContent {
        b64: true,
        yaml: base64::engine::general_purpose::STANDARD.encode(s.as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_only_when_it_reads_back_exactly() {
        assert!(!file_content("a\n", 2).b64);
        assert!(file_content("a", 2).b64, "no trailing newline");
        assert!(file_content("a\n\n", 2).b64, "two trailing newlines");
        assert!(file_content("  lead\n", 2).b64, "leading spaces");
        assert!(file_content("a\r\nb\n", 2).b64, "carriage return");
        assert!(file_content("a\u{2028}b\n", 2).b64, "unicode line separator");
        assert_eq!(file_content("x: 1\n\ny\n", 4).yaml, "|\n    x: 1\n\n    y");
    }

    #[test]
    fn quote_escapes_yaml_line_breaks() {
        assert_eq!(quote("a\u{2028}b\"c"), "\"a\\Lb\\\"c\"");
    }
}
