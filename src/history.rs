//! The plan's history as the browser's: which URL writes add an entry (a burst of changes, such as a slider drag,
//! is one step), and what an applied change did, in words, for its "Undo" line. Plain Rust, tested natively.

use peakplan_core::plan::KEYS;
use peakplan_core::Plan;

/// Changes closer together than this belong to one step: a drag or a run of typing is one Back.
pub const QUIET_MS: f64 = 700.0;

/// How the URL follows a new plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// The URL already says it (the link as opened, or a plan Back or Forward restored).
    Nothing,
    /// A new entry: the first change after a quiet spell.
    Push,
    /// The same entry: the link normalised at load, or a change inside a burst.
    Replace,
}

/// The history policy: one entry per burst of changes.
#[derive(Clone, Debug)]
pub struct Steps {
    /// The query the URL holds, as last written or restored.
    written: Option<String>,
    last_change_ms: f64,
}

impl Default for Steps {
    fn default() -> Self {
        Steps {
            written: None,
            last_change_ms: f64::NEG_INFINITY,
        }
    }
}

impl Steps {
    /// How to write `query`, the plan's, at `now_ms`.
    pub fn write(&mut self, query: &str, now_ms: f64) -> Write {
        let first = self.written.is_none();
        if self.written.as_deref() == Some(query) {
            return Write::Nothing;
        }
        self.written = Some(query.to_string());
        if first {
            return Write::Replace;
        }
        let quiet = now_ms - self.last_change_ms >= QUIET_MS;
        self.last_change_ms = now_ms;
        if quiet {
            Write::Push
        } else {
            Write::Replace
        }
    }

    /// Back or Forward put `query` in the URL: the plan follows without a write, and the next change is a new step.
    pub fn restored(&mut self, query: &str) {
        self.written = Some(query.to_string());
        self.last_change_ms = f64::NEG_INFINITY;
    }
}

/// What changed from `before` to `after`, key by key, as the link writes them: `["b 4 → 2", "ga 4 → 8"]`.
pub fn changed(before: &Plan, after: &Plan) -> Vec<String> {
    KEYS.iter()
        .filter_map(|k| {
            let (a, b) = (before.get(k)?, after.get(k)?);
            (a != b).then(|| format!("{k} {a} → {b}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_changes_is_one_entry_and_a_restored_plan_writes_nothing() {
        let mut s = Steps::default();
        // The link as opened: normalised in place, no entry.
        assert_eq!(s.write("s=1024", 0.0), Write::Replace);
        assert_eq!(s.write("s=1024", 10.0), Write::Nothing);
        // A drag: the first tick adds an entry, the rest update it.
        assert_eq!(s.write("s=2048", 2000.0), Write::Push);
        assert_eq!(s.write("s=4096", 2100.0), Write::Replace);
        assert_eq!(s.write("s=8192", 2700.0), Write::Replace);
        // After a pause, the next change is a new step.
        assert_eq!(s.write("s=8192&b=2", 2700.0 + QUIET_MS), Write::Push);
        // Back: the URL already holds the plan; the change after it is a step of its own, however soon.
        s.restored("s=1024");
        assert_eq!(s.write("s=1024", 5000.0), Write::Nothing);
        assert_eq!(s.write("s=512", 5001.0), Write::Push);
    }

    #[test]
    fn changed_names_every_key_that_moved_in_link_order() {
        let before = Plan::parse_query("b=4&ga=4&s=2048").plan;
        let after = Plan::parse_query("b=2&ga=8&s=2048").plan;
        assert_eq!(changed(&before, &after), ["b 4 → 2", "ga 4 → 8"]);
        assert!(changed(&before, &before).is_empty());
    }
}
