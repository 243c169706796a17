//! The validation summary the accuracy section shows (`assets/validation.json`, written by `peakplan validate
//! --format json`), read into plain types so it is tested natively.

use crate::html::esc;
use peakplan_chart::ScatterPoint;

/// The table as the page embeds it.
pub const TABLE: &str = include_str!("../assets/validation.json");

/// The embedded table, read through `serde_json::Value` (already in the wasm for config import) rather than a
/// derived deserializer, which would add its own code.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    pub median_abs_pct: f64,
    pub within_10_share: f64,
    pub outcomes_right: u64,
    pub outcomes_total: u64,
    pub skipped: u64,
    pub points: Vec<ScatterPoint>,
    pub sources: Vec<SourceRow>,
    /// The peaks of runs on one GPU and on several (`Summary::single_gpu`, `multi_gpu`); `None` in a table
    /// written before the split, which the page then shows without it.
    pub split: Option<[GroupRow; 2]>,
}

/// The headline figures of one group of runs (one GPU, or several).
#[derive(Clone, Debug, PartialEq)]
pub struct GroupRow {
    pub peaks: u64,
    pub median_abs_pct: f64,
    pub within_10_share: f64,
}

impl Table {
    /// The sentence that gives single- and multi-GPU runs apart, or nothing without the split.
    pub fn split_sentence(&self) -> String {
        let Some([one, several]) = &self.split else {
            return String::new();
        };
        format!(
            " Runs on one GPU: {:.1}% over {} peaks; runs sharded over several GPUs: {:.1}% over {} peaks, {:.0}% within 10%.",
            one.median_abs_pct, one.peaks, several.median_abs_pct, several.peaks, several.within_10_share * 100.0
        )
    }
}

/// One publisher's line of the table (`Summary::sources` in the core).
#[derive(Clone, Debug, PartialEq)]
pub struct SourceRow {
    pub source: String,
    pub peaks: u64,
    pub median_abs_pct: f64,
    pub within_10_share: f64,
}

impl Table {
    /// The per-publisher table as markup: a string the page sets once, lighter in the wasm than a view per cell.
    pub fn sources_html(&self) -> String {
        let mut rows = String::new();
        for s in &self.sources {
            rows.push_str(&format!(
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.1}%</td><td class=\"num\">{:.0}%</td></tr>",
                esc(&s.source),
                s.peaks,
                s.median_abs_pct,
                s.within_10_share * 100.0
            ));
        }
        format!(
            "<table class=\"sources\" data-testid=\"accuracy-sources\"><caption>By publisher of the runs</caption>\
             <thead><tr><th>Runs from</th><th>Peaks</th><th>Median error</th><th>Within 10%</th></tr></thead>\
             <tbody>{rows}</tbody></table>"
        )
    }
}

/// Reads the table; `None` when a headline figure or a list is missing, so the page never shows half of it.
pub fn parse(text: &str) -> Option<Table> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let num = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
    let int = |k: &str| v.get(k).and_then(serde_json::Value::as_u64);
    // Whole megabytes (`Summary::points_mb`): plenty for a scatter, and half the embedded text of bytes.
    let points = v
        .get("points_mb")?
        .as_array()?
        .iter()
        .filter_map(|p| {
            Some(ScatterPoint {
                measured_bytes: p.get(0)?.as_u64()?.saturating_mul(1_000_000),
                predicted_bytes: p.get(1)?.as_u64()?.saturating_mul(1_000_000),
            })
        })
        .collect();
    let group = |k: &str| {
        let g = v.get(k)?;
        Some(GroupRow {
            peaks: g.get("peaks")?.as_u64()?,
            median_abs_pct: g.get("median_abs_pct")?.as_f64()?,
            within_10_share: g.get("within_10_share")?.as_f64()?,
        })
    };
    Some(Table {
        split: group("single_gpu")
            .zip(group("multi_gpu"))
            .map(|(a, b)| [a, b]),
        median_abs_pct: num("median_abs_pct")?,
        within_10_share: num("within_10_share")?,
        outcomes_right: int("outcomes_right")?,
        outcomes_total: int("outcomes_total")?,
        skipped: int("skipped")?,
        points,
        sources: v
            .get("sources")?
            .as_array()?
            .iter()
            .filter_map(|s| {
                Some(SourceRow {
                    source: s.get("source")?.as_str()?.to_string(),
                    peaks: s.get("peaks")?.as_u64()?,
                    median_abs_pct: s.get("median_abs_pct")?.as_f64()?,
                    within_10_share: s.get("within_10_share")?.as_f64()?,
                })
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_table_parses_with_every_peak_in_one_source_row() {
        let t = parse(TABLE).expect("assets/validation.json parses");
        assert!(!t.points.is_empty());
        let peaks: u64 = t.sources.iter().map(|s| s.peaks).sum();
        assert_eq!(peaks as usize, t.points.len());
        assert!(t.sources.windows(2).all(|w| w[0].peaks >= w[1].peaks));
        assert!(t
            .sources
            .iter()
            .all(|s| (0.0..=1.0).contains(&s.within_10_share) && s.median_abs_pct >= 0.0));
    }

    #[test]
    fn the_publisher_table_has_a_row_each_with_escaped_names() {
        let mut t = parse(TABLE).unwrap();
        t.sources.truncate(1);
        t.sources[0].source = "a<b>".into();
        t.sources[0].peaks = 39;
        t.sources[0].median_abs_pct = 28.04;
        t.sources[0].within_10_share = 0.179;
        let html = t.sources_html();
        assert!(html.contains("<tr><td>a&lt;b&gt;</td><td class=\"num\">39</td><td class=\"num\">28.0%</td><td class=\"num\">18%</td></tr>"), "{html}");
        assert_eq!(html.matches("<tr>").count(), 2);
    }

    #[test]
    fn single_and_multi_gpu_peaks_add_up_and_an_older_table_reads_without_them() {
        let t = parse(TABLE).unwrap();
        let [one, several] = t.split.clone().expect("the split");
        assert_eq!((one.peaks + several.peaks) as usize, t.points.len());
        let said = t.split_sentence();
        assert!(
            said.contains(&format!("over {} peaks", several.peaks)),
            "{said}"
        );
        let older = TABLE.replacen("\"multi_gpu\"", "\"renamed\"", 1);
        let t = parse(&older).expect("a table without the split still reads");
        assert_eq!((t.split_sentence(), t.split), (String::new(), None));
    }

    #[test]
    fn a_table_without_sources_is_not_shown_half_read() {
        let text = TABLE.replacen("\"sources\"", "\"renamed\"", 1);
        assert_eq!(parse(&text), None);
    }
}
