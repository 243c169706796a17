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
    backend.draw_text(
        &data.title,
        &Text {
            bold: true,
            ..text(theme.text, font + 1.0, HPos::Left, VPos::Top)
        },
        (12, y),
    )?;
    y += (font * 1.6) as i32;
    for (i, c) in Category::ALL.iter().enumerate() {
        let label = c.label();
        let item_w = 22 + (label.len() as f64 * font * 0.58) as i32;
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
    let top = y + (font * 2.2) as i32;
    let left = if compact { 52 } else { 66 };
    let bottom = h - (font * 2.4) as i32;
    let right = w - 12;
    if bottom - top < 20 || right - left < 40 {
        return Ok(());
    }
    let max = data.max_bytes() as f64 * 1.08;
    let y_of = |bytes: u64| bottom - ((bytes as f64 / max) * (bottom - top) as f64).round() as i32;

    // Grid and axis labels.
    let step = axis_step(max as u64);
    let mut tick = 0u64;
    while (tick as f64) <= max {
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
    let n = data.bars.len().max(1) as i32;
    let slot = (right - left) / n;
    let bar_w = (slot as f64 * 0.56) as i32;
    for (i, bar) in data.bars.iter().enumerate() {
        let x0 = left + slot * i as i32 + (slot - bar_w) / 2;
        let x1 = x0 + bar_w;
        let mut acc = 0u64;
        for (ci, c) in Category::ALL.iter().enumerate() {
            let v = bar.parts.get(*c);
            if v == 0 {
                continue;
            }
            let (y0, y1) = (y_of(acc.saturating_add(v)), y_of(acc));
            backend.draw_rect(
                (x0, y0),
                (x1, y1.max(y0 + 1)),
                &solid(theme.categories[ci]),
                true,
            )?;
            acc = acc.saturating_add(v);
        }
        if bar.selected {
            backend.draw_rect(
                (x0 - 3, y_of(acc) - 3),
                (x1 + 3, bottom),
                &Stroke {
                    width: 2,
                    ..solid(theme.text)
                },
                false,
            )?;
        }
        let label_style = Text {
            bold: bar.selected,
            ..text(theme.text, font, HPos::Center, VPos::Top)
        };
        backend.draw_text(&bar.label, &label_style, ((x0 + x1) / 2, bottom + 6))?;
        backend.draw_text(
            &format_bytes(acc),
            &text(theme.text, font - 1.0, HPos::Center, VPos::Bottom),
            ((x0 + x1) / 2, y_of(acc) - 6),
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
        let label = format!("{name}: {}", format_bytes(*cap));
        backend.draw_text(
            &label,
            &text(theme.capacity, font - 1.0, HPos::Right, VPos::Bottom),
            (right, cy - 4),
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
