//! peakplan-chart: the stacked-bar memory chart and the step timeline, drawn through any plotters backend.
//!
//! Contract: [`ChartData`] is built from core [`Estimate`]s only (no formula lives here); [`draw_chart`] and
//! [`draw_timeline`] are generic over `plotters_backend::DrawingBackend`, so the page draws on a canvas and the
//! CLI writes SVG with the same code. Text is positioned by anchors only, so no font files are needed.

use peakplan_core::engine::{Category, Estimate, Phase, PhaseMemory};
use peakplan_core::units::format_bytes;
use plotters_backend::text_anchor::{HPos, Pos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
    FontFamily, FontStyle, FontTransform,
};

/// Colors of one theme.
#[derive(Clone, Copy, Debug)]
pub struct Theme {
    pub background: (u8, u8, u8),
    pub text: (u8, u8, u8),
    pub grid: (u8, u8, u8),
    pub capacity: (u8, u8, u8),
    /// One color per [`Category::ALL`].
    pub categories: [(u8, u8, u8); 5],
}

impl Theme {
    pub const LIGHT: Theme = Theme {
        background: (255, 255, 255),
        text: (28, 30, 36),
        grid: (222, 225, 232),
        capacity: (200, 30, 45),
        categories: [
            (46, 104, 196),
            (232, 137, 30),
            (143, 73, 189),
            (32, 150, 110),
            (140, 146, 158),
        ],
    };
    pub const DARK: Theme = Theme {
        background: (22, 24, 29),
        text: (230, 232, 238),
        grid: (56, 60, 70),
        capacity: (255, 99, 110),
        categories: [
            (104, 156, 245),
            (247, 170, 80),
            (186, 128, 235),
            (80, 200, 150),
            (150, 156, 170),
        ],
    };
}

/// One bar: a label and what the device holds at the peak, by category.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub label: String,
    pub parts: PhaseMemory,
    /// The plan's own method: drawn with an outline.
    pub selected: bool,
}

/// Everything the stacked-bar chart shows.
#[derive(Clone, Debug, PartialEq)]
pub struct ChartData {
    pub title: String,
    pub bars: Vec<Bar>,
    /// The GPU's capacity and its name, for the horizontal line.
    pub capacity: Option<(u64, String)>,
}

impl ChartData {
    /// Builds the chart from the estimates of the same model under each method: `(label, estimate, selected)`.
    pub fn from_estimates<'a>(
        title: impl Into<String>,
        bars: impl IntoIterator<Item = (&'a str, &'a Estimate, bool)>,
        capacity: Option<(u64, String)>,
    ) -> Self {
        ChartData {
            title: title.into(),
            bars: bars
                .into_iter()
                .map(|(label, e, selected)| Bar {
                    label: label.to_string(),
                    parts: e.at_peak(),
                    selected,
                })
                .collect(),
            capacity,
        }
    }
    fn max_bytes(&self) -> u64 {
        let bars = self.bars.iter().map(|b| b.parts.total()).max().unwrap_or(0);
        bars.max(self.capacity.as_ref().map(|c| c.0).unwrap_or(0))
            .max(1)
    }
}

struct Text {
    color: (u8, u8, u8),
    size: f64,
    anchor: Pos,
    bold: bool,
}

impl BackendTextStyle for Text {
    type FontError = std::convert::Infallible;
    fn color(&self) -> BackendColor {
        BackendColor {
            alpha: 1.0,
            rgb: self.color,
        }
    }
    fn size(&self) -> f64 {
        self.size
    }
    fn transform(&self) -> FontTransform {
        FontTransform::None
    }
    fn style(&self) -> FontStyle {
        if self.bold {
            FontStyle::Bold
        } else {
            FontStyle::Normal
        }
    }
    fn anchor(&self) -> Pos {
        self.anchor
    }
    fn family(&self) -> FontFamily<'_> {
        FontFamily::SansSerif
    }
    fn layout_box(&self, text: &str) -> Result<((i32, i32), (i32, i32)), Self::FontError> {
        // An estimate is enough: backends here anchor text themselves.
        let w = (text.chars().count() as f64 * self.size * 0.55) as i32;
        Ok(((0, 0), (w, self.size as i32)))
    }
    fn draw<E, F: FnMut(i32, i32, BackendColor) -> Result<(), E>>(
        &self,
        _text: &str,
        _pos: BackendCoord,
        _draw: F,
    ) -> Result<Result<(), E>, Self::FontError> {
        Ok(Ok(()))
    }
}

