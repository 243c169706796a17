//! The chart as a standalone SVG document (feature `svg`: the CLI's `--format svg` and the page's "Download SVG"):
//! plotters' SVG backend replays the chart's shapes, then the document gets what a file read without the page
//! needs: a `<title>`, a `<desc>` with the plan's answer, and, where the writer knows the planner's address, a link
//! back to it.

use crate::{draw_chart, ChartData, Theme};
use plotters_backend::DrawingBackend;

/// What a standalone SVG says besides its drawing, for a reader or a search that only has the file: its `<title>`
/// is the chart's title; these are the rest. The front ends write them from the core's figures (the chart computes
/// nothing).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SvgMeta {
    /// The `<desc>`: the plan's answer in a sentence and the query that reproduces it.
    pub description: String,
    /// The planner's address with the plan's query, where the writer knows one (the page does; the CLI has no
    /// site): a small "peakplan" link in the bottom right corner.
    pub link: Option<String>,
}

/// The chart as a standalone SVG document of the given size, written by plotters' SVG backend from the same shapes,
/// with `meta`'s title, description and link.
pub fn chart_svg(data: &ChartData, theme: &Theme, size: (u32, u32), meta: &SvgMeta) -> String {
    let mut out = String::new();
    {
        let mut backend = plotters::backend::SVGBackend::with_string(&mut out, size);
        // The SVG backend writes into a String and cannot fail.
        let _ = draw_chart(&mut backend, data, theme);
        let _ = backend.present();
    }
    with_meta(out, &data.title, meta, theme, size)
}

/// `svg` (plotters' document: its `<svg …>` line first, `</svg>` last) with a `<title>` and a `<desc>` as the
/// root's first children, where SVG readers look for them, and `meta`'s link drawn last, over the corner.
fn with_meta(svg: String, title: &str, meta: &SvgMeta, theme: &Theme, size: (u32, u32)) -> String {
    let head = format!(
        "<title>{}</title>\n<desc>{}</desc>\n",
        xml_text(title),
        xml_text(&meta.description)
    );
    let link = meta.link.as_deref().map(|href| {
        let href = xml_text(href);
        let (r, g, b) = theme.categories[0];
        format!(
            // `xlink:href` too, for SVG 1.1 readers (librsvg, older Inkscape) that do not read a plain `href`.
            "<a xmlns:xlink=\"http://www.w3.org/1999/xlink\" href=\"{href}\" xlink:href=\"{href}\">\n<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-family=\"sans-serif\" \
             font-size=\"10\" fill=\"#{r:02X}{g:02X}{b:02X}\" text-decoration=\"underline\">peakplan</text>\n</a>\n",
            size.0.saturating_sub(6),
            size.1.saturating_sub(4)
        )
    });
    let (Some(open), Some(close)) = (svg.find(">\n"), svg.rfind("</svg>")) else {
        return svg;
    };
    let mut out = String::with_capacity(svg.len() + head.len() + 200);
    out.push_str(&svg[..open + 2]);
    out.push_str(&head);
    out.push_str(&svg[open + 2..close]);
    out.push_str(link.as_deref().unwrap_or_default());
    out.push_str(&svg[close..]);
    out
}

/// Text made safe for XML content and for a double-quoted attribute value. An apostrophe needs no escape in either,
/// and reads better as itself ("the RTX 4090's").
fn xml_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRAWN: &str = "<svg width=\"720\" height=\"420\" viewBox=\"0 0 720 420\" xmlns=\"http://www.w3.org/2000/svg\">\n<rect/>\n</svg>\n";

    #[test]
    fn the_title_and_desc_come_first_escaped_and_the_link_last() {
        let meta = SvgMeta {
            description: "A <b>\"model\"</b> & co: fits".into(),
            link: Some("https://example.org/p/?model=a/b&b=2".into()),
        };
        let svg = with_meta(
            DRAWN.into(),
            "Tom's <model>",
            &meta,
            &Theme::LIGHT,
            (720, 420),
        );
        let lines: Vec<&str> = svg.lines().collect();
        assert_eq!(lines[1], "<title>Tom's &lt;model&gt;</title>");
        assert_eq!(
            lines[2],
            "<desc>A &lt;b&gt;&quot;model&quot;&lt;/b&gt; &amp; co: fits</desc>"
        );
        assert_eq!(lines[3], "<rect/>");
        assert!(lines[4].contains(" href=\"https://example.org/p/?model=a/b&amp;b=2\""));
        assert!(
            lines[5].starts_with("<text x=\"714\" y=\"416\"")
                && lines[5].ends_with(">peakplan</text>")
        );
        assert_eq!(&lines[6..], ["</a>", "</svg>"]);
    }

    #[test]
    fn without_an_address_there_is_no_link() {
        let meta = SvgMeta {
            description: "d".into(),
            link: None,
        };
        let svg = with_meta(DRAWN.into(), "t", &meta, &Theme::DARK, (720, 420));
        assert!(!svg.contains("<a ") && !svg.contains("peakplan"), "{svg}");
        assert!(svg.ends_with("<rect/>\n</svg>\n"), "{svg}");
    }
}
