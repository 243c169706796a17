//! A small, strict YAML reader for training configs, and the quoting helper the YAML exports use.
//!
//! It reads the subset that axolotl and torchtune configs are written in: block mappings nested by indentation,
//! `- item` lists (also compact ones under a key, and `- key: value` items), single-line flow collections
//! (`[a, b]`, `{k: v}`), plain, single- and double-quoted scalars, `|`/`>` block scalars and `#` comments.
//! Anchors, aliases, tags, complex keys and several documents are refused with an error naming the line,
//! never guessed. Scalars are typed as YAML 1.2's core schema does (`true`, `null`, numbers), into
//! [`serde_json::Value`], so YAML and JSON inputs are read by the same code.

use crate::text::quote;
use serde_json::{Map, Number, Value};

/// Deepest nesting accepted (real configs nest three or four levels).
pub const MAX_DEPTH: usize = 64;

/// A problem in a YAML text, with the 1-based line it was found on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YamlError {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for YamlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for YamlError {}

type Result<T> = std::result::Result<T, YamlError>;

/// An error with a message built for it.
#[cold]
#[inline(never)]
fn error(line: usize, message: String) -> YamlError {
    YamlError { line, message }
}

/// An error with a message written for it.
#[cold]
#[inline(never)]
fn error_fmt(line: usize, message: std::fmt::Arguments) -> YamlError {
    error(line, message.to_string())
}

/// An error with a fixed message.
#[cold]
#[inline(never)]
fn fail(line: usize, message: &str) -> YamlError {
    error(line, message.to_string())
}

/// `message` with `` `text` `` (clipped) inserted before `after`.
#[cold]
#[inline(never)]
fn fail_quoting(line: usize, before: &str, text: &str, after: &str) -> YamlError {
    error_fmt(line, format_args!("{before}{}{after}", quote(text)))
}

/// The error for a duplicate mapping key.
fn duplicate(line: usize, key: &str) -> YamlError {
    fail_quoting(line, "duplicate key ", key, "")
}

/// The error for a line indented unlike its siblings.
#[cold]
#[inline(never)]
fn indentation(line: usize, found: usize, expected: usize, siblings: &str) -> YamlError {
    error(
        line,
        format!(
            "unexpected indentation ({found} spaces where the {siblings} above use {expected})"
        ),
    )
}

/// The error for nesting deeper than [`MAX_DEPTH`].
fn too_deep(line: usize) -> YamlError {
    error_fmt(line, format_args!("nesting deeper than {MAX_DEPTH} levels"))
}

#[derive(Clone, Copy)]
struct Line<'a> {
    /// 1-based line number.
    no: usize,
    indent: usize,
    /// The text after the indentation (comments not yet removed).
    text: &'a str,
    /// Blank or comment-only: no structure.
    blank: bool,
}

struct Parser<'a> {
    lines: Vec<Line<'a>>,
    pos: usize,
}

/// Parses a YAML document into a JSON value. An empty document is `null`.
pub fn parse(text: &str) -> Result<Value> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = Vec::new();
    let mut seen_content = false;
    for (i, raw) in text.split('\n').enumerate() {
        let no = i + 1;
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        let indent = raw.len() - raw.trim_start_matches(' ').len();
        let rest = &raw[indent..];
        if rest.starts_with('\t') {
            return Err(fail(
                no,
                "tabs are not allowed in indentation; indent with spaces",
            ));
        }
        let trimmed = rest.trim_end();
        let mut blank = trimmed.is_empty() || trimmed.starts_with('#');
        if indent == 0 && !blank {
            let marker = before_comment(trimmed).trim_end();
            if marker == "..." {
                break;
            }
            let document = marker == "---";
            if document || trimmed.starts_with('%') {
                if seen_content {
                    return Err(fail(
                        no,
                        if document {
                            "several YAML documents in one file are not supported"
                        } else {
                            "a directive after content"
                        },
                    ));
                }
                blank = true;
            }
        }
        seen_content |= !blank;
        lines.push(Line {
            no,
            indent,
            text: rest,
            blank,
        });
    }
    let mut p = Parser { lines, pos: 0 };
    let value = match p.peek() {
        Some(i) => {
            let indent = p.lines[i].indent;
            p.node(indent, 0)?
        }
        None => Value::Null,
    };
    if let Some(i) = p.peek() {
        return Err(fail(
            p.lines[i].no,
            "unexpected indentation: this line does not continue the structure above it",
        ));
    }
    Ok(value)
}