struct Stroke {
    color: (u8, u8, u8),
    alpha: f64,
    width: u32,
}

impl BackendStyle for Stroke {
    fn color(&self) -> BackendColor {
        BackendColor {
            alpha: self.alpha,
            rgb: self.color,
        }
    }
    fn stroke_width(&self) -> u32 {
        self.width
    }
}

fn solid(color: (u8, u8, u8)) -> Stroke {
    Stroke {
        color,
        alpha: 1.0,
        width: 1,
    }
}

fn text(color: (u8, u8, u8), size: f64, h: HPos, v: VPos) -> Text {
    Text {
        color,
        size,
        anchor: Pos::new(h, v),
        bold: false,
    }
}

type DrawResult<B> = Result<(), DrawingErrorKind<<B as DrawingBackend>::ErrorType>>;

/// A "nice" axis step (1, 2 or 5 x 10^k GiB) giving about five gridlines.
fn axis_step(max_bytes: u64) -> u64 {
    let gib = (1u64 << 30) as f64;
    let raw = max_bytes as f64 / gib / 5.0;
    let exp = raw.max(1e-3).log10().floor();
    let base = 10f64.powf(exp);
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * base)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * base);
    ((step * gib) as u64).max(1)
}

/// One drawn segment of a bar, in backend pixels (y0 above y1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Segment {
    pub category: Category,
    pub bytes: u64,
    pub y0: i32,
    pub y1: i32,
}

/// One bar's horizontal extent and its segments, bottom first.
#[derive(Clone, Debug, PartialEq)]
pub struct BarGeom {
    pub x0: i32,
    pub x1: i32,
    pub segments: Vec<Segment>,
}

/// Where the plot area and every segment fall, so the page can tell what the pointer is over.
#[derive(Clone, Debug, PartialEq)]
pub struct ChartLayout {
    pub top: i32,
    pub bottom: i32,
    pub left: i32,
    pub right: i32,
    /// Bytes at the top of the axis.
    pub max_bytes: u64,
    pub bars: Vec<BarGeom>,
}

impl ChartLayout {
    /// The bar index and segment under a point, if any.
    pub fn hit(&self, x: i32, y: i32) -> Option<(usize, Segment)> {
        self.bars.iter().enumerate().find_map(|(i, b)| {
            (x >= b.x0 && x <= b.x1).then(|| {
                b.segments
                    .iter()
                    .find(|s| y >= s.y0 && y <= s.y1.max(s.y0 + 1))
                    .map(|s| (i, *s))
            })?
        })
    }
}

fn y_for(bytes: u64, max_bytes: u64, top: i32, bottom: i32) -> i32 {
    bottom - ((bytes as f64 / max_bytes.max(1) as f64) * (bottom - top) as f64).round() as i32
}

/// Rows the legend takes at a width (mirrors the legend drawing in [`draw_chart`]).
fn legend_bottom(w: i32, font: f64) -> i32 {
    let mut x = 12;
    let mut y = 10 + (font * 1.6) as i32;
    for c in Category::ALL {
        let item_w = legend_item_width(c.label(), font);
        if x + item_w > w - 8 {
            x = 12;
            y += (font * 1.5) as i32;
        }
        x += item_w;
    }
    y
}

/// The chart's geometry on a `width` x `height` area, as [`draw_chart`] draws it.
pub fn layout(data: &ChartData, width: u32, height: u32) -> Option<ChartLayout> {
    let (w, h) = (width as i32, height as i32);
    let compact = w < 420;
    let font = if compact { 11.0 } else { 13.0 };
    layout_below(
        data,
        w,
        h,
        legend_bottom(w, font) + (font * 2.2) as i32,
        compact,
    )
}

