//! The model picker's filter: the presets in the order people read sizes (natural: "7B" before "14B"), which
//! presets a typed filter keeps (case and separators ignored: "llama3" finds Llama 3.1), what Enter picks (the
//! best match: "qwen2.5 7" is the 7B, not the 72B), and a Hub id typed instead. Plain Rust, tested natively.

use peakplan_core::hub::{looks_like_id, HubId};
use std::cmp::Ordering;

/// `a` against `b` as people read model names: ASCII case ignored, and runs of digits compared as numbers, so
/// "Qwen2.5 7B" comes before "Qwen2.5 14B" (a text sort puts "14" first: '1' < '7'). Equal names apart from case
/// fall back to the text, so the order is total and the list the same on every load.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < x.len() && j < y.len() {
        let ord = if x[i].is_ascii_digit() && y[j].is_ascii_digit() {
            let (ei, ej) = (digits_end(x, i), digits_end(y, j));
            let (n, m) = (no_leading_zeros(&x[i..ei]), no_leading_zeros(&y[j..ej]));
            (i, j) = (ei, ej);
            // Without leading zeros the longer run is the larger number; of equal length, the text decides.
            n.len().cmp(&m.len()).then_with(|| n.cmp(m))
        } else {
            let ord = x[i].to_ascii_lowercase().cmp(&y[j].to_ascii_lowercase());
            (i, j) = (i + 1, j + 1);
            ord
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    (x.len() - i).cmp(&(y.len() - j)).then_with(|| a.cmp(b))
}

/// Where the run of digits starting at `from` ends.
fn digits_end(s: &[u8], from: usize) -> usize {
    s[from..]
        .iter()
        .position(|c| !c.is_ascii_digit())
        .map_or(s.len(), |n| from + n)
}

/// A run of digits without its leading zeros ("007" is 7; "0" is empty, which is still the smallest).
fn no_leading_zeros(run: &[u8]) -> &[u8] {
    let zeros = run.iter().take_while(|&&c| c == b'0').count();
    &run[zeros..]
}

/// The presets (id, name) in list order: by name, naturally ([`natural_cmp`]), so each family reads from its
/// smallest model to its largest.
pub fn in_list_order(
    mut models: Vec<(&'static str, &'static str)>,
) -> Vec<(&'static str, &'static str)> {
    models.sort_by(|a, b| natural_cmp(a.1, b.1));
    models
}

/// A name or a filter as matched ([`squash`]), with where its words and numbers start and end.
struct Squashed {
    text: String,
    /// For each byte offset of `text` (and its end): whether a word or a number starts or ends there.
    edges: Vec<bool>,
}

/// A name or a filter as matched: ASCII letters and digits in lowercase, with the separators people type
/// differently (spaces, `-`, `_`, `.`, brackets) dropped, so "llama3", "Llama 3.1" and "llama-3.1" read alike.
/// Two numbers that only a space or a dash parts stay apart (`|`): "Qwen2.5 7B" reads "qwen25|7b" and "Qwen2 57B"
/// "qwen2|57b", so "qwen2.5 7" does not find the 57B. Other characters stay, and match only themselves.
pub fn squash(text: &str) -> String {
    squashed(text).text
}

/// [`squash`], keeping where a dropped separator or a change from letters to digits parted two words.
fn squashed(text: &str) -> Squashed {
    let mut out = Squashed {
        text: String::with_capacity(text.len()),
        edges: Vec::with_capacity(text.len() + 1),
    };
    // A separator other than '.' since the last character kept: '.' joins a version's numbers ("2.5" is "25").
    let mut apart = false;
    for c in text.chars() {
        if c == '.' {
            continue;
        }
        if c.is_ascii() && !c.is_ascii_alphanumeric() {
            apart = true;
            continue;
        }
        let prev = out.text.chars().next_back();
        if apart && c.is_ascii_digit() && prev.is_some_and(|p| p.is_ascii_digit()) {
            out.text.push('|');
            out.edges.push(true);
        }
        let edge = apart || !prev.is_some_and(|p| same_kind(p, c));
        out.edges.push(edge);
        out.edges
            .extend(std::iter::repeat_n(false, c.len_utf8() - 1));
        out.text.push(c.to_ascii_lowercase());
        apart = false;
    }
    out.edges.push(true);
    out
}

/// Whether two characters are of one kind (both digits, or both letters), so that no word or number starts
/// between them.
fn same_kind(a: char, b: char) -> bool {
    (a.is_ascii_digit() && b.is_ascii_digit())
        || (a.is_ascii_alphabetic() && b.is_ascii_alphabetic())
}

/// How well the squashed filter `f` (not empty) sits in the squashed `name`: None where it is not there, else a
/// rank, lower better. A match that starts a word or a number ranks before one inside it ("llama" in "Llama 2"
/// before "TinyLlama"), then one that ends with the whole of a number or word before one that cuts it ("qwen2.5 7"
/// is all of "7B" and part of "72B").
fn rank_in(f: &str, name: &Squashed) -> Option<u8> {
    name.text
        .match_indices(f)
        .map(|(at, _)| {
            let inside = !name.edges.get(at).copied().unwrap_or(true);
            let cut = !name.edges.get(at + f.len()).copied().unwrap_or(true);
            2 * u8::from(inside) + u8::from(cut)
        })
        .min()
}