fn is_seq_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ") || text.starts_with("-#")
}

impl<'a> Parser<'a> {
    /// Skips blank and comment lines; the index of the next structural line.
    fn peek(&mut self) -> Option<usize> {
        while self.pos < self.lines.len() && self.lines[self.pos].blank {
            self.pos += 1;
        }
        (self.pos < self.lines.len()).then_some(self.pos)
    }

    fn line_no(&self) -> usize {
        self.lines
            .get(self.pos)
            .or(self.lines.last())
            .map(|l| l.no)
            .unwrap_or(1)
    }

    fn check_depth(&self, depth: usize) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(too_deep(self.line_no()));
        }
        Ok(())
    }

    /// A node whose first line is the next structural line, at exactly `indent`.
    fn node(&mut self, indent: usize, depth: usize) -> Result<Value> {
        self.check_depth(depth)?;
        let Some(i) = self.peek() else {
            return Ok(Value::Null);
        };
        let l = self.lines[i];
        if is_seq_item(l.text) {
            return self.seq(indent, depth);
        }
        if split_key(l.text, l.no)?.is_some() {
            return self.map(indent, depth);
        }
        // A lone scalar (or flow collection) on its own line.
        self.pos = i + 1;
        let v = self.inline_value(l.text, indent, l.no, depth, false)?;
        if let Some(j) = self.peek() {
            if self.lines[j].indent > indent {
                return Err(fail(
                    self.lines[j].no,
                    "a value cannot continue on the next line here; quote it on one line",
                ));
            }
        }
        Ok(v)
    }

    fn map(&mut self, indent: usize, depth: usize) -> Result<Value> {
        let mut map = Map::new();
        while let Some(i) = self.peek() {
            let l = self.lines[i];
            if l.indent < indent {
                break;
            }
            if l.indent > indent {
                return Err(indentation(l.no, l.indent, indent, "keys"));
            }
            if is_seq_item(l.text) {
                return Err(fail(
                    l.no,
                    "a list item where a `key: value` line was expected",
                ));
            }
            let Some((key, rest)) = split_key(l.text, l.no)? else {
                return Err(fail(l.no, "expected a `key: value` line"));
            };
            if map.contains_key(&key) {
                return Err(duplicate(l.no, &key));
            }
            self.pos = i + 1;
            let v = self.inline_value(rest, indent, l.no, depth, true)?;
            map.insert(key, v);
        }
        Ok(Value::Object(map))
    }

    fn seq(&mut self, indent: usize, depth: usize) -> Result<Value> {
        let mut items = Vec::new();
        while let Some(i) = self.peek() {
            let l = self.lines[i];
            if l.indent < indent || !is_seq_item(l.text) {
                if l.indent > indent {
                    return Err(fail(
                        l.no,
                        "unexpected indentation inside a list (items start with `- `)",
                    ));
                }
                break;
            }
            if l.indent > indent {
                return Err(indentation(l.no, l.indent, indent, "items"));
            }
            let after = &l.text[1..];
            let spaces = after.len() - after.trim_start_matches(' ').len();
            let content = &after[spaces..];
            if content.is_empty() || content.starts_with('#') {
                self.pos = i + 1;
                let v = match self.peek() {
                    Some(j) if self.lines[j].indent > indent => {
                        let ni = self.lines[j].indent;
                        self.node(ni, depth + 1)?
                    }
                    _ => Value::Null,
                };
                items.push(v);
                continue;
            }
            if is_seq_item(content) || split_key(content, l.no)?.is_some() {
                // `- key: value` or `- - x`: the item is a block node starting on this very line.
                let ni = indent + 1 + spaces;
                if let Some(line) = self.lines.get_mut(i) {
                    line.indent = ni;
                    line.text = content;
                }
                items.push(self.node(ni, depth + 1)?);
                continue;
            }
            self.pos = i + 1;
            items.push(self.inline_value(content, indent, l.no, depth, false)?);
        }
        Ok(Value::Array(items))
    }

    /// The value written after `key:` or `- ` (possibly nothing, then a nested block follows).
    fn inline_value(
        &mut self,
        rest: &str,
        parent_indent: usize,
        no: usize,
        depth: usize,
        compact_list: bool,
    ) -> Result<Value> {
        self.check_depth(depth)?;
        let t = rest.trim();
        if t.is_empty() || t.starts_with('#') {
            return Ok(match self.peek() {
                Some(j) if self.lines[j].indent > parent_indent => {
                    let ni = self.lines[j].indent;
                    self.node(ni, depth + 1)?
                }
                // `key:` followed by `- item` lines at the key's own indentation.
                Some(j)
                    if compact_list
                        && self.lines[j].indent == parent_indent
                        && is_seq_item(self.lines[j].text) =>
                {
                    self.seq(parent_indent, depth + 1)?
                }
                _ => Value::Null,
            });
        }
        match t.as_bytes().first() {
            Some(b'|' | b'>') => self.block_scalar(t, parent_indent, no),
            Some(b'[' | b'{') => {
                // A flow collection may span lines (`files: [` … `]`): join them until the brackets balance.
                let mut joined = strip_comment(t).to_string();
                let mut open = bracket_balance(&joined);
                while open > 0 {
                    let Some(l) = self.lines.get(self.pos) else {
                        return Err(fail(no, "a flow collection (`[` or `{`) never closes"));
                    };
                    let more = strip_comment(l.text.trim());
                    joined.push(' ');
                    joined.push_str(more);
                    open += bracket_balance(more);
                    self.pos += 1;
                    if joined.len() > 1 << 20 {
                        return Err(fail(no, "a flow collection is too long"));
                    }
                }
                let t = joined.as_str();
                let mut f = Flow {
                    s: t,
                    i: 0,
                    no,
                    depth,
                };
                let v = f.value()?;
                f.skip_ws();
                let tail = &t[f.i..];
                if !(tail.is_empty() || tail.starts_with('#')) {
                    return Err(fail_quoting(
                        no,
                        "unexpected text after the closing bracket: ",
                        tail,
                        "",
                    ));
                }
                Ok(v)
            }
            Some(b'&' | b'*') => Err(fail(
                no,
                "anchors and aliases (`&`, `*`) are not supported; write the value out",
            )),
            Some(b'!') => Err(fail(no, "tags (`!`) are not supported")),
            _ => scalar(t, no),
        }
    }

    #[inline(never)]
    fn block_scalar(&mut self, header: &str, parent_indent: usize, no: usize) -> Result<Value> {
        let head = before_comment(header).trim_end();
        let folded = head.starts_with('>');
        let chomp = match &head[1..] {
            "" => 'c',
            "-" => '-',
            "+" => '+',
            _ => {
                return Err(fail_quoting(
                    no,
                    "block scalar header ",
                    head,
                    " is not supported (use `|`, `|-`, `|+`, `>`, `>-` or `>+`)",
                ))
            }
        };
        // The block's lines: `None` for a blank one, else its indentation beyond the block's own and its text.
        let mut lines: Vec<Option<(usize, &str)>> = Vec::new();
        let mut content_indent = None;
        while let Some(l) = self.lines.get(self.pos).copied() {
            let raw_blank = l.text.trim().is_empty();
            if !raw_blank && l.indent <= parent_indent {
                break;
            }
            if raw_blank {
                lines.push(None);
            } else {
                let ci = *content_indent.get_or_insert(l.indent);
                if l.indent < ci {
                    return Err(fail(
                        l.no,
                        "a block scalar line is less indented than its first line",
                    ));
                }
                lines.push(Some((l.indent - ci, l.text.trim_end())));
            }
            self.pos += 1;
        }
        // Trailing blank lines are chomping's business.
        let mut trailing = 0;
        while lines.last() == Some(&None) {
            lines.pop();
            trailing += 1;
        }
        // Literal (`|`) keeps the line breaks; folded (`>`) joins lines with a space, a blank line being a break.
        let mut s = String::new();
        let mut prev_blank = true;
        for (n, line) in lines.iter().enumerate() {
            match line {
                None => {
                    if folded || n > 0 {
                        s.push('\n');
                    }
                }
                Some((extra, text)) => {
                    if !folded && n > 0 {
                        s.push('\n');
                    } else if folded && !prev_blank && !s.ends_with('\n') {
                        s.push(' ');
                    }
                    for _ in 0..*extra {
                        s.push(' ');
                    }
                    s.push_str(text);
                }
            }
            prev_blank = line.is_none();
        }
        match chomp {
            '-' => {}
            '+' => {
                if !lines.is_empty() {
                    s.push('\n');
                }
                for _ in 0..trailing {
                    s.push('\n');
                }
            }
            _ => {
                if !lines.is_empty() {
                    s.push('\n');
                }
            }
        }
        Ok(Value::String(s))
    }
}