fn layout_below(data: &ChartData, w: i32, h: i32, top: i32, compact: bool) -> Option<ChartLayout> {
    let font = if compact { 11.0 } else { 13.0 };
    let left = if compact { 52 } else { 66 };
    let bottom = h - (font * 2.4) as i32;
    let right = w - 12;
    if bottom - top < 20 || right - left < 40 {
        return None;
    }
    let max_bytes = (data.max_bytes() as f64 * 1.08) as u64;
    let n = data.bars.len().max(1) as i32;
    let slot = (right - left) / n;
    let bar_w = (slot as f64 * 0.56) as i32;
    let bars = data
        .bars
        .iter()
        .enumerate()
        .map(|(i, bar)| {
            let x0 = left + slot * i as i32 + (slot - bar_w) / 2;
            let mut acc = 0u64;
            let segments = Category::ALL
                .iter()
                .filter_map(|c| {
                    let v = bar.parts.get(*c);
                    (v > 0).then(|| {
                        let seg = Segment {
                            category: *c,
                            bytes: v,
                            y0: y_for(acc.saturating_add(v), max_bytes, top, bottom),
                            y1: y_for(acc, max_bytes, top, bottom),
                        };
                        acc = acc.saturating_add(v);
                        seg
                    })
                })
                .collect();
            BarGeom {
                x0,
                x1: x0 + bar_w,
                segments,
            }
        })
        .collect();
    Some(ChartLayout {
        top,
        bottom,
        left,
        right,
        max_bytes,
        bars,
    })
}

/// Pixels between a bar's top and the bottom of its total label.
const TOTAL_LABEL_GAP: i32 = 6;
/// Pixels between the capacity line and its label.
const CAPACITY_LABEL_GAP: i32 = 4;

/// A text box in backend pixels: `(x0, y0, x1, y1)`, y0 above y1.
type TextBox = (i32, i32, i32, i32);

/// Estimated advance of one character, in ems: wide enough for proportional sans-serif digits and capitals, since
/// the backends measure nothing (an over-estimate only moves a label sooner). The legend, the title and the
/// labels placed around the GPU line all size their text with it.
const CHAR_WIDTH_EM: f64 = 0.58;

/// Estimated width of a label.
fn text_width(label: &str, size: f64) -> i32 {
    (label.chars().count() as f64 * size * CHAR_WIDTH_EM).ceil() as i32
}

/// Width of a legend entry: its swatch and gap, then its label (the legend's layout and its drawing agree on it).
fn legend_item_width(label: &str, font: f64) -> i32 {
    22 + (label.len() as f64 * font * CHAR_WIDTH_EM) as i32
}

/// Height of a label's box: the font size and a pixel of room above and below.
fn text_height(size: f64) -> i32 {
    size.ceil() as i32 + 2
}

fn overlap_area(a: TextBox, b: TextBox) -> i64 {
    let w = (a.2.min(b.2) - a.0.max(b.0)).max(0) as i64;
    let h = (a.3.min(b.3) - a.1.max(b.1)).max(0) as i64;
    w * h
}

/// Where the capacity line's label goes, as the anchor the backend draws it at.
#[derive(Clone, Copy)]
struct LabelPlace {
    anchor: BackendCoord,
    h: HPos,
    v: VPos,
}

/// What a label placed over the plot covers: text over a bar's total counts four times text over a bar, since
/// one stays legible and the other does not. Room outside the plot (the legend, the axis) counts like a bar.
struct Obstacles {
    bars: Vec<TextBox>,
    totals: Vec<TextBox>,
    plot: TextBox,
}

impl Obstacles {
    fn new(data: &ChartData, layout: &ChartLayout, size: f64) -> Self {
        let h = text_height(size);
        let mut bars = Vec::new();
        let mut totals = Vec::new();
        for (bar, geom) in data.bars.iter().zip(&layout.bars) {
            let top_y = y_for(
                bar.parts.total(),
                layout.max_bytes,
                layout.top,
                layout.bottom,
            );
            // The bar with its selection outline.
            bars.push((geom.x0 - 3, top_y - 3, geom.x1 + 3, layout.bottom));
            let tw = text_width(&format_bytes(bar.parts.total()), size);
            let mid = (geom.x0 + geom.x1) / 2;
            let base = top_y - TOTAL_LABEL_GAP;
            totals.push((mid - tw / 2 - 2, base - h, mid + tw / 2 + 2, base));
        }
        let plot = (layout.left, layout.top - h, layout.right, layout.bottom);
        Obstacles { bars, totals, plot }
    }

