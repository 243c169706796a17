//! SVG tests: the chart for fixed plans must match `tests/data/*.svg` byte for byte, and its text must fit its width.
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
        Some((
            plan.gpu.preset().capacity_bytes,
            plan.gpu.preset().name.to_string(),
        )),
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

/// The SVG font size of the first text that starts with `title`.
fn title_font_size(svg: &str, title: &str) -> f64 {
    let at = svg.find(title).unwrap();
    let tag = &svg[svg[..at].rfind("<text").unwrap()..at];
    let size = tag.split("font-size=\"").nth(1).unwrap();
    size[..size.find('"').unwrap()].parse().unwrap()
}

#[test]
fn a_long_title_shrinks_to_fit_a_phone_and_stays_put_on_a_desktop() {
    let plan = Plan::parse_query("model=llama-3.1-8b&method=qlora").plan;
    let e = estimate(preset_arch(&plan), &plan);
    let title = "Llama 3.1 8B: memory at the peak of one step (b=1, s=2048)";
    let data = ChartData::from_estimates(title, [("QLoRA", &e, true)], None);
    let wide = title_font_size(&chart_svg(&data, &Theme::LIGHT, (720, 420)), title);
    let narrow = title_font_size(&chart_svg(&data, &Theme::LIGHT, (340, 420)), title);
    let short = ChartData::from_estimates("Llama 3.1 8B", [("QLoRA", &e, true)], None);
    let short_narrow = title_font_size(
        &chart_svg(&short, &Theme::LIGHT, (340, 420)),
        "Llama 3.1 8B",
    );
    assert!(narrow < wide * 0.9, "{narrow} vs {wide}");
    // A short title keeps the compact layout's full size.
    assert!(short_narrow > narrow, "{short_narrow} vs {narrow}");
}
