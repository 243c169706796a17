//! Where the chart's words go: the legend's rows, the bars' names, each bar's total and the GPU line's label,
//! placed so that no two overlap and none sits on the GPU line, at any width.

use crate::{ChartData, ChartLayout};
use peakplan_core::engine::Category;
use peakplan_core::units::format_bytes;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::BackendCoord;

/// A text box in backend pixels: `(x0, y0, x1, y1)`, y0 above y1.
pub type TextBox = (i32, i32, i32, i32);

/// Pixels between a bar's top and the bottom of its total label.
pub(crate) const TOTAL_LABEL_GAP: i32 = 6;
/// Pixels between the capacity line and its label.
pub(crate) const CAPACITY_LABEL_GAP: i32 = 4;
/// Half the height of the band around the GPU line that no total may cover (the dashes are 2 px thick).
const LINE_BAND: i32 = 3;

/// Advance widths of printable ASCII (space to `~`), in thousandths of an em: Helvetica's published metrics, which
/// Arial and Liberation Sans (the sans-serif fonts browsers fall back to on Windows, macOS and most Linux) share.
const ADVANCE_MILLI_EM: [u16; 95] = [
    278, 278, 355, 556, 556, 889, 667, 191, 333, 333, 389, 584, 278, 333, 278,
    278, // space to /
    556, 556, 556, 556, 556, 556, 556, 556, 556, 556, // 0 to 9
    278, 278, 584, 584, 584, 556, 1015, // : to @
    667, 667, 722, 722, 667, 611, 778, 722, 278, 500, 667, 556, 833, 722, 778, 667, 778, 722, 667,
    611, 722, 667, 944, 667, 667, 611, // A to Z
    278, 278, 278, 469, 556, 333, // [ to `
    556, 556, 500, 556, 556, 278, 556, 556, 222, 222, 500, 222, 833, 556, 556, 556, 556, 333, 500,
    278, 556, 500, 722, 500, 500, 500, // a to z
    334, 260, 334, 584, // { to ~
];

/// Room left for fonts wider than those metrics: DejaVu Sans, the sans-serif of many Linux desktops, sets the
/// legend's words 10-15% wider ("Optimizer states": 8.27 em against Helvetica's 7.22). The backends measure
/// nothing, so every label is sized with an over-estimate, which only moves a label sooner.
const WIDTH_MARGIN: f64 = 1.15;

/// Advance of one character, in thousandths of an em.
fn advance_milli_em(c: char) -> u32 {
    match c {
        ' '..='~' => u32::from(ADVANCE_MILLI_EM[c as usize - ' ' as usize]),
        '…' => 1000,
        '·' => 278,
        '×' | '−' | '≤' | '≥' => 584,
        c if (c as u32) < 0x2E80 => 600,
        // CJK and other wide scripts.
        _ => 1000,
    }
}

/// Estimated width, at `size` pixels, of characters whose advances add up to `milli_em`.
fn width_px(milli_em: u32, size: f64) -> i32 {
    (f64::from(milli_em) / 1000.0 * size * WIDTH_MARGIN).ceil() as i32
}

/// Estimated width of a label at `size` pixels.
pub(crate) fn text_width(label: &str, size: f64) -> i32 {
    width_px(label.chars().map(advance_milli_em).sum(), size)
}

/// Height of a label's box: the font size and a pixel of room above and below.
pub(crate) fn text_height(size: f64) -> i32 {
    size.ceil() as i32 + 2
}

/// What a legend entry marks: a category's colour, or the GPU line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Swatch {
    Category(usize),
    Capacity,
}

/// The legend's entries: the five categories, then the GPU line with its name and size (the line itself carries
/// only the size, so the name is readable even where the line runs through the bars).
pub(crate) fn legend_items(data: &ChartData) -> Vec<(String, Swatch)> {
    let mut items: Vec<_> = Category::ALL
        .iter()
        .enumerate()
        .map(|(i, c)| (c.label().to_string(), Swatch::Category(i)))
        .collect();
    if let Some((cap, name)) = &data.capacity {
        items.push((format!("{name}: {}", format_bytes(*cap)), Swatch::Capacity));
    }
    items
}

/// Width of a legend entry: its swatch and gap, then its label.
fn legend_item_width(label: &str, font: f64) -> i32 {
    22 + text_width(label, font)
}

