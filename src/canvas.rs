//! Drawing the core's figures onto `<canvas>` elements through the chart crate's plotters code.
//!
//! [`Canvas2d`] is the plotters backend: a canvas 2D context that remembers the fill, stroke, font and
//! alignment it last set and only tells the context about changes. A slider move repaints the chart, and
//! re-parsing the same CSS colour and font strings for every rectangle and label was most of a repaint.

use leptos::prelude::{RwSignal, Set};
use peakplan_chart::{draw_chart, draw_timeline, ChartData, Theme};
use peakplan_core::Estimate;
use plotters_backend::{
    text_anchor::{HPos, VPos},
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};
use std::fmt;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsCast;
use web_sys::{CanvasRenderingContext2d, HtmlCanvasElement, ResizeObserver, ResizeObserverEntry};

/// A canvas call that failed (the context threw); drawing stops there.
#[derive(Debug)]
pub struct CanvasError;

impl fmt::Display for CanvasError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the canvas refused a drawing call")
    }
}

impl std::error::Error for CanvasError {}

/// A plotters backend over a canvas 2D context that sets each piece of context state only when it changes.
pub struct Canvas2d {
    ctx: CanvasRenderingContext2d,
    size: (u32, u32),
    fill: Option<(u8, u8, u8, u32)>,
    stroke: Option<(u8, u8, u8, u32, u32)>,
    font: String,
    align: &'static str,
    baseline: &'static str,
}

/// A colour as the context wants it, with the alpha kept as thousandths so it can be compared exactly.
fn key(c: BackendColor) -> (u8, u8, u8, u32) {
    let (r, g, b) = c.rgb;
    (r, g, b, (c.alpha.clamp(0.0, 1.0) * 1000.0).round() as u32)
}

fn css(k: (u8, u8, u8, u32)) -> String {
    format!("rgba({},{},{},{})", k.0, k.1, k.2, f64::from(k.3) / 1000.0)
}

impl Canvas2d {
    pub fn new(canvas: &HtmlCanvasElement) -> Option<Self> {
        let ctx = canvas
            .get_context("2d")
            .ok()??
            .dyn_into::<CanvasRenderingContext2d>()
            .ok()?;
        Some(Canvas2d {
            ctx,
            size: (canvas.width(), canvas.height()),
            fill: None,
            stroke: None,
            font: String::new(),
            align: "",
            baseline: "",
        })
    }

    fn set_fill(&mut self, c: BackendColor) {
        let k = key(c);
        if self.fill != Some(k) {
            self.ctx.set_fill_style_str(&css(k));
            self.fill = Some(k);
        }
    }

    /// Starts a path through `points`, each coordinate placed by `at`.
    fn trace(&self, points: impl IntoIterator<Item = BackendCoord>, at: impl Fn(i32) -> f64) {
        self.ctx.begin_path();
        for (i, p) in points.into_iter().enumerate() {
            if i == 0 {
                self.ctx.move_to(at(p.0), at(p.1));
            } else {
                self.ctx.line_to(at(p.0), at(p.1));
            }
        }
    }

    fn set_stroke(&mut self, c: BackendColor, width: u32) {
        let k = key(c);
        let s = (k.0, k.1, k.2, k.3, width);
        if self.stroke != Some(s) {
            self.ctx.set_stroke_style_str(&css(k));
            self.ctx.set_line_width(f64::from(width));
            self.stroke = Some(s);
        }
    }
}

type Result<T = ()> = std::result::Result<T, DrawingErrorKind<CanvasError>>;

fn fail<T>(_: wasm_bindgen::JsValue) -> Result<T> {
    Err(DrawingErrorKind::DrawingError(CanvasError))
}

/// Lines of odd width on whole pixels are drawn through pixel centres, so they stay one pixel sharp.
fn half(v: i32, width: u32) -> f64 {
    f64::from(v) + if width % 2 == 1 { 0.5 } else { 0.0 }
}

impl DrawingBackend for Canvas2d {
    type ErrorType = CanvasError;

    fn get_size(&self) -> (u32, u32) {
        self.size
    }

    fn ensure_prepared(&mut self) -> Result {
        Ok(())
    }

