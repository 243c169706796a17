//! The chart's scale and its labels: the axis follows the chosen plan and the GPU line, taller comparison bars are
//! clipped and marked, and no label covers another, the GPU line or a bar, at any width from a phone up.
#![allow(clippy::unwrap_used)]

use peakplan_chart::{layout, overlaps, place_labels, Bar, ChartData, ChartLayout};
use peakplan_core::engine::PhaseMemory;

const GIB: f64 = (1u64 << 30) as f64;

/// Bars of the given totals (GiB), the `chosen` one selected, under a GPU line of `capacity` GiB.
fn chart(totals: &[f64], chosen: usize, capacity: f64) -> ChartData {
    let names = ["Full", "LoRA", "QLoRA", "After: Use the fused AdamW"];
    ChartData {
        title: "t".into(),
        bars: totals
            .iter()
            .enumerate()
            .map(|(i, t)| Bar {
                label: names[i].to_string(),
                parts: PhaseMemory {
                    weights: (t * 0.6 * GIB) as u64,
                    activations: (t * 0.4 * GIB) as u64,
                    ..PhaseMemory::default()
                },
                selected: i == chosen,
            })
            .collect(),
        capacity: Some(((capacity * GIB) as u64, "NVIDIA GeForce RTX 4090".into())),
    }
}

fn height(l: &ChartLayout, i: usize) -> i32 {
    l.bottom - l.bars[i].top_y
}

#[test]
fn the_axis_follows_the_chosen_bar_and_the_gpu_line_and_clips_taller_bars() {
    // QLoRA of Llama 3.1 8B on a 4090: the 10.7 GiB plan under a 152 GiB full fine-tuning bar.
    let data = chart(&[152.0, 30.1, 10.7], 2, 24.0);
    let l = layout(&data, 720, 420).unwrap();
    let plot = l.bottom - l.top;
    assert!(
        height(&l, 2) * 3 > plot,
        "the chosen bar is {} of {plot} px",
        height(&l, 2)
    );
    let line = l.y_of((24.0 * GIB) as u64);
    assert!(
        line > l.top && line - l.top < plot / 5,
        "the GPU line sits near the top: {line}"
    );
    assert!(l.bars[0].clipped && l.bars[1].clipped && !l.bars[2].clipped);
    assert_eq!(l.bars[0].top_y, l.top);
    // A clipped bar's segments stay inside the plot, and its label still reads its real total.
    assert!(l.bars[0].segments.iter().all(|s| s.y0 >= l.top));
    let labels = place_labels(&data, &l, 12.0);
    assert_eq!(labels.totals[0].text, "152 GiB");
    // A plan that does not fit sets the axis itself, with the GPU line below it.
    let over = chart(&[152.0, 30.1, 10.7], 0, 24.0);
    let l = layout(&over, 720, 420).unwrap();
    assert!(l.bars.iter().all(|b| !b.clipped));
    // Without a chosen bar the tallest one sets the axis.
    let none = chart(&[152.0, 30.1, 10.7], 9, 24.0);
    assert!(layout(&none, 720, 420)
        .unwrap()
        .bars
        .iter()
        .all(|b| !b.clipped));
}

#[test]
fn no_label_covers_another_the_gpu_line_or_a_bar_at_any_width() {
    let cases: &[(&[f64], usize)] = &[
        (&[152.0, 30.1, 10.7], 2),
        (&[176.0, 47.2, 20.2], 2),
        (&[23.0, 23.4, 22.8], 1),
        (&[24.5, 23.9, 23.5, 22.0], 2),
        (&[90.0, 22.0, 23.5], 2),
        (&[5.0, 5.0, 5.0], 0),
        (&[30.0, 15.0, 8.0, 6.5], 2),
    ];
    let mut checked = 0;
    for width in [300u32, 390, 480, 720, 1280] {
        for (totals, chosen) in cases {
            let mut cap = 2.0;
            while cap < 200.0 {
                let data = chart(totals, *chosen, cap);
                let l = layout(&data, width, 420).unwrap();
                let labels = place_labels(&data, &l, if width < 420 { 10.0 } else { 12.0 });
                let at = format!("{totals:?} at {cap} GiB, {width} px");
                let line = labels.line.unwrap();
                for (i, t) in labels.totals.iter().enumerate() {
                    assert!(!overlaps(t.bbox, line), "{at}: total {i} on the GPU line");
                    assert!(t.bbox.1 >= l.legend_bottom, "{at}: total {i} on the legend");
                    assert!(t.bbox.3 <= l.bars[i].top_y, "{at}: total {i} over its bar");
                    for (j, u) in labels.totals.iter().enumerate().skip(i + 1) {
                        assert!(
                            !overlaps(t.bbox, u.bbox),
                            "{at}: totals {i} and {j} overlap"
                        );
                    }
                }
                if let Some(c) = &labels.capacity {
                    assert!(!overlaps(c.bbox, line) || c.bbox.3 < line.3, "{at}");
                    for (i, t) in labels.totals.iter().enumerate() {
                        assert!(!overlaps(c.bbox, t.bbox), "{at}: GPU label on total {i}");
                    }
                    for (i, b) in l.bars.iter().enumerate() {
                        let bar = (b.x0 - 3, b.top_y - 3, b.x1 + 3, l.bottom);
                        assert!(!overlaps(c.bbox, bar), "{at}: GPU label over bar {i}");
                    }
                }
                checked += 1;
                cap += 1.5;
            }
        }
    }
    assert!(checked > 600);
}

#[test]
fn a_long_bar_name_wraps_under_its_bar_and_clips_with_an_ellipsis() {
    let mut data = chart(&[30.0, 15.0, 8.0, 6.5], 2, 24.0);
    data.bars[3].label = "After: Halve the micro-batch to 2 and accumulate twice as long".into();
    let l = layout(&data, 390, 420).unwrap();
    assert_eq!(l.names[0], ["Full"]);
    let after = &l.names[3];
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(
        after[0].starts_with("After:") && after[1].ends_with('…'),
        "{after:?}"
    );
    // On a desktop it has room for more.
    let wide = layout(&data, 1280, 420).unwrap();
    assert!(wide.names[3].concat().len() > after.concat().len());
}
