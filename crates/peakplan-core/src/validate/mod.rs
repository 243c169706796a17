//! Replays measured peaks (the validation CSV) through the engine: each row becomes a plan, or a skip with its reason.
//!
//! Pure: takes the CSV text, returns a [`Report`]. The mapping reads the free-text columns the way the dataset's
//! README describes them (framework, metric, precision, optimizer, parallelism), and refuses what the planner
//! cannot express rather than guessing. `csv` reads the records, `row` maps one to a plan, `report` sums up.

mod csv;
mod report;
mod row;

pub use csv::parse_csv;
pub use report::{source_label, Figures, GroupSummary, Report, SourceSummary, Summary};

use crate::arch::Architecture;
use crate::engine::estimate;
use crate::plan::Plan;
use csv::Rec;
use row::map_row;

/// Which reported figure a measurement corresponds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// `torch.cuda.max_memory_allocated()` (or the allocator's active bytes).
    Allocated,
    /// `torch.cuda.max_memory_reserved()`.
    Reserved,
    /// What `nvidia-smi` shows.
    Device,
}

impl Metric {
    pub fn label(self) -> &'static str {
        match self {
            Metric::Allocated => "allocated",
            Metric::Reserved => "reserved",
            Metric::Device => "device",
        }
    }
}

/// What a row records.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Outcome {
    /// A measured peak.
    Peak { bytes: u64, metric: Metric },
    /// The run did (true) or did not (false) fit a GPU of this capacity.
    Fits { capacity_bytes: u64, fits: bool },
    /// A stated upper bound on a figure ("peak allocated memory below 10 GB").
    AtMost { bytes: u64, metric: Metric },
}

/// Whether a run used one GPU or several: the report gives each its own figures, since sharding is where the
/// planner is least sure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Gpus {
    Single,
    Multi,
}

impl Gpus {
    /// A row's GPU count from its `num_gpus` column: several when it names a number above one; when it names
    /// none, several if it says "multi" (the papers' aggregate claims) or `parallelism` names a scheme that
    /// spreads one run over GPUs. A ZeRO-3 run on one GPU (offload) says `num_gpus` 1 and stays single.
    pub fn of_row(num_gpus: &str, parallelism: &str) -> Gpus {
        let digits: String = num_gpus
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(char::is_ascii_digit)
            .collect();
        let multi = match digits.parse::<u64>() {
            Ok(n) => n > 1,
            Err(_) => {
                let par = parallelism.to_lowercase();
                num_gpus.to_lowercase().contains("multi")
                    || [
                        "fsdp",
                        "zero",
                        "deepspeed",
                        "ddp",
                        "data parallel",
                        "tensor",
                        "pipeline",
                        "megatron",
                        "device_map",
                        "split",
                    ]
                    .iter()
                    .any(|k| par.contains(k))
            }
        };
        if multi {
            Gpus::Multi
        } else {
            Gpus::Single
        }
    }
    /// The short label the CLI's by-source table uses.
    pub fn label(self) -> &'static str {
        match self {
            Gpus::Single => "1",
            Gpus::Multi => "2+",
        }
    }
}

/// A row turned into something the engine can answer.
#[derive(Clone, Debug)]
pub struct Case {
    pub id: String,
    /// Who published the run (see [`source_label`]).
    pub source: String,
    /// One GPU or several, as the row says (see [`Gpus::of_row`]).
    pub gpus: Gpus,
    pub arch: Architecture,
    pub plan: Plan,
    pub outcome: Outcome,
}

/// One answered row.
#[derive(Clone, Debug, PartialEq)]
pub struct RowResult {
    pub id: String,
    /// Who published the run (see [`source_label`]).
    pub source: String,
    pub gpus: Gpus,
    pub query: String,
    /// Predicted bytes of the row's metric (device bytes for outcome rows).
    pub predicted: u64,
    pub outcome: Outcome,
}

