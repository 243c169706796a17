//! A dataset's token lengths, pasted or read from a file, as the plan's length statistics (`lmean`, `lsd`,
//! `lmax`): what a user who has tokenized their data knows, in the terms the replay draws from.

use super::{Lens, Plan, MAX_SEQ};

/// Most lengths read: ten million sequences, more than a fine-tuning dataset's sample needs.
pub const MAX_DATASET_LENGTHS: usize = 10_000_000;

/// What a list of token lengths says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatasetLengths {
    pub count: usize,
    /// Mean and (population) standard deviation, rounded to whole tokens.
    pub mean: u64,
    pub sd: u64,
    pub max: u64,
}

impl DatasetLengths {
    /// Reads whole token counts separated by commas, semicolons, whitespace or newlines (a JSON array's
    /// brackets are allowed). Every entry must be a count from 1 to [`MAX_SEQ`]; the error names the first that is
    /// not, with its place.
    pub fn parse(text: &str) -> Result<DatasetLengths, String> {
        let entries = text
            .split(|c: char| c == ',' || c == ';' || c.is_whitespace() || c == '[' || c == ']')
            .filter(|e| !e.is_empty());
        let (mut count, mut sum, mut sum_sq, mut max) = (0usize, 0u128, 0u128, 0u64);
        for (i, entry) in entries.enumerate() {
            let n: u64 = entry.parse().map_err(|_| {
                format!(
                    "entry {} (`{}`) is not a whole number of tokens",
                    i + 1,
                    shorten(entry)
                )
            })?;
            if !(1..=MAX_SEQ).contains(&n) {
                return Err(format!(
                    "entry {} is {n} tokens; a sequence has 1 to {MAX_SEQ}",
                    i + 1
                ));
            }
            count += 1;
            if count > MAX_DATASET_LENGTHS {
                return Err(format!(
                    "more than {MAX_DATASET_LENGTHS} lengths; a sample of the dataset tells the same"
                ));
            }
            sum += u128::from(n);
            sum_sq += u128::from(n) * u128::from(n);
            max = max.max(n);
        }
        if count == 0 {
            return Err("no lengths found: give each sequence's token count, separated by commas, spaces or \
                        new lines"
                .into());
        }
        let n = count as f64;
        let mean = sum as f64 / n;
        let variance = (sum_sq as f64 / n - mean * mean).max(0.0);
        Ok(DatasetLengths {
            count,
            mean: mean.round() as u64,
            sd: variance.sqrt().round() as u64,
            max,
        })
    }

    /// Makes them the plan's: batches padded to their longest (unless they vary already), the mean and
    /// deviation as stated, the longest cut to `s` (longer sequences are cut to it, or dropped: `ltrunc`). Whether
    /// it was cut.
    pub fn apply(&self, plan: &mut Plan) -> bool {
        if !plan.lengths.varies() {
            plan.lengths = Lens::Padded;
        }
        plan.len_mean = Some(self.mean.max(1));
        plan.len_sd = Some(self.sd);
        plan.len_max = Some(self.max.min(plan.seq_len));
        self.max > plan.seq_len
    }
}

/// An entry as an error message quotes it: at most 24 characters.
fn shorten(entry: &str) -> String {
    let mut s: String = entry.chars().take(24).collect();
    if entry.chars().count() > 24 {
        s.push('…');
    }
    s
}