    fn cost(&self, b: TextBox) -> i64 {
        let area = i64::from(b.2 - b.0) * i64::from(b.3 - b.1);
        let bars: i64 = self.bars.iter().map(|o| overlap_area(b, *o)).sum();
        let totals: i64 = self.totals.iter().map(|o| overlap_area(b, *o)).sum();
        bars + 4 * totals + (area - overlap_area(b, self.plot))
    }
}

/// The least-covering place for a label of `label` on the line at `line_y`, with what it covers. Candidates:
/// right-aligned (preferred), left-aligned, and centred in each gap between bars, left to right; each above, then
/// below the line. The earlier candidate wins a tie.
fn label_place(
    obstacles: &Obstacles,
    layout: &ChartLayout,
    label: &str,
    size: f64,
    line_y: i32,
) -> (i64, LabelPlace) {
    let w = text_width(label, size);
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
    let place_at = |(x0, hpos, ax): (i32, HPos, i32), above: bool| {
        let (v, y0, ay) = if above {
            let base = line_y - CAPACITY_LABEL_GAP;
            (VPos::Bottom, base - h, base)
        } else {
            let base = line_y + CAPACITY_LABEL_GAP;
            (VPos::Top, base, base)
        };
        let place = LabelPlace {
            anchor: (ax, ay),
            h: hpos,
            v,
        };
        (obstacles.cost((x0, y0, x0 + w, y0 + h)), place)
    };
    let mut best = place_at(xs[0], true);
    for x in xs {
        for above in [true, false] {
            let candidate = place_at(x, above);
            if candidate.0 < best.0 {
                best = candidate;
            }
        }
    }
    best
}

/// The GPU line's label and where it goes. It reads "name: capacity" right-aligned above the line unless that
/// covers a bar or a bar's total (a plan just under the GPU's size): then it moves below the line, to the left,
/// or into a gap between bars. Where the full label covers something everywhere but the capacity alone fits
/// clear, it shows the capacity alone (the verdict names the GPU); otherwise the full label's least-covering place.
/// Returns the text, its place and what it covers ([`Obstacles::cost`]).
fn capacity_label(
    data: &ChartData,
    layout: &ChartLayout,
    (capacity_bytes, name): (u64, &str),
    size: f64,
    line_y: i32,
) -> (String, LabelPlace, i64) {
    let obstacles = Obstacles::new(data, layout, size);
    let short = format_bytes(capacity_bytes);
    let full = format!("{name}: {short}");
    let (cost, place) = label_place(&obstacles, layout, &full, size, line_y);
    if cost > 0 {
        let (short_cost, short_place) = label_place(&obstacles, layout, &short, size, line_y);
        if short_cost == 0 {
            return (short, short_place, 0);
        }
    }
    (full, place, cost)
}

