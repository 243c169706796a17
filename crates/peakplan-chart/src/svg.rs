//! The chart as a standalone SVG document, written straight from its recorded shapes in the markup plotters' SVG
//! backend writes (the snapshots in `tests/data` hold it byte for byte), without that backend's code in the page.

use crate::{ChartData, Shape, Text, Theme};
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{BackendColor, BackendStyle, BackendTextStyle, FontStyle};
use std::fmt::Write as _;

fn color(c: BackendColor) -> String {
    let (r, g, b) = c.rgb;
    format!("#{r:02X}{g:02X}{b:02X}")
}

/// One self-closing or opening tag, its attribute values escaped.
fn tag(out: &mut String, name: &str, attrs: &[(&str, String)], close: bool) {
    let _ = write!(out, "<{name}");
    for (key, value) in attrs {
        let _ = write!(out, " {key}=\"");
        escape(out, value);
        out.push('"');
    }
    out.push_str(if close { "/>\n" } else { ">\n" });
}

fn escape(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            other => out.push(other),
        }
    }
}

fn text(out: &mut String, s: &str, style: &Text, (x, y): (i32, i32)) {
    let anchor = style.anchor();
    let mut attrs = vec![
        ("x", x.to_string()),
        ("y", y.to_string()),
        (
            "dy",
            match anchor.v_pos {
                VPos::Top => "0.76em",
                VPos::Center => "0.5ex",
                VPos::Bottom => "-0.5ex",
            }
            .to_string(),
        ),
        (
            "text-anchor",
            match anchor.h_pos {
                HPos::Left => "start",
                HPos::Right => "end",
                HPos::Center => "middle",
            }
            .to_string(),
        ),
        ("font-family", style.family().as_str().to_string()),
        ("font-size", format!("{}", style.size() / 1.24)),
        ("opacity", format!("{}", style.color().alpha)),
        ("fill", color(style.color())),
    ];
    if matches!(style.style(), FontStyle::Bold) {
        attrs.push(("font-weight", "bold".to_string()));
    }
    tag(out, "text", &attrs, false);
    escape(out, s);
    out.push_str("\n</text>\n");
}

/// The chart as a standalone SVG document of the given size.
pub fn chart_svg(data: &ChartData, theme: &Theme, (w, h): (u32, u32)) -> String {
    let mut out = String::new();
    let size = [("width", w.to_string()), ("height", h.to_string())];
    let view = ("viewBox", format!("0 0 {w} {h}"));
    let ns = ("xmlns", "http://www.w3.org/2000/svg".to_string());
    tag(
        &mut out,
        "svg",
        &[size[0].clone(), size[1].clone(), view, ns],
        false,
    );
    for shape in &crate::chart_shapes(data, theme, w as i32, h as i32).0 {
        match shape {
            Shape::Rect(a, b, s, fill) => {
                let (f, stroke) = if *fill {
                    (color(s.color()), "none".to_string())
                } else {
                    ("none".to_string(), color(s.color()))
                };
                let attrs = [
                    ("x", a.0.to_string()),
                    ("y", a.1.to_string()),
                    ("width", (b.0 - a.0).to_string()),
                    ("height", (b.1 - a.1).to_string()),
                    ("opacity", format!("{}", s.color().alpha)),
                    ("fill", f),
                    ("stroke", stroke),
                ];
                tag(&mut out, "rect", &attrs, true);
            }
            Shape::Line(a, b, s) => {
                let attrs = [
                    ("opacity", format!("{}", s.color().alpha)),
                    ("stroke", color(s.color())),
                    ("stroke-width", s.stroke_width().to_string()),
                    ("x1", a.0.to_string()),
                    ("y1", a.1.to_string()),
                    ("x2", b.0.to_string()),
                    ("y2", b.1.to_string()),
                ];
                tag(&mut out, "line", &attrs, true);
            }
            Shape::Text(s, style, at) => text(&mut out, s, style, *at),
        }
    }
    out.push_str("</svg>\n");
    out
}
