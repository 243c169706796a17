//! peakplan-chart: the stacked-bar memory chart and the step timeline, drawn through any plotters backend.
//!
//! Contract: [`ChartData`] is built from core [`Estimate`]s only (no formula lives here); [`draw_chart`] and
//! [`draw_timeline`] are generic over `plotters_backend::DrawingBackend`, so the page draws on a canvas and the
//! CLI writes SVG with the same code. Text is positioned by anchors only, so no font files are needed.

use peakplan_core::engine::{Category, Estimate, Phase, PhaseMemory};
use peakplan_core::plan::{ColorScheme, Method};
use peakplan_core::units::{chart_title, format_bytes, method_label};
use peakplan_core::Plan;
use plotters_backend::text_anchor::{HPos, Pos, VPos};

mod labels;
#[cfg(feature = "svg")]
mod svg;
use labels::{bar_name_lines, legend_items, legend_positions, title_lines, title_step, Swatch};
pub use labels::{overlaps, place_labels, ChartLabels, PlacedLabel, TextBox};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
    FontFamily, FontStyle, FontTransform,
};
#[cfg(feature = "svg")]
pub use svg::{chart_svg, SvgMeta};

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

impl Theme {
    /// The colours of the plan's `theme`: its choice, else the reader's scheme (`reader_dark`; a file has no
    /// reader, so its writers pass `false`).
    pub fn of(scheme: ColorScheme, reader_dark: bool) -> Theme {
        match scheme {
            ColorScheme::Light => Theme::LIGHT,
            ColorScheme::Dark => Theme::DARK,
            ColorScheme::Auto if reader_dark => Theme::DARK,
            ColorScheme::Auto => Theme::LIGHT,
        }
    }
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
    /// The chart of a plan under each method, as the page and the CLI draw it: a bar for each of
    /// [`Method::ALL`] from `by_method`, the core's estimates in that order
    /// ([`peakplan_core::estimate_each_method`]), the plan's own method outlined; titled by
    /// [`chart_title`] with `model_name`, with the plan's GPU as the line.
    pub fn by_method(model_name: &str, plan: &Plan, by_method: &[Estimate; 3]) -> Self {
        let gpu = plan.gpu.preset();
        ChartData::from_estimates(
            chart_title(model_name, plan),
            Method::ALL
                .iter()
                .zip(by_method)
                .map(|(m, e)| (method_label(*m), e, *m == plan.method)),
            Some((gpu.capacity_bytes, gpu.name.to_string())),
        )
    }

    /// What sets the axis: the chosen plan's bar (every bar where none is chosen) and the GPU line. A taller
    /// comparison bar is clipped rather than shrinking the plan the reader asked about.
    fn scale_bytes(&self) -> u64 {
        let total = |b: &Bar| b.parts.total();
        let chosen = self.bars.iter().filter(|b| b.selected).map(total).max();
        let bars = chosen.unwrap_or_else(|| self.bars.iter().map(total).max().unwrap_or(0));
        bars.max(self.capacity.as_ref().map(|c| c.0).unwrap_or(0))
            .max(1)
    }
}

#[derive(Clone, Copy)]
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
        let w = labels::text_width(text, self.size);
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

#[derive(Clone, Copy)]
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
    /// Where the bar's top is drawn: the plot's top for a clipped bar.
    pub top_y: i32,
    /// Taller than the axis: cut at the top and marked with a break.
    pub clipped: bool,
    pub segments: Vec<Segment>,
}

/// Where the plot area and every segment fall, so the page can tell what the pointer is over.
#[derive(Clone, Debug, PartialEq)]
pub struct ChartLayout {
    /// The y below the legend's last row: no label goes above it.
    pub legend_bottom: i32,
    pub top: i32,
    pub bottom: i32,
    pub left: i32,
    pub right: i32,
    /// Bytes at the top of the axis.
    pub max_bytes: u64,
    pub bars: Vec<BarGeom>,
    /// Lines of each bar's name under the axis.
    pub names: Vec<Vec<String>>,
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

    /// The y of `bytes` on the axis, above the plot's top when beyond the axis.
    pub fn y_of(&self, bytes: u64) -> i32 {
        y_for(bytes, self.max_bytes, self.top, self.bottom)
    }
}