    fn present(&mut self) -> Result {
        Ok(())
    }

    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Result {
        if color.alpha == 0.0 {
            return Ok(());
        }
        self.set_fill(color);
        self.ctx
            .fill_rect(f64::from(point.0), f64::from(point.1), 1.0, 1.0);
        Ok(())
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result {
        if style.color().alpha == 0.0 {
            return Ok(());
        }
        let w = style.stroke_width();
        self.set_stroke(style.color(), w);
        self.ctx.begin_path();
        self.ctx.move_to(half(from.0, w), half(from.1, w));
        self.ctx.line_to(half(to.0, w), half(to.1, w));
        self.ctx.stroke();
        Ok(())
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result {
        if style.color().alpha == 0.0 {
            return Ok(());
        }
        let (x0, y0) = (f64::from(upper_left.0), f64::from(upper_left.1));
        let (x1, y1) = (f64::from(bottom_right.0), f64::from(bottom_right.1));
        if fill {
            self.set_fill(style.color());
            self.ctx.fill_rect(x0, y0, x1 - x0, y1 - y0);
        } else {
            let w = style.stroke_width();
            self.set_stroke(style.color(), w);
            let o = if w % 2 == 1 { 0.5 } else { 0.0 };
            self.ctx.stroke_rect(x0 + o, y0 + o, x1 - x0, y1 - y0);
        }
        Ok(())
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result {
        if style.color().alpha == 0.0 {
            return Ok(());
        }
        let w = style.stroke_width();
        self.set_stroke(style.color(), w);
        self.trace(path, |v| half(v, w));
        self.ctx.stroke();
        Ok(())
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result {
        if style.color().alpha == 0.0 {
            return Ok(());
        }
        self.set_fill(style.color());
        self.trace(vert, f64::from);
        self.ctx.close_path();
        self.ctx.fill();
        Ok(())
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result {
        if style.color().alpha == 0.0 {
            return Ok(());
        }
        self.ctx.begin_path();
        self.ctx
            .arc(
                f64::from(center.0),
                f64::from(center.1),
                f64::from(radius),
                0.0,
                std::f64::consts::TAU,
            )
            .or_else(fail)?;
        if fill {
            self.set_fill(style.color());
            self.ctx.fill();
        } else {
            self.set_stroke(style.color(), style.stroke_width());
            self.ctx.stroke();
        }
        Ok(())
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let baseline = match style.anchor().v_pos {
            VPos::Top => "top",
            VPos::Center => "middle",
            VPos::Bottom => "bottom",
        };
        if self.baseline != baseline {
            self.ctx.set_text_baseline(baseline);
            self.baseline = baseline;
        }
        let align = match style.anchor().h_pos {
            HPos::Left => "start",
            HPos::Right => "end",
            HPos::Center => "center",
        };
        if self.align != align {
            self.ctx.set_text_align(align);
            self.align = align;
        }
        self.set_fill(color);
        let font = format!(
            "{} {}px {}",
            style.style().as_str(),
            style.size(),
            style.family().as_str()
        );
        if self.font != font {
            self.ctx.set_font(&font);
            self.font = font;
        }
        self.ctx
            .fill_text(text, f64::from(pos.0), f64::from(pos.1))
            .or_else(fail)
    }
}

/// Keeps `size` equal to the canvas's laid-out (CSS) size, from a `ResizeObserver`.
///
/// Painting takes the size from here instead of asking the element: after a slider move has changed the page's
/// text, reading `clientWidth` forced a synchronous layout of the whole page on every repaint, which was more
/// than half of a slider move. Without `ResizeObserver` the size is read once.
pub fn watch_size(canvas: &HtmlCanvasElement, size: RwSignal<Option<(u32, u32)>>) {
    let cb = Closure::<dyn FnMut(js_sys::Array)>::new(move |entries: js_sys::Array| {
        if let Ok(e) = entries.get(0).dyn_into::<ResizeObserverEntry>() {
            let r = e.content_rect();
            size.set(Some((r.width().round() as u32, r.height().round() as u32)));
        }
    });
    match ResizeObserver::new(cb.as_ref().unchecked_ref()) {
        Ok(observer) => {
            observer.observe(canvas);
            // The observer and its callback live as long as the page: one per canvas, made once.
            cb.forget();
        }
        Err(_) => size.set(Some((
            canvas.client_width().max(0) as u32,
            canvas.client_height().max(0) as u32,
        ))),
    }
}

/// Matches the canvas's drawing buffer to its laid-out size, so text stays sharp and nothing stretches.
fn fit(canvas: &HtmlCanvasElement, (w, h): (u32, u32), min_h: u32) {
    let (w, h) = (w.max(200), h.max(min_h));
    if canvas.width() != w {
        canvas.set_width(w);
    }
    if canvas.height() != h {
        canvas.set_height(h);
    }
}

pub fn paint_chart(canvas: &HtmlCanvasElement, size: (u32, u32), data: &ChartData, theme: &Theme) {
    fit(canvas, size, 240);
    if let Some(mut b) = Canvas2d::new(canvas) {
        let _ = draw_chart(&mut b, data, theme);
    }
}

pub fn paint_timeline(canvas: &HtmlCanvasElement, size: (u32, u32), e: &Estimate, theme: &Theme) {
    fit(canvas, size, 120);
    if let Some(mut b) = Canvas2d::new(canvas) {
        let _ = draw_timeline(&mut b, e, theme);
    }
}