/// Splits `key: rest` (plain or quoted key); `None` when the line is not a mapping entry.
fn split_key(text: &str, no: usize) -> Result<Option<(String, &str)>> {
    if text.starts_with("? ") || text == "?" {
        return Err(fail(no, "complex keys (`? `) are not supported"));
    }
    if let Some(q) = text.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let Some((key, used)) = quoted(text, q, no)? else {
            return Ok(None);
        };
        let after = &text[used..];
        let after_t = after.trim_start();
        if let Some(rest) = after_t.strip_prefix(':') {
            if rest.is_empty() || rest.starts_with(' ') {
                return Ok(Some((key, rest)));
            }
        }
        return Ok(None);
    }
    if text.starts_with('[') || text.starts_with('{') || text.starts_with('#') {
        return Ok(None);
    }
    let b = text.as_bytes();
    for (i, c) in b.iter().enumerate() {
        if *c == b'#' && i > 0 && b[i - 1] == b' ' {
            return Ok(None);
        }
        if *c == b':' && (i + 1 == b.len() || b[i + 1] == b' ') {
            let key = text[..i].trim_end();
            if key.is_empty() {
                return Err(fail(no, "a `:` with no key before it"));
            }
            if key.starts_with('&') || key.starts_with('*') || key.starts_with('!') {
                return Err(fail(no, "anchors, aliases and tags are not supported"));
            }
            return Ok(Some((key.to_string(), &text[i + 1..])));
        }
    }
    Ok(None)
}