/// Draws the stacked-bar chart filling the backend's whole area.
pub fn draw_chart<B: DrawingBackend>(
    backend: &mut B,
    data: &ChartData,
    theme: &Theme,
) -> DrawResult<B> {
    let (w, h) = backend.get_size();
    let (w, h) = (w as i32, h as i32);
    backend.draw_rect((0, 0), (w, h), &solid(theme.background), true)?;
    let compact = w < 420;
    let font = if compact { 11.0 } else { 13.0 };

    // Legend, in one or two rows.
    let mut x = 12;
    let mut y = 10;
    // A long title (a long model name on a phone) shrinks to fit the width rather than run off the edge.
    let title_chars = data.title.chars().count().max(1) as f64;
    let title_font = ((w - 24) as f64 / (title_chars * CHAR_WIDTH_EM)).clamp(9.0, font + 1.0);
    backend.draw_text(
        &data.title,
        &Text {
            bold: true,
            ..text(theme.text, title_font, HPos::Left, VPos::Top)
        },
        (12, y),
    )?;
    y += (font * 1.6) as i32;
    for (i, c) in Category::ALL.iter().enumerate() {
        let label = c.label();
        let item_w = legend_item_width(label, font);
        if x + item_w > w - 8 {
            x = 12;
            y += (font * 1.5) as i32;
        }
        backend.draw_rect(
            (x, y + 1),
            (x + 12, y + 13),
            &solid(theme.categories[i]),
            true,
        )?;
        backend.draw_text(
            label,
            &text(theme.text, font, HPos::Left, VPos::Top),
            (x + 17, y),
        )?;
        x += item_w;
    }
    let Some(layout) = layout_below(data, w, h, y + (font * 2.2) as i32, compact) else {
        return Ok(());
    };
    let ChartLayout {
        top,
        bottom,
        left,
        right,
        max_bytes,
        ..
    } = layout;
    let y_of = |bytes: u64| y_for(bytes, max_bytes, top, bottom);

    // Grid and axis labels.
    let step = axis_step(max_bytes);
    let mut tick = 0u64;
    while tick <= max_bytes {
        let ty = y_of(tick);
        backend.draw_line((left, ty), (right, ty), &solid(theme.grid))?;
        backend.draw_text(
            &format_bytes(tick),
            &text(theme.text, font - 1.0, HPos::Right, VPos::Center),
            (left - 6, ty),
        )?;
        tick = match tick.checked_add(step) {
            Some(t) => t,
            None => break,
        };
    }

    // Bars.
    for (bar, geom) in data.bars.iter().zip(&layout.bars) {
        for seg in &geom.segments {
            let ci = Category::ALL
                .iter()
                .position(|c| *c == seg.category)
                .unwrap_or(4);
            backend.draw_rect(
                (geom.x0, seg.y0),
                (geom.x1, seg.y1.max(seg.y0 + 1)),
                &solid(theme.categories[ci]),
                true,
            )?;
        }
        let top_y = y_of(bar.parts.total());
        if bar.selected {
            backend.draw_rect(
                (geom.x0 - 3, top_y - 3),
                (geom.x1 + 3, bottom),
                &Stroke {
                    width: 2,
                    ..solid(theme.text)
                },
                false,
            )?;
        }
        let mid = (geom.x0 + geom.x1) / 2;
        let label_style = Text {
            bold: bar.selected,
            ..text(theme.text, font, HPos::Center, VPos::Top)
        };
        backend.draw_text(&bar.label, &label_style, (mid, bottom + 6))?;
        backend.draw_text(
            &format_bytes(bar.parts.total()),
            &text(theme.text, font - 1.0, HPos::Center, VPos::Bottom),
            (mid, top_y - TOTAL_LABEL_GAP),
        )?;
    }

    // GPU capacity line.
    if let Some((cap, name)) = &data.capacity {
        let cy = y_of(*cap);
        let mut x = left;
        while x < right {
            backend.draw_line(
                (x, cy),
                ((x + 8).min(right), cy),
                &Stroke {
                    width: 2,
                    ..solid(theme.capacity)
                },
            )?;
            x += 14;
        }
        let (label, place, _) = capacity_label(data, &layout, (*cap, name), font - 1.0, cy);
        backend.draw_text(
            &label,
            &text(theme.capacity, font - 1.0, place.h, place.v),
            place.anchor,
        )?;
    }
    backend.draw_line((left, top - 4), (left, bottom), &solid(theme.text))?;
    backend.draw_line((left, bottom), (right, bottom), &solid(theme.text))?;
    Ok(())
}

/// Draws the live memory of each phase of one step as stacked columns, marking the peak.
pub fn draw_timeline<B: DrawingBackend>(
    backend: &mut B,
    estimate: &Estimate,
    theme: &Theme,
) -> DrawResult<B> {
    let (w, h) = backend.get_size();
    let (w, h) = (w as i32, h as i32);
    backend.draw_rect((0, 0), (w, h), &solid(theme.background), true)?;
    let (left, right, top, bottom) = (8, w - 8, 22, h - 22);
    if bottom - top < 10 {
        return Ok(());
    }
    let max = Phase::ALL
        .iter()
        .map(|p| estimate.phase(*p).total())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let y_of = |b: u64| bottom - ((b as f64 / max) * (bottom - top) as f64).round() as i32;
    let slot = (right - left) / 4;
    for (i, p) in Phase::ALL.iter().enumerate() {
        let m = estimate.phase(*p);
        let x0 = left + slot * i as i32 + slot / 8;
        let x1 = x0 + slot * 3 / 4;
        let mut acc = 0u64;
        for (ci, c) in Category::ALL.iter().enumerate() {
            let v = m.get(*c);
            if v == 0 {
                continue;
            }
            backend.draw_rect(
                (x0, y_of(acc.saturating_add(v))),
                (x1, y_of(acc)),
                &solid(theme.categories[ci]),
                true,
            )?;
            acc = acc.saturating_add(v);
        }
        let is_peak = *p == estimate.peak_phase;
        let style = Text {
            bold: is_peak,
            ..text(theme.text, 11.0, HPos::Center, VPos::Top)
        };
        backend.draw_text(p.label(), &style, ((x0 + x1) / 2, bottom + 5))?;
        let tag = if is_peak {
            format!("peak {}", format_bytes(acc))
        } else {
            format_bytes(acc)
        };
        backend.draw_text(
            &tag,
            &Text {
                bold: is_peak,
                ..text(theme.text, 11.0, HPos::Center, VPos::Bottom)
            },
            ((x0 + x1) / 2, y_of(acc) - 3),
        )?;
    }
    backend.draw_line((left, bottom), (right, bottom), &solid(theme.text))?;
    Ok(())
}