/// Whether a preset matches a filter, by id or by name, case and separators ignored ([`squash`]).
pub fn matches(filter: &str, id: &str, name: &str) -> bool {
    let f = squash(filter);
    f.is_empty() || rank(&f, id, name).is_some()
}

/// The better of the squashed filter's ranks in a preset's id and name.
fn rank(f: &str, id: &str, name: &str) -> Option<u8> {
    [rank_in(f, &squashed(id)), rank_in(f, &squashed(name))]
        .into_iter()
        .flatten()
        .min()
}

/// What a typed filter keeps of the presets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The ids of the presets it keeps, in list order.
    pub kept: Vec<&'static str>,
    /// What Enter picks: the best-ranked match, the first in list order among equals.
    pub best: Option<&'static str>,
    /// The line under the box: how many match and what Enter picks, or that none does; None for no filter.
    pub line: Option<String>,
}

/// The presets (in list order) a filter keeps, the one Enter picks, and the line that says so.
pub fn filtered(models: &[(&'static str, &'static str)], filter: &str) -> Found {
    let f = squash(filter);
    if f.is_empty() {
        return Found {
            kept: models.iter().map(|(id, _)| *id).collect(),
            best: None,
            line: None,
        };
    }
    let ranked: Vec<_> = models
        .iter()
        .filter_map(|&(id, name)| rank(&f, id, name).map(|r| (r, id, name)))
        .collect();
    // `min_by_key` keeps the first of equal ranks, the first in list order.
    let best = ranked.iter().min_by_key(|(r, _, _)| *r);
    let line = match best {
        None => format!(
            "No preset matches “{}”: try part of a name (\"llama3\", \"7b\"), type a Hub id (org/name), or \
             paste a config.json under “Use a Hugging Face config.json”",
            filter.trim().chars().take(40).collect::<String>()
        ),
        Some((_, _, name)) if ranked.len() == 1 => format!("1 preset matches; Enter picks {name}"),
        Some((_, _, name)) => format!("{} presets match; Enter picks {name}", ranked.len()),
    };
    Found {
        best: best.map(|(_, id, _)| *id),
        kept: ranked.iter().map(|(_, id, _)| *id).collect(),
        line: Some(line),
    }
}