fn y_for(bytes: u64, max_bytes: u64, top: i32, bottom: i32) -> i32 {
    bottom - ((bytes as f64 / max_bytes.max(1) as f64) * (bottom - top) as f64).round() as i32
}

/// Room above the chosen bar or the GPU line, whichever is higher, for its total and the line's label.
const HEADROOM: f64 = 1.15;

/// Font size of the chart's labels at a width: smaller on a phone.
fn font_for(w: i32) -> f64 {
    if w < 420 {
        11.0
    } else {
        13.0
    }
}

/// The chart's geometry on a `width` x `height` area, as [`draw_chart`] draws it.
pub fn layout(data: &ChartData, width: u32, height: u32) -> Option<ChartLayout> {
    let w = width as i32;
    let font = font_for(w);
    let rows = title_lines(&data.title, w, font).0.len();
    let (_, legend_y) = legend_positions(&legend_items(data), w, font, rows);
    layout_below(data, w, height as i32, legend_y)
}

/// The layout under a legend whose last row starts at `legend_y`: the plot starts a bar total's height lower, so a
/// clipped bar's total, drawn above the plot, stays clear of the legend.
fn layout_below(data: &ChartData, w: i32, h: i32, legend_y: i32) -> Option<ChartLayout> {
    let font = font_for(w);
    let legend_bottom = legend_y + (font * 1.5) as i32;
    let top = legend_bottom + labels::text_height(font - 1.0) + labels::TOTAL_LABEL_GAP + 2;
    let left = if w < 420 { 52 } else { 66 };
    let right = w - 12;
    let n = data.bars.len().max(1) as i32;
    let slot = (right - left) / n;
    let names: Vec<_> = data
        .bars
        .iter()
        .map(|b| bar_name_lines(&b.label, slot - 4, font))
        .collect();
    let lines = names.iter().map(Vec::len).max().unwrap_or(1) as f64;
    let bottom = h - (font * (1.2 * lines + 1.2)) as i32;
    if bottom - top < 20 || right - left < 40 {
        return None;
    }
    let max_bytes = (data.scale_bytes() as f64 * HEADROOM) as u64;
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
                        let y0 = y_for(acc.saturating_add(v), max_bytes, top, bottom).max(top);
                        let seg = Segment {
                            category: *c,
                            bytes: v,
                            y0,
                            y1: y_for(acc, max_bytes, top, bottom).max(top),
                        };
                        acc = acc.saturating_add(v);
                        seg
                    })
                })
                .collect();
            let clipped = bar.parts.total() > max_bytes;
            BarGeom {
                x0,
                x1: x0 + bar_w,
                top_y: y_for(bar.parts.total(), max_bytes, top, bottom).max(top),
                clipped,
                segments,
            }
        })
        .collect();
    Some(ChartLayout {
        legend_bottom,
        top,
        bottom,
        left,
        right,
        max_bytes,
        bars,
        names,
    })
}

/// One drawing call, recorded.
enum Shape {
    Rect(BackendCoord, BackendCoord, Stroke, bool),
    Line(BackendCoord, BackendCoord, Stroke),
    Text(String, Text, BackendCoord),
}

/// Drawing calls recorded with the backend's own names, then replayed onto any backend: the chart's layout and
/// labels are compiled once rather than once per backend (canvas and SVG), which the site's size budget needs.
#[derive(Default)]
struct Shapes(Vec<Shape>);

impl Shapes {
    fn draw_rect(&mut self, a: BackendCoord, b: BackendCoord, style: &Stroke, fill: bool) {
        self.0.push(Shape::Rect(a, b, *style, fill));
    }
    fn draw_line(&mut self, a: BackendCoord, b: BackendCoord, style: &Stroke) {
        self.0.push(Shape::Line(a, b, *style));
    }
    fn draw_text(&mut self, text: &str, style: &Text, at: BackendCoord) {
        self.0.push(Shape::Text(text.to_string(), *style, at));
    }
    fn replay<B: DrawingBackend>(&self, backend: &mut B) -> DrawResult<B> {
        for shape in &self.0 {
            match shape {
                Shape::Rect(a, b, style, fill) => backend.draw_rect(*a, *b, style, *fill)?,
                Shape::Line(a, b, style) => backend.draw_line(*a, *b, style)?,
                Shape::Text(text, style, at) => backend.draw_text(text, style, *at)?,
            }
        }
        Ok(())
    }
}