/// One point of the accuracy scatter: measured and predicted bytes of a real run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScatterPoint {
    pub measured_bytes: u64,
    pub predicted_bytes: u64,
}

/// Draws predicted against measured bytes with the diagonal and a ±10% band, filling the backend's area.
pub fn draw_scatter<B: DrawingBackend>(
    backend: &mut B,
    points: &[ScatterPoint],
    theme: &Theme,
) -> DrawResult<B> {
    let (w, h) = backend.get_size();
    let (w, h) = (w as i32, h as i32);
    backend.draw_rect((0, 0), (w, h), &solid(theme.background), true)?;
    let (left, right, top, bottom) = (62, w - 12, 12, h - 34);
    if right - left < 40 || bottom - top < 40 {
        return Ok(());
    }
    let max = points
        .iter()
        .map(|p| p.measured_bytes.max(p.predicted_bytes))
        .max()
        .unwrap_or(1)
        .max(1);
    let max = (max as f64 * 1.05) as u64;
    let x_of = |b: u64| left + ((b as f64 / max as f64) * (right - left) as f64).round() as i32;
    let y_of = |b: u64| bottom - ((b as f64 / max as f64) * (bottom - top) as f64).round() as i32;
    let step = axis_step(max);
    let mut tick = 0u64;
    while tick <= max {
        backend.draw_line((left, y_of(tick)), (right, y_of(tick)), &solid(theme.grid))?;
        backend.draw_text(
            &format_bytes(tick),
            &text(theme.text, 11.0, HPos::Right, VPos::Center),
            (left - 5, y_of(tick)),
        )?;
        backend.draw_text(
            &format_bytes(tick),
            &text(theme.text, 11.0, HPos::Center, VPos::Top),
            (x_of(tick), bottom + 4),
        )?;
        tick = match tick.checked_add(step) {
            Some(t) => t,
            None => break,
        };
    }
    // The diagonal (exact) and the ±10% band.
    for (f, alpha) in [(1.0f64, 1.0f64), (1.1, 0.45), (0.9, 0.45)] {
        let end = (max as f64 / f.max(1.0)) as u64;
        let style = Stroke {
            color: theme.capacity,
            alpha,
            width: 1,
        };
        backend.draw_line(
            (x_of(0), y_of(0)),
            (x_of(end), y_of((end as f64 * f) as u64)),
            &style,
        )?;
    }
    for p in points {
        let (x, y) = (x_of(p.measured_bytes), y_of(p.predicted_bytes));
        backend.draw_rect(
            (x - 2, y - 2),
            (x + 2, y + 2),
            &solid(theme.categories[0]),
            true,
        )?;
    }
    backend.draw_text(
        "measured",
        &text(theme.text, 11.0, HPos::Right, VPos::Bottom),
        (right, bottom - 3),
    )?;
    backend.draw_text(
        "predicted",
        &text(theme.text, 11.0, HPos::Left, VPos::Top),
        (left + 4, top),
    )?;
    backend.draw_line((left, top), (left, bottom), &solid(theme.text))?;
    backend.draw_line((left, bottom), (right, bottom), &solid(theme.text))?;
    Ok(())
}

