//! SVG snapshot tests: the chart for fixed plans must match `tests/data/*.svg` byte for byte.
//! After an intended change, regenerate with `UPDATE_SNAPSHOTS=1 cargo test -p peakplan-chart --features svg`.
#![cfg(feature = "svg")]
#![allow(clippy::unwrap_used)]

use peakplan_chart::{chart_svg, ChartData, Theme};
use peakplan_core::plan::Method;
use peakplan_core::{estimate, preset_arch, Plan};

fn check(name: &str, query: &str) {
    let plan = Plan::parse_query(query).plan;
    let arch = preset_arch(&plan);
    let ests: Vec<_> = Method::ALL
        .iter()
        .map(|m| {
            let mut p = plan.clone();
            p.method = *m;
            (m.key(), estimate(arch, &p), *m == plan.method)
        })
        .collect();
    let data = ChartData::from_estimates(
        format!("{} b={} s={}", arch.name, plan.micro_batch, plan.seq_len),
        ests.iter().map(|(l, e, s)| (*l, e, *s)),
        peakplan_core::presets::gpu(&plan.gpu).map(|g| (g.capacity_bytes, g.name.to_string())),
    );
    let svg = chart_svg(&data, &Theme::LIGHT, (720, 420));
    for word in [
        "<svg",
        "Weights",
        "Gradients",
        "Optimizer states",
        "Activations",
        "Other",
    ] {
        assert!(svg.contains(word), "{name}: no {word}");
    }
    let path = format!("{}/tests/data/{name}.svg", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &svg).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        want == svg,
        "{name}: SVG differs from {path} (UPDATE_SNAPSHOTS=1 to accept)"
    );
}

#[test]
fn snapshots() {
    check(
        "llama-2-7b-qlora",
        "model=llama-2-7b&method=qlora&r=16&b=1&s=1024",
    );
    check(
        "mistral-7b-lora-a100",
        "model=mistral-7b&method=lora&r=16&targets=q,k,v,o&b=4&s=4096&gc=0&gpu=a100-80gb",
    );
}