/// Reads a quoted string starting at `s[0] == q`; returns it and the bytes used, or `None` if it never closes
/// (then the caller reports, or treats the line as something else).
fn quoted(s: &str, q: char, no: usize) -> Result<Option<(String, usize)>> {
    // Quotes and backslashes are ASCII: the text between them is copied as is.
    let q = q as u8;
    let b = s.as_bytes();
    let mut out = String::new();
    // The first byte not yet copied, and the byte looked at.
    let mut start = 1;
    let mut i = 1;
    while let Some(&c) = b.get(i) {
        if c == q {
            out.push_str(&s[start..i]);
            if q == b'\'' && b.get(i + 1) == Some(&b'\'') {
                out.push('\'');
                i += 2;
                start = i;
                continue;
            }
            return Ok(Some((out, i + 1)));
        }
        if q == b'"' && c == b'\\' {
            out.push_str(&s[start..i]);
            let mut rest = s[i + 1..].chars();
            let Some(e) = rest.next() else {
                return Ok(None);
            };
            let digits = match e {
                'n' => {
                    out.push('\n');
                    0
                }
                't' => {
                    out.push('\t');
                    0
                }
                'r' => {
                    out.push('\r');
                    0
                }
                '0' => {
                    out.push('\0');
                    0
                }
                '\\' | '"' | '/' | ' ' => {
                    out.push(e);
                    0
                }
                'x' => 2,
                'u' => 4,
                'U' => 8,
                other => {
                    return Err(error_fmt(
                        no,
                        format_args!("unknown escape `\\{other}` in a double-quoted string"),
                    ))
                }
            };
            if digits > 0 {
                let mut code = 0u32;
                for _ in 0..digits {
                    let Some(h) = rest.next() else {
                        return Err(fail(no, "an unfinished escape in a quoted string"));
                    };
                    let Some(d) = h.to_digit(16) else {
                        return Err(error_fmt(
                            no,
                            format_args!("`{h}` is not a hex digit in a `\\{e}` escape"),
                        ));
                    };
                    code = code.saturating_mul(16).saturating_add(d);
                }
                match char::from_u32(code) {
                    Some(ch) => out.push(ch),
                    None => {
                        return Err(error_fmt(
                            no,
                            format_args!("escape \\{e}{code:x} is not a character"),
                        ))
                    }
                }
            }
            i = s.len() - rest.as_str().len();
            start = i;
            continue;
        }
        i += 1;
    }
    Ok(None)
}

