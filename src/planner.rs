//! What the page shows for a plan, computed once per change from the core (plain Rust, tested natively).

use peakplan_chart::ChartData;
use peakplan_core::plan::Method;
use peakplan_core::{estimate, presets, solve, Architecture, Estimate, Plan};

/// Everything derived from one plan: the three methods' estimates, the verdict and the inverse answers.
#[derive(Clone, Debug, PartialEq)]
pub struct Computed {
    /// The plan's own method.
    pub selected: Estimate,
    /// Full, LoRA, QLoRA for the same model and settings.
    pub by_method: [Estimate; 3],
    pub capacity_bytes: u64,
    pub gpu_name: String,
    pub max_batch: Option<u64>,
    pub max_seq: Option<u64>,
    pub chart: ChartData,
    pub model_name: String,
    /// The estimate behind the "after" bar, while a suggestion is previewed.
    pub preview_estimate: Option<Estimate>,
}

/// Display label of a method.
pub fn method_label(m: Method) -> &'static str {
    match m {
        Method::Full => "Full",
        Method::Lora => "LoRA",
        Method::Qlora => "QLoRA",
    }
}

impl Computed {
    pub fn new(arch: &Architecture, plan: &Plan) -> Self {
        let by_method = [Method::Full, Method::Lora, Method::Qlora].map(|m| {
            let mut p = plan.clone();
            p.method = m;
            estimate(arch, &p)
        });
        let selected = by_method[Method::ALL
            .iter()
            .position(|m| *m == plan.method)
            .unwrap_or(2)]
        .clone();
        let gpu = plan.gpu.preset();
        let capacity_bytes = gpu.capacity_bytes;
        let gpu_name = gpu.name.to_string();
        let model_name = presets::model(&arch.name)
            .map(|m| m.name.to_string())
            .unwrap_or_else(|| arch.name.clone());
        let chart = ChartData::from_estimates(
            format!(
                "{model_name}: memory at the peak of one step (b={}, s={})",
                plan.micro_batch, plan.seq_len
            ),
            [Method::Full, Method::Lora, Method::Qlora]
                .iter()
                .zip(by_method.iter())
                .map(|(m, e)| (method_label(*m), e, *m == plan.method)),
            Some((capacity_bytes, gpu_name.clone())),
        );
        Computed {
            max_batch: solve::max_batch(arch, plan, capacity_bytes),
            max_seq: solve::max_seq(arch, plan, capacity_bytes),
            selected,
            by_method,
            capacity_bytes,
            gpu_name,
            chart,
            model_name,
            preview_estimate: None,
        }
    }

    /// Adds an "after" bar for a suggested plan beside the three methods.
    pub fn add_preview(&mut self, arch: &Architecture, after: &Plan) {
        let e = estimate(arch, after);
        self.chart.bars.push(peakplan_chart::Bar {
            label: format!("After ({})", method_label(after.method)),
            parts: e.at_peak(),
            selected: false,
        });
        self.preview_estimate = Some(e);
    }

    /// Whether the selected plan fits the chosen GPU (as `nvidia-smi` would count it).
    pub fn fits(&self) -> bool {
        self.selected.device_bytes <= self.capacity_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peakplan_core::preset_arch;

    #[test]
    fn selected_is_the_plans_method_and_bars_are_in_order() {
        let p = Plan::parse_query("model=llama-2-7b&method=lora&gpu=a100-80gb").plan;
        let c = Computed::new(preset_arch(&p), &p);
        assert_eq!(c.selected, c.by_method[1]);
        assert_eq!(
            c.chart
                .bars
                .iter()
                .map(|b| b.label.as_str())
                .collect::<Vec<_>>(),
            ["Full", "LoRA", "QLoRA"]
        );
        assert!(c.chart.bars[1].selected);
        assert!(c.fits());
        assert_eq!(c.model_name, "Llama 2 7B");
    }
}
