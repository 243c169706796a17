//! The export templates: a text with `{{name}}` placeholders and sections (the `*.tmpl` files next to this module),
//! filled by one [`render`] from named values and flags.
//!
//! `{{name}}` is replaced by the value of `name`; a flag's value is written as `bools[0]` (true) or `bools[1]`
//! (false). A line holding only `{{#name}}` (or `{{^name}}`) opens a section that is kept when the flag is true or
//! the value non-empty (false, empty), up to the matching `{{/name}}` line; sections nest, and the tag lines
//! themselves are not written. A value is written as is, never re-read.

use std::borrow::Cow;

/// Names a template is filled with, and their values: the names are static, only the values and flags are built
/// at run time. Built through [`vars!`], which keeps each name next to its value. A template can
/// be filled from several of these (one per part of an export), each name given once.
pub(crate) struct Vars<'a> {
    /// The names of the text values.
    pub(crate) values: &'static [&'static str],
    /// The text values, in the order of `values`.
    pub(crate) value_of: Vec<Cow<'a, str>>,
    /// The names of the flags.
    pub(crate) flags: &'static [&'static str],
    /// The flags, in the order of `flags`.
    pub(crate) flag_of: Vec<bool>,
}

pub(crate) const PY_BOOLS: [&str; 2] = ["True", "False"];
pub(crate) const YAML_BOOLS: [&str; 2] = ["true", "false"];

/// Fills `text` with the values and flags of `vars`; `bools` is how the template's language spells true and false.
#[inline(never)]
pub(crate) fn render(text: &str, bools: [&'static str; 2], vars: &[Vars<'_>]) -> String {
    for v in vars {
        debug_assert_eq!(v.values.len(), v.value_of.len());
        debug_assert_eq!(v.flags.len(), v.flag_of.len());
    }
    let mut out = String::with_capacity(text.len() + 1024);
    let mut depth = 0usize;
    // The depth of the outermost section being left out, or 0 when everything is written.
    let mut hidden = 0usize;
    for line in text.split_inclusive('\n') {
        let b = line.as_bytes();
        let body = line.strip_suffix('\n').unwrap_or(line);
        if let Some(tag) = body.strip_prefix("{{").and_then(|t| t.strip_suffix("}}")) {
            let name = tag.get(1..).unwrap_or("");
            match tag.as_bytes().first() {
                Some(c @ (b'#' | b'^')) => {
                    depth += 1;
                    if hidden == 0 && lookup(bools, vars, name).1 != (*c == b'#') {
                        hidden = depth;
                    }
                    continue;
                }
                Some(b'/') => {
                    if hidden == depth {
                        hidden = 0;
                    }
                    depth = depth.saturating_sub(1);
                    continue;
                }
                _ => {}
            }
        }
        if hidden != 0 {
            continue;
        }
        // `{{name}}` placeholders; the rest of the line is copied as is.
        let mut copied = 0;
        let mut i = 0;
        while i + 1 < b.len() {
            if b[i] == b'{' && b[i + 1] == b'{' {
                if let Some(j) =
                    (i + 2..b.len().saturating_sub(1)).find(|&j| b[j] == b'}' && b[j + 1] == b'}')
                {
                    out.push_str(&line[copied..i]);
                    out.push_str(lookup(bools, vars, &line[i + 2..j]).0);
                    i = j + 2;
                    copied = i;
                    continue;
                }
            }
            i += 1;
        }
        out.push_str(&line[copied..]);
    }
    out
}

/// The text of a name in a template, and whether it counts as set for a section (a true flag, a non-empty value).
#[inline(never)]
fn lookup<'a>(bools: [&'static str; 2], vars: &'a [Vars<'_>], name: &str) -> (&'a str, bool) {
    for v in vars {
        if let Some(i) = v.flags.iter().position(|k| *k == name) {
            let on = v.flag_of.get(i).copied().unwrap_or(false);
            return (bools[usize::from(!on)], on);
        }
    }
    for v in vars {
        if let Some(i) = v.values.iter().position(|k| *k == name) {
            let s = v.value_of.get(i).map_or("", |c| &**c);
            return (s, !s.is_empty());
        }
    }
    debug_assert!(false, "template variable `{name}` not given");
    ("", false)
}

/// `vars!("name" => value, ...; "flag" => condition, ...)`: a [`Vars`] with the names static; a value is a
/// `&str`, a `&String` or a `String`.
macro_rules! vars {
    ($($name:literal => $value:expr),* $(,)?;
     $($flag:literal => $on:expr),* $(,)?) => {
        $crate::interop::template::Vars {
            values: &[$($name),*],
            value_of: vec![$(::std::borrow::Cow::from($value)),*],
            flags: &[$($flag),*],
            flag_of: vec![$($on),*],
        }
    };
}
pub(crate) use vars;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_fill_values_flags_and_sections() {
        let text = "a {{x}} {{f}}\n{{#f}}\nshown {{x}}\n{{^g}}\nnested\n{{/g}}\n{{/f}}\n{{#x}}\nx set\n{{/x}}\n{{#g}}\nhidden\n{{#f}}\nalso hidden\n{{/f}}\n{{/g}}\n{{y}}{{ unclosed\n";
        assert_eq!(
            render(
                text,
                PY_BOOLS,
                &[vars!("x" => "1", "y" => ""; "f" => true, "g" => false)]
            ),
            "a 1 True\nshown 1\nnested\nx set\n{{ unclosed\n"
        );
        assert_eq!(
            render(
                text,
                PY_BOOLS,
                &[vars!("x" => "", "y" => "y"; "f" => false, "g" => false)]
            ),
            "a  False\ny{{ unclosed\n"
        );
        // Names split between parts fill the same template.
        assert_eq!(
            render(
                text,
                PY_BOOLS,
                &[
                    vars!("x" => "1"; "g" => false),
                    vars!("y" => ""; "f" => true)
                ]
            ),
            "a 1 True\nshown 1\nnested\nx set\n{{ unclosed\n"
        );
    }
}