/// Types a scalar written after `key:` or `- ` (quoted, or plain up to a ` #` comment).
fn scalar(t: &str, no: usize) -> Result<Value> {
    if let Some(q) = t.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let Some((s, used)) = quoted(t, q, no)? else {
            return Err(fail(
                no,
                "a quoted string does not close on its line (multi-line strings: use `|`)",
            ));
        };
        let tail = t[used..].trim_start();
        if !(tail.is_empty() || tail.starts_with('#')) {
            return Err(fail_quoting(
                no,
                "unexpected text after the quoted string: ",
                tail,
                "",
            ));
        }
        return Ok(Value::String(s));
    }
    let plain = before_comment(t).trim_end();
    Ok(plain_scalar(plain))
}

/// YAML 1.2 core schema typing of a plain scalar.
fn plain_scalar(s: &str) -> Value {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    let numeric = s
        .bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'+' | b'-' | b'.' | b'e' | b'E'))
        && s.bytes().any(|c| c.is_ascii_digit());
    if numeric {
        let unsigned = s.strip_prefix('+').unwrap_or(s);
        if let Ok(n) = unsigned.parse::<u64>() {
            return Value::Number(n.into());
        }
        if let Ok(n) = s.parse::<i64>() {
            return Value::Number(n.into());
        }
        // The core's reader, not `str::parse` (same values; see `crate::decimal`).
        if let Some(f) = crate::decimal::parse_f64(s) {
            if let Some(n) = Number::from_f64(f) {
                return Value::Number(n);
            }
        }
    }
    Value::String(s.to_string())
}

/// A single-line flow collection: `[a, "b", {k: v}]`.
struct Flow<'s> {
    s: &'s str,
    i: usize,
    no: usize,
    depth: usize,
}

