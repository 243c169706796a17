//! Helpers the subjects share: plans from queries, their estimates, and the test data.

use peakplan_core::plan::{keyword_spellings, Plan};
use peakplan_core::{estimate, preset_arch, Architecture, Estimate};

pub(crate) const GIB: f64 = (1u64 << 30) as f64;

pub(crate) fn plan(q: &str) -> Plan {
    let p = Plan::parse_query(q);
    assert!(p.diagnostics.is_empty(), "{q}: {:?}", p.diagnostics);
    p.plan
}

pub(crate) fn est(q: &str) -> Estimate {
    let p = plan(q);
    estimate(preset_arch(&p), &p)
}

pub(crate) fn est_arch(arch: &Architecture, q: &str) -> Estimate {
    estimate(arch, &plan(q))
}

pub(crate) fn data(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// A synthetic Llama-style model with exactly `n` linear... parameters: one layer whose sizes multiply out.
pub(crate) fn model_with_params(layers: u64, hidden: u64, inter: u64, vocab: u64) -> Architecture {
    Architecture::llama(
        "synthetic",
        layers,
        hidden,
        inter,
        hidden / 128,
        hidden / 128,
        vocab,
    )
}

/// Every spelling of a keyword key of the vocabulary (`method`, `opt`, `shard`, …), in the order the page lists
/// them; `None` for a key that is not one enum's spellings.
pub(crate) fn keyword_values(key: &str) -> Option<Vec<&'static str>> {
    keyword_spellings(key).map(<[_]>::to_vec)
}

/// Parses `q` and checks its diagnostics: one per `(key, part of its message)` of `expect`, in order, each one
/// line. Returns the plan it parsed to.
pub(crate) fn check_diagnostics(q: &str, expect: &[(&str, &str)]) -> Plan {
    let parsed = Plan::parse_query(q);
    let got: Vec<(String, String)> = parsed
        .diagnostics
        .iter()
        .map(|d| (d.key.clone(), d.message.clone()))
        .collect();
    assert_eq!(got.len(), expect.len(), "{q}: {got:?}");
    for ((key, message), (want_key, want_part)) in got.iter().zip(expect) {
        assert_eq!(key, want_key, "{q}: {message}");
        assert!(
            message.contains(want_part),
            "{q}: {message:?} lacks {want_part:?}"
        );
        assert!(!message.contains('\n'), "{q}: one line: {message:?}");
    }
    parsed.plan
}