/// The title on one line, shrunk to fit the width down to a point under the chart's font, or beyond that on two
/// lines at that size (a phone); with its font size. A title stays within a point of the legend under it.
pub(crate) fn title_lines(title: &str, w: i32, font: f64) -> (Vec<String>, f64) {
    let smallest = (font - 1.0).max(9.0);
    let milli_em: u32 = title.chars().map(advance_milli_em).sum();
    let em = (f64::from(milli_em.max(1)) / 1000.0) * WIDTH_MARGIN;
    let size = ((w - 24) as f64 / em).clamp(smallest, font + 1.0);
    if text_width(title, size) <= w - 24 {
        return (vec![title.to_string()], size);
    }
    let size = smallest;
    // Break before the bracketed shape of the step where the words before it fit, else wherever a line fills.
    match title.rfind('(') {
        Some(i) if text_width(&title[..i], size) <= w - 24 => {
            let rest = clip_to(&title[i..], w - 24, size);
            (vec![title[..i].trim_end().to_string(), rest], size)
        }
        _ => (bar_name_lines(title, w - 24, size), size),
    }
}

/// Pixels from one title line to the next.
pub(crate) fn title_step(size: f64) -> i32 {
    (size * 1.3) as i32
}

/// The top-left corner of each legend entry on a `w`-pixel-wide chart under `title_rows` lines of title, and the y
/// where its last row starts.
pub(crate) fn legend_positions(
    items: &[(String, Swatch)],
    w: i32,
    font: f64,
    title_rows: usize,
) -> (Vec<BackendCoord>, i32) {
    let mut x = 12;
    let mut y = 10 + (font * 1.6) as i32 + title_step(font) * (title_rows as i32 - 1).max(0);
    let mut at = Vec::with_capacity(items.len());
    for (label, _) in items {
        let item_w = legend_item_width(label, font);
        if x > 12 && x + item_w > w - 8 {
            x = 12;
            y += (font * 1.5) as i32;
        }
        at.push((x, y));
        x += item_w;
    }
    (at, y)
}

/// A bar's name in at most two lines of `width` pixels: split at a space, the rest cut with "…".
pub(crate) fn bar_name_lines(name: &str, width: i32, size: f64) -> Vec<String> {
    let fits = |s: &str| text_width(s, size) <= width;
    if fits(name) {
        return vec![name.to_string()];
    }
    let mut first = String::new();
    let mut rest = name;
    for (i, _) in name.match_indices(' ') {
        if !fits(&name[..i]) {
            break;
        }
        first = name[..i].to_string();
        rest = name[i + 1..].trim_start();
    }
    if first.is_empty() {
        return vec![clip_to(name, width, size)];
    }
    vec![first, clip_to(rest, width, size)]
}

fn clip_to(s: &str, width: i32, size: f64) -> String {
    if text_width(s, size) <= width {
        return s.to_string();
    }
    // The longest start that fits with the ellipsis after it.
    let mut milli_em = advance_milli_em('…');
    let mut cut = String::new();
    for c in s.chars() {
        milli_em += advance_milli_em(c);
        if width_px(milli_em, size) > width {
            break;
        }
        cut.push(c);
    }
    format!("{}…", cut.trim_end())
}

/// One placed label: its text, the point the backend anchors it at, and the box it covers.
#[derive(Clone)]
pub struct PlacedLabel {
    pub text: String,
    pub anchor: BackendCoord,
    pub h: HPos,
    pub v: VPos,
    pub bbox: TextBox,
}

/// Every label over the plot, once placed.
#[derive(Clone)]
pub struct ChartLabels {
    /// Each bar's total, in bar order.
    pub totals: Vec<PlacedLabel>,
    /// The GPU line's size, where it fits clear of the bars and their totals (the legend names the GPU anyway).
    pub capacity: Option<PlacedLabel>,
    /// The band around the GPU line.
    pub line: Option<TextBox>,
}

fn overlap_area(a: TextBox, b: TextBox) -> i64 {
    let w = (a.2.min(b.2) - a.0.max(b.0)).max(0) as i64;
    let h = (a.3.min(b.3) - a.1.max(b.1)).max(0) as i64;
    w * h
}

