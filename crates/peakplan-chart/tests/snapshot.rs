//! SVG tests: the chart for fixed plans must match `tests/data/*.svg` byte for byte, and its text must fit its width.
//! After an intended change, regenerate with `UPDATE_SNAPSHOTS=1 cargo test -p peakplan-chart --features svg`.
#![cfg(feature = "svg")]
#![allow(clippy::unwrap_used)]

use peakplan_chart::{chart_svg, ChartData, SvgMeta, Theme};
use peakplan_core::plan::Method;
use peakplan_core::units::chart_description;
use peakplan_core::{estimate, preset_arch, Plan};

/// No description or link: what the layout tests look at is the drawing.
fn plain_svg(data: &ChartData, size: (u32, u32)) -> String {
    chart_svg(data, &Theme::LIGHT, size, &SvgMeta::default())
}

/// The snapshot of a plan's chart: `link` gives it the page's link back (the CLI writes none).
fn check(name: &str, query: &str, link: Option<&str>) {
    let data = plan_chart(query);
    let plan = Plan::parse_query(query).plan;
    let selected = estimate(preset_arch(&plan), &plan);
    let meta = SvgMeta {
        description: chart_description(plan.model.id(), &plan, selected.device_bytes),
        link: link.map(|l| format!("{l}?{}", plan.to_query())),
    };
    let svg = chart_svg(&data, &Theme::LIGHT, (720, 420), &meta);
    assert!(
        svg.contains(&format!("<title>{}</title>", data.title)),
        "{name}: no title"
    );
    let desc = format!("<desc>{}</desc>", meta.description.replace('&', "&amp;"));
    assert!(svg.contains(&desc), "{name}: no {desc}");
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
        None,
    );
    check(
        "mistral-7b-lora-a100",
        "model=mistral-7b&method=lora&r=16&targets=q,k,v,o&b=4&s=4096&gc=0&gpu=a100-80gb",
        Some("https://example.org/peakplan/"),
    );
}

/// The SVG font size of the first drawn text (not the `<title>`) that is `title`.
fn title_font_size(svg: &str, title: &str) -> f64 {
    let at = svg.find(&format!("\n{title}\n")).unwrap();
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
    let wide = title_font_size(&plain_svg(&data, (720, 420)), title);
    let narrow = title_font_size(&plain_svg(&data, (340, 420)), title);
    let short = ChartData::from_estimates("Llama 3.1 8B", [("QLoRA", &e, true)], None);
    let short_narrow = title_font_size(&plain_svg(&short, (340, 420)), "Llama 3.1 8B");
    assert!(narrow < wide * 0.9, "{narrow} vs {wide}");
    // A short title keeps the compact layout's full size.
    assert!(short_narrow > narrow, "{short_narrow} vs {narrow}");
}

/// The chart of a plan, its method chosen, as the page and the CLI build it.
fn plan_chart(query: &str) -> ChartData {
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
    let gpu = plan.gpu.preset();
    ChartData::from_estimates(
        format!("{} b={} s={}", arch.name, plan.micro_batch, plan.seq_len),
        ests.iter().map(|(l, e, s)| (*l, e, *s)),
        Some((gpu.capacity_bytes, gpu.name.to_string())),
    )
}

#[test]
fn a_clipped_bar_keeps_its_real_total_and_a_phone_names_the_gpu_in_the_legend() {
    let data = plan_chart("model=llama-3.1-8b&method=qlora&gpu=rtx-4090");
    let full = peakplan_core::units::format_bytes(data.bars[0].parts.total());
    for width in [390, 720] {
        let svg = plain_svg(&data, (width, 420));
        assert!(svg.lines().any(|l| l.trim() == full), "{width}: no {full}");
        let legend = format!("{}: 24.0 GiB", data.capacity.as_ref().unwrap().1);
        assert!(svg.contains(&legend), "{width}: no {legend}");
        // The break mark: background-coloured cuts across the clipped bars.
        let clipped = peakplan_chart::layout(&data, width, 420)
            .unwrap()
            .bars
            .iter()
            .filter(|b| b.clipped)
            .count();
        assert!(clipped >= 1, "{width}: the full bar is not clipped");
        let cuts = svg.matches("stroke=\"#FFFFFF\"").count();
        assert_eq!(cuts, 2 * clipped, "{width}: break marks");
    }
}

#[test]
fn a_title_too_long_for_a_phone_wraps_onto_a_second_line() {
    let mut data = plan_chart("model=llama-3.1-70b&method=full&gpus=32&zero=3&gpu=h100-80gb");
    data.title =
        "Llama 3.1 70B: memory per GPU at the peak of one step (b=1, s=2048; 32 GPUs with ZeRO-3)"
            .into();
    let svg = plain_svg(&data, (390, 420));
    let lines: Vec<&str> = svg.lines().map(str::trim).collect();
    assert!(
        lines.contains(&"(b=1, s=2048; 32 GPUs with ZeRO-3)"),
        "{svg}"
    );
    assert!(lines
        .iter()
        .any(|l| l.starts_with("Llama 3.1 70B: memory per GPU")));
    // On a desktop it stays one line.
    let wide = plain_svg(&data, (1280, 420));
    assert!(wide.lines().any(|l| l.trim() == data.title));
}