/// Draws the title and the legend; returns the y below the legend.
fn draw_legend(backend: &mut Shapes, data: &ChartData, theme: &Theme, w: i32, font: f64) -> i32 {
    // A long title (a long model name, a plan on many GPUs) shrinks or wraps rather than run off the edge.
    let (lines, size) = title_lines(&data.title, w, font);
    for (i, line) in lines.iter().enumerate() {
        let style = Text {
            bold: true,
            ..text(theme.text, size, HPos::Left, VPos::Top)
        };
        backend.draw_text(line, &style, (12, 10 + title_step(font) * i as i32));
    }
    let items = legend_items(data);
    let (at, y) = legend_positions(&items, w, font, lines.len());
    for ((label, swatch), (x, y)) in items.iter().zip(at) {
        match swatch {
            Swatch::Category(i) => backend.draw_rect(
                (x, y + 1),
                (x + 12, y + 13),
                &solid(theme.categories[*i]),
                true,
            ),
            Swatch::Capacity => {
                for dx in [0, 8] {
                    backend.draw_line((x + dx, y + 7), (x + dx + 5, y + 7), &wide(theme.capacity));
                }
            }
        }
        backend.draw_text(
            label,
            &text(theme.text, font, HPos::Left, VPos::Top),
            (x + 17, y),
        );
    }
    y
}

fn wide(color: (u8, u8, u8)) -> Stroke {
    Stroke {
        width: 2,
        ..solid(color)
    }
}

/// Draws one bar: its segments, its outline when chosen, a break where it is clipped, and its name.
fn draw_bar(
    backend: &mut Shapes,
    bar: &Bar,
    geom: &BarGeom,
    names: &[String],
    layout: &ChartLayout,
    theme: &Theme,
    font: f64,
) {
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
        );
    }
    if bar.selected {
        backend.draw_rect(
            (geom.x0 - 3, geom.top_y - 3),
            (geom.x1 + 3, layout.bottom),
            &wide(theme.text),
            false,
        );
    }
    if geom.clipped {
        // Two slanted cuts in the background colour: the usual mark of an axis break.
        let y = layout.top + 10;
        for dy in [0, 6] {
            backend.draw_line(
                (geom.x0 - 2, y + dy + 4),
                (geom.x1 + 2, y + dy - 4),
                &Stroke {
                    width: 3,
                    ..solid(theme.background)
                },
            );
        }
    }
    let mid = (geom.x0 + geom.x1) / 2;
    let style = Text {
        bold: bar.selected,
        ..text(theme.text, font, HPos::Center, VPos::Top)
    };
    for (i, line) in names.iter().enumerate() {
        let y = layout.bottom + 6 + (font * 1.2) as i32 * i as i32;
        backend.draw_text(line, &style, (mid, y));
    }
}

/// Draws the stacked-bar chart filling the backend's whole area.
pub fn draw_chart<B: DrawingBackend>(
    backend: &mut B,
    data: &ChartData,
    theme: &Theme,
) -> DrawResult<B> {
    let (w, h) = backend.get_size();
    chart_shapes(data, theme, w as i32, h as i32).replay(backend)
}

