//! The replay's report: every answered row, the skips, and the headline error figures (overall and per publisher),
//! for every run and apart for single- and multi-GPU runs.

use super::{Gpus, Outcome, RowResult};

/// The whole replay.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub rows: Vec<RowResult>,
    /// Rows the planner cannot express yet, with the reason.
    pub skipped: Vec<(String, String)>,
}

/// The report in the compact form the page embeds (`assets/validation.json`). The median and the share are over
/// the measured peaks: `None` (JSON `null`) when there are none, since no error was measured (0.0 would claim a
/// perfect prediction).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    pub median_abs_pct: Option<f64>,
    pub within_10_share: Option<f64>,
    pub outcomes_right: usize,
    pub outcomes_total: usize,
    pub skipped: usize,
    /// Every measured peak as `[measured, predicted]` in whole megabytes (10^6 B): a scatter needs no more, and
    /// the page embeds this list (per-row detail in bytes: `peakplan validate FILE`).
    pub points_mb: Vec<[u64; 2]>,
    /// The same figures for each publisher's runs, most peaks first.
    pub sources: Vec<SourceSummary>,
    /// The figures over the runs on one GPU.
    pub single_gpu: GroupSummary,
    /// The figures over the runs on several GPUs, where sharding decides the peak.
    pub multi_gpu: GroupSummary,
}

/// The headline figures over one group of runs (one GPU, or several), rounded as [`Summary`]'s; the median and
/// the share are `None` (JSON `null`) when the group has no peaks.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GroupSummary {
    pub peaks: usize,
    pub median_abs_pct: Option<f64>,
    pub within_10_share: Option<f64>,
    pub outcomes_right: usize,
    pub outcomes_total: usize,
    /// Each publisher's runs in this group, most peaks first.
    pub sources: Vec<SourceSummary>,
}

/// The headline figures over some rows, unrounded; `None` where there is no peak to take them over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures {
    pub peaks: usize,
    pub median_abs_pct: Option<f64>,
    pub within_10_share: Option<f64>,
    pub outcomes_right: usize,
    pub outcomes_total: usize,
}

/// The error over one publisher's measured peaks: how far to trust the planner for runs like theirs.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SourceSummary {
    pub source: String,
    pub peaks: usize,
    pub median_abs_pct: f64,
    pub within_10_share: f64,
}

/// A short name for a row's `source` column: the repository (`owner/name`) when it starts with one, else its first
/// two words ("QLoRA paper"); rows without a source share "unnamed source".
pub fn source_label(source: &str) -> String {
    let mut words = source.split_whitespace();
    let label = match words.next() {
        None => return "unnamed source".to_string(),
        Some(first) if first.contains('/') => first.to_string(),
        Some(first) => match words.next() {
            Some(second) => format!("{first} {second}"),
            None => first.to_string(),
        },
    };
    let label = label.trim_end_matches([',', ';', ':', '.', '(', ')', '"']);
    if label.is_empty() {
        "unnamed source".to_string()
    } else {
        label.to_string()
    }
}

/// Median of absolute errors sorted ascending.
fn median_of(sorted: &[f64]) -> Option<f64> {
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2]),
        n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// Share of sorted absolute errors within 10%.
fn within_10_of(sorted: &[f64]) -> Option<f64> {
    (!sorted.is_empty())
        .then(|| sorted.iter().filter(|x| **x <= 10.0).count() as f64 / sorted.len() as f64)
}

impl Report {
    /// The compact summary: every measured peak with its prediction, and the headline figures.
    pub fn summary(&self) -> Summary {
        let (outcomes_right, outcomes_total) = self.outcomes();
        Summary {
            median_abs_pct: self.median_abs_pct().map(round_pct),
            within_10_share: self.within_10_share().map(round_share),
            outcomes_right,
            outcomes_total,
            skipped: self.skipped.len(),
            points_mb: self
                .rows
                .iter()
                .filter_map(|r| match r.outcome {
                    Outcome::Peak { bytes, .. } => Some([megabytes(bytes), megabytes(r.predicted)]),
                    Outcome::Fits { .. } | Outcome::AtMost { .. } => None,
                })
                .collect(),
            sources: rounded(self.by_source()),
            single_gpu: self.group_summary(Gpus::Single),
            multi_gpu: self.group_summary(Gpus::Multi),
        }
    }