impl RowResult {
    /// Signed error in percent of the measurement, for peak rows.
    pub fn error_pct(&self) -> Option<f64> {
        match self.outcome {
            Outcome::Peak { bytes, .. } if bytes > 0 => {
                Some((self.predicted as f64 - bytes as f64) / bytes as f64 * 100.0)
            }
            _ => None,
        }
    }
    /// Whether an outcome row is classified right.
    pub fn outcome_right(&self) -> Option<bool> {
        match self.outcome {
            Outcome::Fits {
                capacity_bytes,
                fits,
            } => Some((self.predicted <= capacity_bytes) == fits),
            Outcome::AtMost { bytes, .. } => Some(self.predicted <= bytes),
            Outcome::Peak { .. } => None,
        }
    }
}

/// Rows that cannot be expressed: `(id, reason)`.
pub type Skipped = Vec<(String, String)>;

/// Maps every row of a validation CSV to a case, or to a skip with its reason.
pub fn cases(text: &str) -> Result<(Vec<Case>, Skipped), String> {
    let records = parse_csv(text)?;
    let (header, rows) = records.split_first().ok_or("the CSV is empty")?;
    for need in ["id", "method", "measured_bytes", "value_kind", "metric"] {
        if !header.iter().any(|h| h == need) {
            return Err(format!("the CSV has no `{need}` column"));
        }
    }
    let (mut ok, mut skipped) = (Vec::new(), Vec::new());
    for values in rows.iter().filter(|v| v.iter().any(|f| !f.is_empty())) {
        let rec = Rec { header, values };
        match map_row(&rec) {
            Ok(case) => {
                let second = secondary_peak(&rec.lower("secondary_metrics"), &case);
                ok.push(case);
                ok.extend(second);
            }
            Err(reason) => skipped.push((rec.get("id").to_string(), reason)),
        }
    }
    Ok((ok, skipped))
}

/// A second peak the row's run measured in another metric ("peak allocated 8.28 GiB" beside a reserved peak),
/// as a case of its own: `<id>#allocated`.
fn secondary_peak(text: &str, case: &Case) -> Option<Case> {
    let Outcome::Peak { metric: first, .. } = case.outcome else {
        return None;
    };
    let (metric, rest) = [
        ("peak allocated ", Metric::Allocated),
        ("peak reserved ", Metric::Reserved),
    ]
    .into_iter()
    .find_map(|(label, m)| text.find(label).map(|i| (m, &text[i + label.len()..])))?;
    if metric == first {
        return None;
    }
    let mut words = rest.split_whitespace();
    let value: f64 = words.next()?.parse().ok()?;
    let unit = match words.next()?.trim_end_matches([',', ';', '.']) {
        "gib" => (1u64 << 30) as f64,
        "gb" => 1e9,
        "mib" => (1u64 << 20) as f64,
        _ => return None,
    };
    Some(Case {
        id: format!("{}#{}", case.id, metric.label()),
        outcome: Outcome::Peak {
            bytes: (value * unit).round() as u64,
            metric,
        },
        ..case.clone()
    })
}

/// Replays every row of a validation CSV.
pub fn validate(text: &str) -> Result<Report, String> {
    let (cases, skipped) = cases(text)?;
    let rows = cases
        .into_iter()
        .map(|case| {
            let e = estimate(&case.arch, &case.plan);
            let metric = match case.outcome {
                Outcome::Peak { metric, .. } | Outcome::AtMost { metric, .. } => metric,
                Outcome::Fits { .. } => Metric::Device,
            };
            let predicted = match metric {
                Metric::Allocated => e.peak_allocated_bytes,
                Metric::Reserved => e.peak_reserved_bytes,
                Metric::Device => e.device_bytes,
            };
            RowResult {
                id: case.id,
                source: case.source,
                gpus: case.gpus,
                query: case.plan.to_query(),
                predicted,
                outcome: case.outcome,
            }
        })
        .collect();
    Ok(Report { rows, skipped })
}