/// The chart as shapes: the canvas and the SVG backends replay one list, so this code is compiled once.
fn chart_shapes(data: &ChartData, theme: &Theme, w: i32, h: i32) -> Shapes {
    let mut shapes = Shapes::default();
    let backend = &mut shapes;
    backend.draw_rect((0, 0), (w, h), &solid(theme.background), true);
    let font = font_for(w);
    let legend_y = draw_legend(backend, data, theme, w, font);
    let Some(layout) = layout_below(data, w, h, legend_y) else {
        return shapes;
    };
    let (top, bottom, left, right) = (layout.top, layout.bottom, layout.left, layout.right);

    // Grid and axis labels.
    let step = axis_step(layout.max_bytes);
    let mut tick = 0u64;
    while tick <= layout.max_bytes {
        let ty = layout.y_of(tick);
        backend.draw_line((left, ty), (right, ty), &solid(theme.grid));
        backend.draw_text(
            &format_bytes(tick),
            &text(theme.text, font - 1.0, HPos::Right, VPos::Center),
            (left - 6, ty),
        );
        tick = match tick.checked_add(step) {
            Some(t) => t,
            None => break,
        };
    }
    for ((bar, geom), names) in data.bars.iter().zip(&layout.bars).zip(&layout.names) {
        draw_bar(backend, bar, geom, names, &layout, theme, font);
    }
    let labels = place_labels(data, &layout, font - 1.0);
    if let Some((cap, _)) = &data.capacity {
        let cy = layout.y_of(*cap);
        let mut x = left;
        while x < right {
            backend.draw_line((x, cy), ((x + 8).min(right), cy), &wide(theme.capacity));
            x += 14;
        }
    }
    for (label, color) in labels
        .totals
        .iter()
        .map(|l| (l, theme.text))
        .chain(labels.capacity.iter().map(|l| (l, theme.capacity)))
    {
        backend.draw_text(
            &label.text,
            &text(color, font - 1.0, label.h, label.v),
            label.anchor,
        );
    }
    backend.draw_line((left, top - 4), (left, bottom), &solid(theme.text));
    backend.draw_line((left, bottom), (right, bottom), &solid(theme.text));
    shapes
}

/// Draws the live memory of each phase of one step as stacked columns, marking the peak: allocated bytes, what
/// `torch.cuda.max_memory_allocated` reports, so the peak's tag says "allocated" where it has room.
pub fn draw_timeline<B: DrawingBackend>(
    backend: &mut B,
    estimate: &Estimate,
    theme: &Theme,
) -> DrawResult<B> {
    let (w, h) = backend.get_size();
    timeline_shapes(estimate, theme, w as i32, h as i32).replay(backend)
}

fn timeline_shapes(estimate: &Estimate, theme: &Theme, w: i32, h: i32) -> Shapes {
    let mut shapes = Shapes::default();
    let backend = &mut shapes;
    backend.draw_rect((0, 0), (w, h), &solid(theme.background), true);
    let (left, right, top, bottom) = (8, w - 8, 22, h - 22);
    if bottom - top < 10 {
        return shapes;
    }
    let phases: Vec<Phase> = estimate.phases_run().collect();
    let max = phases
        .iter()
        .map(|p| estimate.phase(*p).total())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let y_of = |b: u64| bottom - ((b as f64 / max) * (bottom - top) as f64).round() as i32;
    let slot = (right - left) / phases.len().max(1) as i32;
    for (i, p) in phases.iter().enumerate() {
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
            );
            acc = acc.saturating_add(v);
        }
        let is_peak = *p == estimate.peak_phase;
        let style = Text {
            bold: is_peak,
            ..text(theme.text, 11.0, HPos::Center, VPos::Top)
        };
        backend.draw_text(
            phase_label(*p, slot - 4, is_peak),
            &style,
            ((x0 + x1) / 2, bottom + 5),
        );
        let tag = match is_peak {
            // Where the slot is too narrow for the long tag (a phone), the page's caption says "allocated".
            true => {
                let long = format!("peak {} allocated", format_bytes(acc));
                if labels::text_width(&long, 11.0) <= slot - 4 {
                    long
                } else {
                    format!("peak {}", format_bytes(acc))
                }
            }
            false => format_bytes(acc),
        };
        backend.draw_text(
            &tag,
            &Text {
                bold: is_peak,
                ..text(theme.text, 11.0, HPos::Center, VPos::Bottom)
            },
            ((x0 + x1) / 2, y_of(acc) - 3),
        );
    }
    backend.draw_line((left, bottom), (right, bottom), &solid(theme.text));
    shapes
}

/// A phase's name under its column: the whole name where the slot has room, else one word ("reference" for
/// "reference pass"), so five phases side by side on a phone do not run into each other.
fn phase_label(p: Phase, room: i32, bold: bool) -> &'static str {
    // Bold text is about a tenth wider than the estimate for regular text.
    let width = |l: &str| labels::text_width(l, 11.0) * if bold { 11 } else { 10 } / 10;
    if width(p.label()) <= room {
        return p.label();
    }
    match p {
        Phase::Load => "loaded",
        Phase::Generation => "generate",
        Phase::Forward => "forward",
        Phase::Reference => "reference",
        Phase::Backward => "backward",
        Phase::Optimizer => "optimizer",
    }
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
    scatter_shapes(points, theme, w as i32, h as i32).replay(backend)
}