/// Whether two boxes share any pixel.
pub fn overlaps(a: TextBox, b: TextBox) -> bool {
    overlap_area(a, b) > 0
}

/// A bar's drawn rectangle, with the selection outline.
fn bar_box(layout: &ChartLayout, i: usize) -> TextBox {
    let g = &layout.bars[i];
    (g.x0 - 3, g.top_y - 3, g.x1 + 3, layout.bottom)
}

/// Places each bar's total above its bar, then raises it clear of the GPU line and of the totals placed before
/// it; then the GPU line's size where it covers nothing.
pub fn place_labels(data: &ChartData, layout: &ChartLayout, size: f64) -> ChartLabels {
    let h = text_height(size);
    let line = data.capacity.as_ref().map(|(cap, _)| {
        let cy = layout.y_of(*cap);
        (layout.left, cy - LINE_BAND, layout.right, cy + LINE_BAND)
    });
    let mut totals: Vec<PlacedLabel> = Vec::with_capacity(data.bars.len());
    for (i, bar) in data.bars.iter().enumerate() {
        let g = &layout.bars[i];
        let text = format_bytes(bar.parts.total());
        let half = text_width(&text, size) / 2 + 2;
        let mid = (g.x0 + g.x1) / 2;
        let mut base = g.top_y - TOTAL_LABEL_GAP;
        // Each step moves the label above one obstacle, so the loop ends within one step per obstacle.
        for _ in 0..=data.bars.len() + 1 {
            let bbox = (mid - half, base - h, mid + half, base);
            let hit = line
                .iter()
                .copied()
                .chain(totals.iter().map(|t| t.bbox))
                .filter(|o| overlaps(bbox, *o))
                .map(|o| o.1)
                .min();
            match hit {
                Some(obstacle_top) => base = obstacle_top - 1,
                None => break,
            }
        }
        totals.push(PlacedLabel {
            anchor: (mid, base),
            bbox: (mid - half, base - h, mid + half, base),
            text,
            h: HPos::Center,
            v: VPos::Bottom,
        });
    }
    let capacity = data.capacity.as_ref().and_then(|(cap, _)| {
        let text = format_bytes(*cap);
        let mut taken: Vec<TextBox> = (0..layout.bars.len()).map(|i| bar_box(layout, i)).collect();
        taken.extend(totals.iter().map(|t| t.bbox));
        capacity_place(layout, &taken, text, size, layout.y_of(*cap))
    });
    ChartLabels {
        totals,
        capacity,
        line,
    }
}

/// The first clear place for the GPU line's label: right-aligned (preferred), left-aligned, then centred in each
/// gap between bars, left to right; each above, then below the line. None where every place covers something
/// or leaves the plot.
fn capacity_place(
    layout: &ChartLayout,
    taken: &[TextBox],
    text: String,
    size: f64,
    line_y: i32,
) -> Option<PlacedLabel> {
    let w = text_width(&text, size);
    let h = text_height(size);
    let mut xs = vec![
        (layout.right - w, HPos::Right, layout.right),
        (layout.left + 6, HPos::Left, layout.left + 6),
    ];
    let mut edges = vec![layout.left];
    for g in &layout.bars {
        edges.push(g.x0 - 3);
        edges.push(g.x1 + 3);
    }
    edges.push(layout.right);
    for gap in edges.chunks(2) {
        let mid = (gap[0] + gap[1]) / 2;
        xs.push((mid - w / 2, HPos::Center, mid));
    }
    let plot = (layout.left, layout.top - h, layout.right, layout.bottom);
    xs.into_iter()
        .flat_map(|x| [(x, true), (x, false)])
        .find_map(|((x0, hpos, ax), above)| {
            let (v, y0, ay) = if above {
                let base = line_y - CAPACITY_LABEL_GAP;
                (VPos::Bottom, base - h, base)
            } else {
                let base = line_y + CAPACITY_LABEL_GAP;
                (VPos::Top, base, base)
            };
            let bbox = (x0, y0, x0 + w, y0 + h);
            let inside = overlap_area(bbox, plot) == i64::from(w) * i64::from(h);
            (inside && !taken.iter().any(|t| overlaps(bbox, *t))).then(|| PlacedLabel {
                text: text.clone(),
                anchor: (ax, ay),
                h: hpos,
                v,
                bbox,
            })
        })
}