impl Flow<'_> {
    fn skip_ws(&mut self) {
        while self.s.as_bytes().get(self.i) == Some(&b' ') {
            self.i += 1;
        }
    }
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }
    fn value(&mut self) -> Result<Value> {
        if self.depth > MAX_DEPTH {
            return Err(too_deep(self.no));
        }
        self.skip_ws();
        match self.peek() {
            Some(b'[') => {
                self.i += 1;
                self.depth += 1;
                let mut items = Vec::new();
                loop {
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        self.i += 1;
                        break;
                    }
                    items.push(self.value()?);
                    self.skip_ws();
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            break;
                        }
                        _ => {
                            return Err(fail(
                                self.no,
                                "a flow list must close with `]` on the same line",
                            ))
                        }
                    }
                }
                self.depth -= 1;
                Ok(Value::Array(items))
            }
            Some(b'{') => {
                self.i += 1;
                self.depth += 1;
                let mut map = Map::new();
                loop {
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        self.i += 1;
                        break;
                    }
                    let key = match self.value()? {
                        Value::String(s) => s,
                        Value::Null => String::new(),
                        other => json_text(&other),
                    };
                    self.skip_ws();
                    if self.peek() != Some(b':') {
                        return Err(fail_quoting(
                            self.no,
                            "expected `:` after ",
                            &key,
                            " in a flow mapping",
                        ));
                    }
                    self.i += 1;
                    self.skip_ws();
                    let v = if matches!(self.peek(), Some(b',' | b'}')) {
                        Value::Null
                    } else {
                        self.value()?
                    };
                    if map.contains_key(&key) {
                        return Err(duplicate(self.no, &key));
                    }
                    map.insert(key, v);
                    self.skip_ws();
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            break;
                        }
                        _ => {
                            return Err(fail(
                                self.no,
                                "a flow mapping must close with `}` on the same line",
                            ))
                        }
                    }
                }
                self.depth -= 1;
                Ok(Value::Object(map))
            }
            Some(q @ (b'"' | b'\'')) => {
                let rest = &self.s[self.i..];
                let Some((s, used)) = quoted(rest, q as char, self.no)? else {
                    return Err(fail(self.no, "a quoted string does not close on its line"));
                };
                self.i += used;
                Ok(Value::String(s))
            }
            Some(b'&' | b'*' | b'!') => {
                Err(fail(self.no, "anchors, aliases and tags are not supported"))
            }
            Some(_) => {
                // A plain scalar ends at `,`, `]`, `}` or a `:` followed by a space, `,`, `}`, `]` or the end.
                let rest = &self.s[self.i..];
                let b = rest.as_bytes();
                let end = (0..b.len())
                    .find(|&k| match b[k] {
                        b',' | b']' | b'}' => true,
                        b':' => matches!(b.get(k + 1), None | Some(b' ' | b',' | b'}' | b']')),
                        _ => false,
                    })
                    .unwrap_or(b.len());
                self.i += end;
                Ok(plain_scalar(rest[..end].trim()))
            }
            None => Err(fail(self.no, "a flow collection ends early")),
        }
    }
}

/// The text before the first ` #` (all of it when there is none).
fn before_comment(s: &str) -> &str {
    let b = s.as_bytes();
    match (1..b.len()).find(|&i| b[i] == b'#' && b[i - 1] == b' ') {
        Some(i) => &s[..i - 1],
        None => s,
    }
}

/// The text before a ` #` comment that is outside quotes.
fn strip_comment(s: &str) -> &str {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '#' && (prev == ' ' || i == 0) => return s[..i].trim_end(),
            None => {}
        }
        prev = c;
    }
    s.trim_end()
}

/// Opening minus closing brackets outside quotes.
#[inline(never)]
fn bracket_balance(s: &str) -> i64 {
    let mut quote = None;
    let mut n = 0i64;
    for c in s.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' => quote = Some(c),
                '[' | '{' => n += 1,
                ']' | '}' => n -= 1,
                _ => {}
            },
        }
    }
    n
}

/// A string as a YAML scalar: plain when that reads back as the same string, else double-quoted.
pub fn scalar_text(s: &str) -> String {
    let plain_ok = !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'/' | b'-'))
        && !s.starts_with(['-', '.'])
        // The only string `plain_scalar` returns is its input.
        && matches!(plain_scalar(s), Value::String(_));
    if plain_ok {
        s.to_string()
    } else {
        json_str(s)
    }
}

/// A string as a JSON string literal.
#[inline(never)]
pub(crate) fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// A value as compact JSON, as `Value`'s `Display` writes it.
pub(crate) fn json_text(v: &Value) -> String {
    let mut out = String::new();
    write_json(v, &mut out);
    out
}

fn write_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => out.push_str(&json_str(s)),
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&json_str(k));
                out.push(':');
                write_json(x, out);
            }
            out.push('}');
        }
    }
}