    fn group_summary(&self, gpus: Gpus) -> GroupSummary {
        let f = self.figures(Some(gpus));
        GroupSummary {
            peaks: f.peaks,
            median_abs_pct: f.median_abs_pct.map(round_pct),
            within_10_share: f.within_10_share.map(round_share),
            outcomes_right: f.outcomes_right,
            outcomes_total: f.outcomes_total,
            sources: rounded(self.by_source_on(Some(gpus))),
        }
    }

    /// The rows of one group of runs, or every row.
    fn rows_on(&self, gpus: Option<Gpus>) -> impl Iterator<Item = &RowResult> {
        self.rows
            .iter()
            .filter(move |r| gpus.is_none_or(|g| r.gpus == g))
    }

    /// The headline figures over one group of runs (`Some`), or over every run (`None`).
    pub fn figures(&self, gpus: Option<Gpus>) -> Figures {
        let errors = sorted_abs_errors(self.rows_on(gpus));
        let outcomes: Vec<bool> = self
            .rows_on(gpus)
            .filter_map(RowResult::outcome_right)
            .collect();
        Figures {
            peaks: errors.len(),
            median_abs_pct: median_of(&errors),
            within_10_share: within_10_of(&errors),
            outcomes_right: outcomes.iter().filter(|x| **x).count(),
            outcomes_total: outcomes.len(),
        }
    }

    /// The headline figures of each publisher's measured peaks, most peaks first (ties by name).
    pub fn by_source(&self) -> Vec<SourceSummary> {
        self.by_source_on(None)
    }

    /// [`Report::by_source`] over one group of runs (`Some`), or over every run (`None`).
    pub fn by_source_on(&self, gpus: Option<Gpus>) -> Vec<SourceSummary> {
        let mut groups: Vec<(String, Vec<f64>)> = Vec::new();
        for row in self.rows_on(gpus) {
            let Some(e) = row.error_pct() else {
                continue;
            };
            match groups.iter_mut().find(|(s, _)| *s == row.source) {
                Some((_, errors)) => errors.push(e.abs()),
                None => groups.push((row.source.clone(), vec![e.abs()])),
            }
        }
        let mut out: Vec<SourceSummary> = groups
            .into_iter()
            .filter_map(|(source, mut errors)| {
                errors.sort_by(f64::total_cmp);
                Some(SourceSummary {
                    source,
                    peaks: errors.len(),
                    median_abs_pct: median_of(&errors)?,
                    within_10_share: within_10_of(&errors)?,
                })
            })
            .collect();
        out.sort_by(|a, b| b.peaks.cmp(&a.peaks).then_with(|| a.source.cmp(&b.source)));
        out
    }

    /// Median absolute percentage error over the peak rows.
    pub fn median_abs_pct(&self) -> Option<f64> {
        self.figures(None).median_abs_pct
    }
    /// Share of peak rows within 10%.
    pub fn within_10_share(&self) -> Option<f64> {
        self.figures(None).within_10_share
    }
    /// (right, total) over the outcome rows.
    pub fn outcomes(&self) -> (usize, usize) {
        let f = self.figures(None);
        (f.outcomes_right, f.outcomes_total)
    }
}

/// The absolute errors of the peak rows among `rows`, ascending.
fn sorted_abs_errors<'a>(rows: impl Iterator<Item = &'a RowResult>) -> Vec<f64> {
    let mut e: Vec<f64> = rows
        .filter_map(RowResult::error_pct)
        .map(f64::abs)
        .collect();
    e.sort_by(f64::total_cmp);
    e
}

/// Percentages to one decimal, as the embedded table shows them.
fn round_pct(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Shares to a tenth of a percent.
fn round_share(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn rounded(sources: Vec<SourceSummary>) -> Vec<SourceSummary> {
    sources
        .into_iter()
        .map(|mut s| {
            s.median_abs_pct = round_pct(s.median_abs_pct);
            s.within_10_share = round_share(s.within_10_share);
            s
        })
        .collect()
}

/// Bytes to the nearest whole megabyte (10^6 B).
fn megabytes(bytes: u64) -> u64 {
    bytes / 1_000_000 + u64::from(bytes % 1_000_000 >= 500_000)
}
