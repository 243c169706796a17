//! Text shown back to people: user values lose their control, bidi and invisible characters, long ones are cut
//! with their length stated, and lists of messages say each thing once, up to a cap, however large the input.

use peakplan_core::plan::{Plan, KEYS};
use peakplan_core::text::{clean, clip, count, quote, Said, MAX_LISTED};

/// Whether `s` holds a character that could act on a terminal or reorder or hide text around it.
pub(crate) fn has_hazard(s: &str) -> bool {
    s.chars().any(|c| {
        c.is_control()
            || matches!(c as u32, 0x061c | 0x200b..=0x200f | 0x2028..=0x202e | 0x2066..=0x2069 | 0xfeff)
    })
}

#[test]
fn quote_escapes_control_and_bidi_characters_visibly() {
    assert_eq!(quote("abc\u{202e}def"), "`abc\\u{202e}def`");
    assert_eq!(
        quote("a\nb\tc\u{1b}[2J\u{7}"),
        "`a\\nb\\tc\\u{1b}[2J\\u{7}`"
    );
    for c in [
        '\u{0}', '\u{7f}', '\u{85}', '\u{200b}', '\u{200f}', '\u{2028}', '\u{2066}', '\u{61c}',
        '\u{feff}',
    ] {
        let q = quote(&format!("x{c}y"));
        assert!(!has_hazard(&q), "{c:?} passed: {q:?}");
        assert!(
            q.contains("\\u{"),
            "{c:?} was dropped instead of shown: {q:?}"
        );
    }
    // Ordinary text, accents and CJK included, is left as it is.
    assert_eq!(quote("Llama-3.1 modèle 模型"), "`Llama-3.1 modèle 模型`");
    assert_eq!(clean("plain"), "plain");
}

#[test]
fn long_values_are_cut_and_their_length_stated() {
    let q = quote(&"a".repeat(5000));
    assert_eq!(q, format!("`{}…` (5,000 characters)", "a".repeat(39)));
    // An escape is never split by the cut, and the cut counts what is shown.
    let c = clip(&"\u{1b}".repeat(100), 20);
    assert_eq!(c, format!("{}… (100 characters)", "\\u{1b}".repeat(3)));
    assert_eq!(clip("short", 20), "short");
    assert_eq!(clip("exactly20characters!", 20), "exactly20characters!");
    assert_eq!(count(0), "0");
    assert_eq!(count(999), "999");
    assert_eq!(count(109_980), "109,980");
    assert_eq!(count(1_000_000), "1,000,000");
}

#[test]
fn said_lists_each_message_once_and_counts_what_it_drops() {
    let mut s = Said::new(3, 50);
    for i in [1, 2, 1, 3, 4, 5, 4, 2] {
        s.push(&format!("m{i}"));
    }
    assert_eq!(s.more(), 2);
    assert_eq!(s.clone().finish(), ["m1", "m2", "m3", "… and 2 more"]);
    // Merging counts the other list's dropped entries once, even where both lists dropped them.
    let mut other = Said::new(3, 50);
    for i in [5, 6, 7, 8, 9] {
        other.push(&format!("m{i}"));
    }
    s.extend(other);
    assert_eq!(s.finish(), ["m1", "m2", "m3", "… and 6 more"]);
    let mut hostile = Said::new(3, 50);
    hostile.push("a\nnote: forged\u{202e}");
    assert_eq!(hostile.finish(), ["a\\nnote: forged\\u{202e}"]);
}

#[test]
fn ten_thousand_unknown_keys_give_a_short_capped_list() {
    let q: Vec<String> = (0..10_000).map(|i| format!("k{i}=1")).collect();
    let p = Plan::parse_query(&q.join("&"));
    assert_eq!(p.diagnostics.len(), MAX_LISTED + 1);
    let last = p.diagnostics.last().unwrap();
    assert_eq!(last.key, "");
    assert_eq!(last.message, "… and 9,980 more problems");
    let total: usize = p.diagnostics.iter().map(|d| d.message.len() + 2).sum();
    assert!(total < 1024, "{total} bytes: {:?}", p.diagnostics);
    // The known keys are said once, not with every unknown key.
    let listing = p
        .diagnostics
        .iter()
        .filter(|d| d.message.contains("known keys: model"))
        .count();
    assert_eq!(listing, 1);
    assert_eq!(p.plan, Plan::default());
}

#[test]
fn a_huge_query_gives_bounded_diagnostics() {
    // 1.5 MB: 150,000 keys, half unknown, a third with hostile bytes, and every known key given twice.
    let mut q: Vec<String> = (0..150_000)
        .map(|i| match i % 3 {
            0 => format!("unknown{i}=1"),
            1 => format!("x%1B%5B2J{i}=%E2%80%AE"),
            _ => format!("k{i}"),
        })
        .collect();
    q.extend(
        KEYS.iter()
            .flat_map(|k| [format!("{k}=1"), format!("{k}=2")]),
    );
    let q = q.join("&");
    assert!(q.len() > 1_500_000, "{}", q.len());
    let p = Plan::parse_query(&q);
    assert_eq!(p.diagnostics.len(), MAX_LISTED + 1);
    assert_eq!(
        p.diagnostics.last().unwrap().message,
        format!(
            "… and {} more problems",
            count((150_000 + KEYS.len() - MAX_LISTED) as u64)
        )
    );
    let total: usize = p.diagnostics.iter().map(|d| d.message.len()).sum();
    assert!(total < 4096, "{total} bytes");
    assert!(p
        .diagnostics
        .iter()
        .all(|d| !has_hazard(&d.message) && !has_hazard(&d.key)));
    // Every key was given twice: none of the values is used.
    assert_eq!(p.plan, Plan::default());
}

#[test]
fn a_repeated_key_is_refused_and_says_no_value_is_used() {
    let p = Plan::parse_query("b=2&s=4096&b=3&b=3&b=4&b=5");
    assert_eq!(p.diagnostics.len(), 1, "{:?}", p.diagnostics);
    let d = &p.diagnostics[0];
    assert_eq!(d.key, "b");
    assert_eq!(
        d.message,
        "b is given 5 times (`2`, `3`, `3`, …); give it once (none of these values is used)"
    );
    assert!(!d.message.contains("last value"));
    assert_eq!(p.plan.micro_batch, Plan::default().micro_batch);
    assert_eq!(p.plan.seq_len, 4096, "the other keys are kept");
    // Over a base plan, the base's value stays.
    let base = Plan {
        micro_batch: 8,
        ..Plan::default()
    };
    assert_eq!(Plan::parse_query_over(base, "b=2&b=3").plan.micro_batch, 8);
}

#[test]
fn unknown_keys_are_said_once_with_a_close_known_key() {
    let p = Plan::parse_query("metod=lora&metod=full&B=2&colour=1&x=1");
    let msgs: Vec<&str> = p.diagnostics.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(msgs.len(), 4, "{msgs:?}");
    assert!(msgs[0]
        .starts_with("unknown key `metod` (did you mean `method`?); known keys: model, method,"));
    assert_eq!(msgs[1], "unknown key `B` (did you mean `b`?)");
    assert_eq!(msgs[2], "unknown key `colour`");
    assert_eq!(
        msgs[3], "unknown key `x`",
        "a one-letter key is no recognisable slip"
    );
}