fn scatter_shapes(points: &[ScatterPoint], theme: &Theme, w: i32, h: i32) -> Shapes {
    let mut shapes = Shapes::default();
    let backend = &mut shapes;
    backend.draw_rect((0, 0), (w, h), &solid(theme.background), true);
    let (left, right, top, bottom) = (62, w - 12, 12, h - 34);
    if right - left < 40 || bottom - top < 40 {
        return shapes;
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
        backend.draw_line((left, y_of(tick)), (right, y_of(tick)), &solid(theme.grid));
        backend.draw_text(
            &format_bytes(tick),
            &text(theme.text, 11.0, HPos::Right, VPos::Center),
            (left - 5, y_of(tick)),
        );
        backend.draw_text(
            &format_bytes(tick),
            &text(theme.text, 11.0, HPos::Center, VPos::Top),
            (x_of(tick), bottom + 4),
        );
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
        );
    }
    for p in points {
        let (x, y) = (x_of(p.measured_bytes), y_of(p.predicted_bytes));
        backend.draw_rect(
            (x - 2, y - 2),
            (x + 2, y + 2),
            &solid(theme.categories[0]),
            true,
        );
    }
    backend.draw_text(
        "measured",
        &text(theme.text, 11.0, HPos::Right, VPos::Bottom),
        (right, bottom - 3),
    );
    backend.draw_text(
        "predicted",
        &text(theme.text, 11.0, HPos::Left, VPos::Top),
        (left + 4, top),
    );
    backend.draw_line((left, top), (left, bottom), &solid(theme.text));
    backend.draw_line((left, bottom), (right, bottom), &solid(theme.text));
    shapes
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

    #[test]
    fn the_timeline_peak_says_allocated_where_it_has_room_and_stays_in_its_column() {
        let plan = Plan::parse_query("model=llama-3.1-8b&method=qlora").plan;
        let e = estimate(preset_arch(&plan), &plan);
        let peak_tag = |w: i32| {
            timeline_shapes(&e, &Theme::LIGHT, w, 150)
                .0
                .into_iter()
                .find_map(|s| match s {
                    Shape::Text(t, _, _) if t.starts_with("peak ") => Some(t),
                    _ => None,
                })
                .unwrap()
        };
        let wide = peak_tag(860);
        assert_eq!(
            wide,
            format!("peak {} allocated", format_bytes(e.peak_allocated_bytes))
        );
        let phone = peak_tag(350);
        assert_eq!(
            phone,
            format!("peak {}", format_bytes(e.peak_allocated_bytes))
        );
    }

    #[test]
    fn the_timeline_names_a_reference_pass_and_its_phase_names_never_overlap() {
        let plan = Plan::parse_query("model=llama-3.2-1b&method=full&b=2&s=1024&task=dpo").plan;
        let e = estimate(preset_arch(&plan), &plan);
        for w in [300, 350, 390, 500, 700, 860, 1200] {
            let names: Vec<(String, i32, bool)> = timeline_shapes(&e, &Theme::LIGHT, w, 150)
                .0
                .into_iter()
                .filter_map(|s| match s {
                    Shape::Text(t, style, (x, y)) if y > 150 - 22 => Some((t, x, style.bold)),
                    _ => None,
                })
                .collect();
            assert_eq!(names.len(), 5, "{w}: {names:?}");
            assert!(names[2].0.starts_with("reference"), "{w}: {names:?}");
            let span = |(t, x, bold): &(String, i32, bool)| {
                let half = labels::text_width(t, 11.0) * if *bold { 11 } else { 10 } / 20;
                (x - half, x + half)
            };
            for pair in names.windows(2) {
                assert!(
                    span(&pair[0]).1 < span(&pair[1]).0,
                    "{w}: {:?} runs into {:?}",
                    pair[0],
                    pair[1]
                );
            }
            if w >= 860 {
                assert_eq!(names[2].0, "reference pass");
            }
        }
    }
}
