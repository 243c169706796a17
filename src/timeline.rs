//! The step timeline's words (plain Rust, tested natively): what its canvas draws, for a screen reader and for
//! tests, phase by phase as the chart draws them ([`Estimate::phases_run`]: a preference task's reference pass
//! among them, none for a plan without one).

use peakplan_core::units::format_bytes;
use peakplan_core::Estimate;

/// The timeline in one sentence: the allocated memory of each phase the step runs, and the phase of the peak.
pub fn timeline_words(e: &Estimate) -> String {
    let phases: Vec<String> = e
        .phases_run()
        .map(|p| format!("{} {}", p.label(), format_bytes(e.phase(p).total())))
        .collect();
    format!(
        "Allocated memory through one step: {}; peak during {}",
        phases.join(", "),
        e.peak_phase.label()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use peakplan_core::{estimate, preset_arch, Plan};

    fn words(q: &str) -> String {
        let p = Plan::parse_query(q).plan;
        timeline_words(&estimate(preset_arch(&p), &p))
    }

    #[test]
    fn a_preference_plan_names_its_reference_pass_and_an_sft_plan_does_not() {
        let dpo = words("model=llama-3.2-1b&method=full&b=2&s=1024&task=dpo");
        assert!(
            dpo.contains("end of forward") && dpo.contains("reference pass"),
            "{dpo}"
        );
        let order = [
            "loaded",
            "end of forward",
            "reference pass",
            "backward",
            "optimizer step",
        ]
        .map(|w| dpo.find(w).unwrap_or(usize::MAX));
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{dpo}");
        let sft = words("model=llama-3.2-1b&method=full&b=2&s=1024");
        assert!(
            !sft.contains("reference pass") && sft.contains("; peak during "),
            "{sft}"
        );
    }
}
