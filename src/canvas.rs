//! Drawing the core's figures onto `<canvas>` elements through the chart crate's plotters code.
//!
//! The backend is plotters-canvas's `CanvasBackend`, wrapped only to draw in CSS pixels onto a buffer of device
//! pixels; this module keeps each canvas's buffer equal to its laid-out size (read from a `ResizeObserver`, never
//! from layout during a repaint) times the screen's pixel ratio.

use leptos::prelude::{RwSignal, Set};
use peakplan_chart::{draw_chart, draw_scatter, draw_timeline, ChartData, ScatterPoint, Theme};
use peakplan_core::Estimate;
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};
use plotters_canvas::CanvasBackend;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsCast;
use web_sys::{HtmlCanvasElement, ResizeObserver, ResizeObserverEntry};

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

/// The screen's device pixels per CSS pixel (2 or 3 on phones and high-density laptops), bounded so a strange
/// value cannot ask for a huge buffer.
fn pixel_ratio() -> f64 {
    web_sys::window()
        .map(|w| w.device_pixel_ratio())
        .filter(|r| r.is_finite())
        .unwrap_or(1.0)
        .clamp(1.0, 4.0)
}

/// Matches the canvas's drawing buffer to its laid-out size in device pixels, so text and lines stay sharp on
/// any screen and nothing stretches; returns the size in CSS pixels the figure is laid out in.
fn fit(canvas: &HtmlCanvasElement, (w, h): (u32, u32), min_h: u32) -> (u32, u32) {
    let css = (w.max(200), h.max(min_h));
    let ratio = pixel_ratio();
    let device = |v: u32| (f64::from(v) * ratio).round() as u32;
    if canvas.width() != device(css.0) {
        canvas.set_width(device(css.0));
    }
    if canvas.height() != device(css.1) {
        canvas.set_height(device(css.1));
    }
    css
}

/// The size in CSS pixels that the canvas's figure was laid out in (its buffer over the pixel ratio), for
/// mapping pointer positions onto the figure.
pub fn css_size(canvas: &HtmlCanvasElement) -> (u32, u32) {
    let ratio = pixel_ratio();
    let css = |v: u32| (f64::from(v) / ratio).round() as u32;
    (css(canvas.width()), css(canvas.height()))
}

/// plotters-canvas's backend, drawing in CSS pixels onto a buffer of device pixels: the context is scaled once
/// per paint and plotters is told the CSS size, so the chart's layout is the same on every screen.
struct Scaled {
    inner: CanvasBackend,
    css: (u32, u32),
}

/// The backend for `canvas` laid out at `css`; `None` where the canvas has no 2D context.
fn backend(canvas: &HtmlCanvasElement, css: (u32, u32)) -> Option<Scaled> {
    let ctx = canvas
        .get_context("2d")
        .ok()??
        .dyn_into::<web_sys::CanvasRenderingContext2d>()
        .ok()?;
    let ratio = f64::from(canvas.width()) / f64::from(css.0.max(1));
    ctx.set_transform(ratio, 0.0, 0.0, ratio, 0.0, 0.0).ok()?;
    Some(Scaled {
        inner: CanvasBackend::with_canvas_object(canvas.clone())?,
        css,
    })
}

/// plotters-canvas does not export its error type; it is reached through the trait.
type CanvasError = <CanvasBackend as DrawingBackend>::ErrorType;
type Drawn = Result<(), DrawingErrorKind<CanvasError>>;

impl DrawingBackend for Scaled {
    type ErrorType = CanvasError;

    fn get_size(&self) -> (u32, u32) {
        self.css
    }
    fn ensure_prepared(&mut self) -> Drawn {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> Drawn {
        self.inner.present()
    }
    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Drawn {
        self.inner.draw_pixel(point, color)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Drawn {
        self.inner.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        ul: BackendCoord,
        br: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Drawn {
        self.inner.draw_rect(ul, br, style, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Drawn {
        self.inner.draw_path(path, style)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Drawn {
        self.inner.fill_polygon(vert, style)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        c: BackendCoord,
        r: u32,
        style: &S,
        fill: bool,
    ) -> Drawn {
        self.inner.draw_circle(c, r, style, fill)
    }
    fn draw_text<TStyle: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &TStyle,
        pos: BackendCoord,
    ) -> Drawn {
        self.inner.draw_text(text, style, pos)
    }
}

// A failed drawing call (the context threw) leaves a partly drawn canvas and nothing else to do: the figures the
// chart shows are also in the page's text, so the error is dropped here, once.
pub fn paint_chart(canvas: &HtmlCanvasElement, size: (u32, u32), data: &ChartData, theme: &Theme) {
    let css = fit(canvas, size, 240);
    if let Some(mut b) = backend(canvas, css) {
        let _ = draw_chart(&mut b, data, theme);
    }
}

pub fn paint_timeline(canvas: &HtmlCanvasElement, size: (u32, u32), e: &Estimate, theme: &Theme) {
    let css = fit(canvas, size, 120);
    if let Some(mut b) = backend(canvas, css) {
        let _ = draw_timeline(&mut b, e, theme);
    }
}

/// The accuracy panel's scatter of predicted against measured peaks, on a canvas laid out by the page.
pub fn paint_scatter(
    canvas: &HtmlCanvasElement,
    width: u32,
    points: &[ScatterPoint],
    theme: &Theme,
) {
    let css = fit(canvas, (width, (width * 2 / 3).clamp(200, 420)), 200);
    if let Some(mut b) = backend(canvas, css) {
        let _ = draw_scatter(&mut b, points, theme);
    }
}
