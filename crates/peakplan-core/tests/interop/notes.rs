//! Notes of an import: each field said once, capped with a count of the rest however long the file's lists, and
//! free of anything that could act on a terminal or forge a line, in field names as in values.

use crate::{data, import_one};
use peakplan_core::interop::{import, Imported};
use peakplan_core::text::MAX_LISTED;

fn adapter(targets: &[String]) -> String {
    serde_json::json!({"peft_type": "LORA", "r": 8, "target_modules": targets}).to_string()
}

/// Whether `s` holds a character that could act on a terminal or reorder or hide text around it.
fn has_hazard(s: &str) -> bool {
    s.chars().any(|c| {
        c.is_control()
            || matches!(c as u32, 0x061c | 0x200b..=0x200f | 0x2028..=0x202e | 0x2066..=0x2069 | 0xfeff)
    })
}

fn shown(got: &Imported) -> impl Iterator<Item = &String> {
    got.unsupported.iter().chain(&got.notes)
}

#[test]
fn a_hundred_thousand_unknown_target_modules_give_a_capped_list() {
    let names: Vec<String> = (0..110_000).map(|i| format!("m{i}")).collect();
    let text = adapter(&names);
    assert!(text.len() > 900_000, "{}", text.len());
    let got = import_one("adapter_config.json", &text);
    assert_eq!(got.plan.rank, 8);
    assert_eq!(got.unsupported.len(), MAX_LISTED + 1);
    assert_eq!(got.unsupported[0], "target_modules: m0");
    assert_eq!(got.unsupported[MAX_LISTED], "… and 109,980 more");
    assert!(got.notes.len() <= 4, "{:?}", got.notes);
    // The same names again in a second file are not counted twice.
    let twice = import(&[("a.json", &text), ("b.json", &text)]).unwrap();
    assert_eq!(twice.unsupported, got.unsupported);
}

#[test]
fn an_axolotl_flow_list_of_a_hundred_thousand_entries_gives_a_capped_list() {
    let names: Vec<String> = (0..105_000).map(|i| format!("m{i}")).collect();
    let text = format!(
        "base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nlora_r: 8\nlora_target_modules: [{}]\n",
        names.join(", ")
    );
    let got = import_one("axolotl.yaml", &text);
    assert_eq!(got.unsupported.len(), MAX_LISTED + 1);
    assert_eq!(got.unsupported[MAX_LISTED], "… and 104,980 more");
}

#[test]
fn notes_of_one_file_are_capped_with_a_count() {
    // Each entry that is no module name is a note of its own.
    let text = serde_json::json!({"peft_type": "LORA", "r": 8, "target_modules": (0..50_000).collect::<Vec<_>>()});
    let got = import_one("adapter_config.json", &text.to_string());
    let skipped = got
        .notes
        .iter()
        .filter(|n| n.contains("is not a module name"))
        .count();
    assert!(skipped < MAX_LISTED, "{skipped}");
    let more: Vec<&String> = got
        .notes
        .iter()
        .filter(|n| n.contains("more notes"))
        .collect();
    assert_eq!(more.len(), 1, "{:?}", got.notes);
    assert!(
        more[0].starts_with("adapter_config.json: … and 49,9"),
        "{}",
        more[0]
    );
    assert!(got.notes.len() <= MAX_LISTED + 3, "{}", got.notes.len());
}

#[test]
fn hostile_names_and_values_cannot_act_on_the_terminal_or_forge_a_line() {
    // The hardening check's file, with a bidi override and a line separator besides.
    let text = data("evil_adapter_config.json");
    let got = import_one("evil\u{1b}[2J\u{202e}.json", &text);
    for s in shown(&got) {
        assert!(!has_hazard(s), "{s:?}");
    }
    let all: Vec<&String> = shown(&got).collect();
    assert!(
        all.iter().any(|s| s.contains("\\u{1b}]0;owned\\u{7}")),
        "{all:?}"
    );
    assert!(
        all.iter().any(|s| s.contains("x\\nnote: this config")),
        "{all:?}"
    );
    assert!(all.iter().any(|s| s.contains("\\u{1b}[5mblink")), "{all:?}");
    assert!(
        all.iter().any(|s| s.contains("lora_alpha\\u{202e}")),
        "{all:?}"
    );
    assert!(all
        .iter()
        .all(|s| s.starts_with("evil\\u{1b}[2J\\u{202e}.json") || !s.contains("evil")));
}

#[test]
fn errors_show_hostile_file_names_and_content_escaped() {
    let e = import(&[("a\u{202e}\n.yaml", r#"{"just\u001b[2J": 1}"#)]).unwrap_err();
    let shown = e.to_string();
    assert!(!has_hazard(&shown), "{shown:?}");
    assert!(
        shown.starts_with("a\\u{202e}\\n.yaml: is not a training config"),
        "{shown}"
    );
}
