//! Drawing the core's figures onto `<canvas>` elements through the chart crate's plotters code.

use peakplan_chart::{draw_chart, draw_timeline, ChartData, Theme};
use peakplan_core::Estimate;
use plotters_canvas::CanvasBackend;
use web_sys::HtmlCanvasElement;

/// Matches the canvas's drawing buffer to its laid-out size, so text stays sharp and nothing stretches.
fn fit(canvas: &HtmlCanvasElement, min_h: u32) {
    let w = canvas.client_width().max(200) as u32;
    let h = canvas.client_height().max(min_h as i32) as u32;
    if canvas.width() != w {
        canvas.set_width(w);
    }
    if canvas.height() != h {
        canvas.set_height(h);
    }
}

pub fn paint_chart(canvas: &HtmlCanvasElement, data: &ChartData, theme: &Theme) {
    fit(canvas, 240);
    if let Some(mut b) = CanvasBackend::with_canvas_object(canvas.clone()) {
        let _ = draw_chart(&mut b, data, theme);
    }
}

pub fn paint_timeline(canvas: &HtmlCanvasElement, e: &Estimate, theme: &Theme) {
    fit(canvas, 120);
    if let Some(mut b) = CanvasBackend::with_canvas_object(canvas.clone()) {
        let _ = draw_timeline(&mut b, e, theme);
    }
}