/// The chart as a standalone SVG document of the given size.
#[cfg(feature = "svg")]
pub fn chart_svg(data: &ChartData, theme: &Theme, size: (u32, u32)) -> String {
    let mut out = String::new();
    {
        let mut backend = plotters::backend::SVGBackend::with_string(&mut out, size);
        // The SVG backend writes into a String and cannot fail.
        let _ = draw_chart(&mut backend, data, theme);
        let _ = backend.present();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use peakplan_core::{estimate, preset_arch, Plan};

    #[test]
    fn hit_finds_the_segment_under_a_point_and_nothing_outside() {
        let plan = Plan::parse_query("model=llama-2-7b&method=full").plan;
        let e = estimate(preset_arch(&plan), &plan);
        let data = ChartData::from_estimates("t", [("Full", &e, true)], None);
        let l = layout(&data, 600, 400).unwrap();
        let bar = &l.bars[0];
        let seg = bar.segments[0];
        assert_eq!(seg.category, Category::Weights);
        let got = l.hit((bar.x0 + bar.x1) / 2, (seg.y0 + seg.y1) / 2).unwrap();
        assert_eq!(got, (0, seg));
        assert_eq!(l.hit(bar.x0 - 5, (seg.y0 + seg.y1) / 2), None);
        assert_eq!(l.hit((bar.x0 + bar.x1) / 2, l.top - 5), None);
        let total: u64 = bar.segments.iter().map(|s| s.bytes).sum();
        assert_eq!(total, e.device_bytes);
    }

    /// Three bars of `totals_gib` (the last selected) under a 4090's line at `capacity_gib`: the label drawn,
    /// what it covers, and what the full label in the preferred place (right-aligned above the line) would cover.
    fn capacity_label_case(totals_gib: [f64; 3], capacity_gib: f64) -> (String, i64, i64) {
        let gib = (1u64 << 30) as f64;
        let bars = totals_gib
            .iter()
            .enumerate()
            .map(|(i, t)| Bar {
                label: ["Full", "LoRA", "QLoRA"][i].to_string(),
                parts: PhaseMemory {
                    weights: (t * gib) as u64,
                    ..PhaseMemory::default()
                },
                selected: i == 2,
            })
            .collect();
        let cap = (capacity_gib * gib) as u64;
        let name = "NVIDIA GeForce RTX 4090";
        let data = ChartData {
            title: "t".into(),
            bars,
            capacity: Some((cap, name.into())),
        };
        let l = layout(&data, 720, 420).unwrap();
        let y = y_for(cap, l.max_bytes, l.top, l.bottom);
        let (label, _, chosen) = capacity_label(&data, &l, (cap, name), 12.0, y);
        let obstacles = Obstacles::new(&data, &l, 12.0);
        let full = format!("{name}: {}", format_bytes(cap));
        let w = text_width(&full, 12.0);
        let preferred = (
            l.right - w,
            y - CAPACITY_LABEL_GAP - text_height(12.0),
            l.right,
            y - CAPACITY_LABEL_GAP,
        );
        (label, chosen, obstacles.cost(preferred))
    }

    #[test]
    fn the_gpu_line_label_moves_off_a_bar_total_just_under_it() {
        // Gemma-2-9B QLoRA on a 4090: the QLoRA bar's "20.2 GiB" sits right under the 24 GiB line.
        let (label, chosen, preferred) = capacity_label_case([176.0, 47.2, 20.2], 24.0);
        assert!(
            preferred > 0,
            "the case must collide where the label used to go"
        );
        assert_eq!((label.as_str(), chosen), ("24.0 GiB", 0));
        // With room, the label keeps the GPU's name and its place.
        let (label, chosen, preferred) = capacity_label_case([30.0, 15.0, 8.0], 24.0);
        assert_eq!(
            (label.as_str(), chosen, preferred),
            ("NVIDIA GeForce RTX 4090: 24.0 GiB", 0, 0)
        );
    }

    #[test]
    fn the_gpu_line_label_never_covers_more_than_its_preferred_place() {
        for bars in [
            [176.0, 47.2, 20.2],
            [30.0, 15.0, 8.0],
            [90.0, 22.0, 23.5],
            [5.0, 5.0, 5.0],
        ] {
            let mut cap = 2.0;
            while cap < 200.0 {
                let (_, chosen, preferred) = capacity_label_case(bars, cap);
                assert!(
                    chosen <= preferred,
                    "{bars:?} at {cap} GiB: {chosen} > {preferred}"
                );
                if preferred == 0 {
                    assert_eq!(chosen, 0);
                }
                cap += 1.5;
            }
        }
    }
}