/// The line for a filter that is a Hub id (`org/name`, as typed: ids are case-sensitive): what Enter loads, or
/// why it is not an id.
pub fn hub_line(text: &str) -> Option<String> {
    let t = text.trim();
    looks_like_id(t).then(|| match HubId::parse(t) {
        Ok(id) => format!("Enter loads {id} from the Hugging Face Hub"),
        Err(e) => format!("Not a Hub id: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use peakplan_core::presets;

    /// Every bundled preset, in list order, as the page has them.
    fn all() -> Vec<(&'static str, &'static str)> {
        in_list_order(presets::MODELS.iter().map(|m| (m.id, m.name)).collect())
    }

    #[test]
    fn families_read_from_the_smallest_model_to_the_largest() {
        let ids = all().into_iter().map(|(id, _)| id).collect::<Vec<_>>();
        // `input`: ids as `(before, after)` pairs that must keep that order in the list.
        let check = |before: &str, after: &str| {
            let at = |id: &str| {
                ids.iter()
                    .position(|i| *i == id)
                    .unwrap_or_else(|| panic!("no preset {id}"))
            };
            assert!(
                at(before) < at(after),
                "{before} is not before {after}: {ids:?}"
            );
        };
        for pair in [
            ["qwen2.5-0.5b", "qwen2.5-1.5b"],
            ["qwen2.5-1.5b", "qwen2.5-3b"],
            ["qwen2.5-3b", "qwen2.5-7b"],
            ["qwen2.5-7b", "qwen2.5-14b"],
            ["qwen2.5-14b", "qwen2.5-32b"],
            ["qwen2.5-32b", "qwen2.5-72b"],
            ["qwen3-8b", "qwen3-14b"],
            ["gemma-2-9b", "gemma-2-27b"],
            ["llama-2-7b", "llama-2-13b"],
            ["llama-3.1-8b", "llama-3.1-70b"],
            ["gpt-oss-20b", "gpt-oss-120b"],
            // Versions too: Qwen2 before Qwen2.5 before Qwen3.
            ["qwen2-57b-a14b", "qwen2.5-0.5b"],
            ["qwen2.5-72b", "qwen3-0.6b"],
        ] {
            check(pair[0], pair[1]);
        }
    }

    #[test]
    fn natural_order_compares_numbers_as_numbers() {
        let check = |a: &str, b: &str, expect: Ordering| {
            assert_eq!(natural_cmp(a, b), expect, "{a} vs {b}");
            assert_eq!(natural_cmp(b, a), expect.reverse(), "{b} vs {a}");
        };
        check("Qwen2.5 7B", "Qwen2.5 14B", Ordering::Less);
        check("Qwen2.5 72B", "Qwen2.5 7B", Ordering::Greater);
        check("Qwen3 0.6B", "Qwen3 1.7B", Ordering::Less);
        check("Qwen3 1.7B", "Qwen3 4B", Ordering::Less);
        check("a007", "a7", Ordering::Less);
        check("a7", "a7b", Ordering::Less);
        check("llama", "LLAMA", Ordering::Greater);
        check("llama 2", "LLaMA 65", Ordering::Less);
        check("", "", Ordering::Equal);
        check("x", "x", Ordering::Equal);
    }

    #[test]
    fn squashing_drops_case_and_separators_and_keeps_numbers_apart() {
        for (input, expect) in [
            ("Llama 3.1 8B", "llama31|8b"),
            ("llama-3.1-8b", "llama31|8b"),
            ("Llama3.1 8B", "llama31|8b"),
            ("llama3", "llama3"),
            ("Qwen2.5 7B", "qwen25|7b"),
            ("Qwen2 57B-A14B (MoE)", "qwen2|57ba14bmoe"),
            ("  gpt_oss  ", "gptoss"),
            ("Gemma 3 12B (image-text)", "gemma3|12bimagetext"),
            ("qwén", "qwén"),
            (" - ", ""),
        ] {
            assert_eq!(squash(input), expect, "{input:?}");
        }
    }

    #[test]
    fn enter_picks_the_best_match() {
        let models = all();
        // (typed, what Enter picks, how many match)
        let check = |input: &str, expect: Option<&str>, count: usize| {
            let found = filtered(&models, input);
            assert_eq!(
                (found.best, found.kept.len()),
                (expect, count),
                "{input:?}: {found:?}"
            );
        };
        check("qwen2.5 7", Some("qwen2.5-7b"), 2);
        check("Qwen2.5-7B", Some("qwen2.5-7b"), 1);
        check("qwen2.5 72", Some("qwen2.5-72b"), 1);
        check("qwen25", Some("qwen2.5-0.5b"), 7);
        check("llama3", Some("llama-3.1-8b"), 4);
        check("llama 3.1 8b", Some("llama-3.1-8b"), 1);
        check("llama-3.1-8b", Some("llama-3.1-8b"), 1);
        check("Llama3.1 8B", Some("llama-3.1-8b"), 1);
        check("LLAMA3.2", Some("llama-3.2-1b"), 2);
        // A word's start before its inside: TinyLlama also holds "llama".
        check("llama", Some("llama-2-7b"), 9);
        check("70b", Some("llama-2-70b"), 2);
        // "(MoE)" is a word of its own, as is "MoE" in "Qwen1.5 MoE A2.7B": the first in list order.
        check("moe", Some("gpt-oss-20b"), 5);
        check("mixtral", Some("mixtral-8x7b"), 1);
        check("zzz", None, 0);
    }

    #[test]
    fn the_line_says_how_many_match_and_what_enter_picks() {
        const MODELS: &[(&str, &str)] = &[
            ("llama-3.1-8b", "Llama 3.1 8B"),
            ("llama-3.1-70b", "Llama 3.1 70B"),
            ("qwen3-8b", "Qwen3 8B"),
        ];
        let check = |input: &str, kept: &[&str], line: Option<&str>| {
            let found = filtered(MODELS, input);
            assert_eq!(
                (found.kept.as_slice(), found.line.as_deref()),
                (kept, line),
                "{input:?}"
            );
        };
        check(
            "70",
            &["llama-3.1-70b"],
            Some("1 preset matches; Enter picks Llama 3.1 70B"),
        );
        check(
            "8b",
            &["llama-3.1-8b", "qwen3-8b"],
            Some("2 presets match; Enter picks Llama 3.1 8B"),
        );
        check("", &["llama-3.1-8b", "llama-3.1-70b", "qwen3-8b"], None);
        check(" - ", &["llama-3.1-8b", "llama-3.1-70b", "qwen3-8b"], None);
        check(
            "mistral",
            &[],
            Some(
                "No preset matches “mistral”: try part of a name (\"llama3\", \"7b\"), type a Hub id (org/name), \
                 or paste a config.json under “Use a Hugging Face config.json”",
            ),
        );
        assert!(
            matches("LLAMA3", "llama-3.1-8b", "Llama 3.1 8B")
                && !matches("qwen", "llama-3.1-8b", "Llama 3.1 8B")
        );
    }

    #[test]
    fn a_hub_id_says_what_enter_loads() {
        assert_eq!(
            hub_line(" Qwen/Qwen2.5-7B ").as_deref(),
            Some("Enter loads Qwen/Qwen2.5-7B from the Hugging Face Hub")
        );
        assert!(hub_line("org/..").is_some_and(|l| l.starts_with("Not a Hub id: `org/..`")));
        assert_eq!(hub_line("llama"), None);
    }
}
