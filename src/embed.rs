//! What the `embed=1` view (and a planner framed by another page) says in its one line: the plan's figures only
//! when they are the named model's; else that the named Hub model is loading, or why the link's plan cannot be
//! drawn. An embed sits in someone else's document with no controls, so it never shows another model's chart in
//! the meantime, and its words name no button or field. Plain Rust, tested natively.

use crate::hub::{Failure, TIMEOUT_SECS};
use crate::planner::Computed;
use peakplan_core::hub::HubId;
use peakplan_core::plan::Task;
use peakplan_core::units::{self, format_bytes, method_label};
use peakplan_core::{Diagnostic, Plan};

/// Where the plan's model stands.
#[derive(Clone, Copy, Debug)]
pub enum Model<'a> {
    /// A preset, or a Hub model that has loaded and imported: the computed figures are its own.
    Ready,
    /// A Hub model on its way.
    Loading(&'a HubId),
    /// A Hub model that could not be loaded.
    Failed(&'a HubId, &'a Failure),
}

/// The embed's one line, and whether the chart stands above it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caption {
    /// The plan's figures, under its chart.
    Figures(String),
    /// The named Hub model is loading: no chart and no figure yet.
    Loading(String),
    /// Why the link's plan cannot be drawn: no chart.
    Problem(String),
}

impl Caption {
    /// The line's words.
    pub fn text(&self) -> &str {
        match self {
            Caption::Figures(t) | Caption::Loading(t) | Caption::Problem(t) => t,
        }
    }

    /// Whether the chart is drawn: only over figures of the named plan.
    pub fn shows_chart(&self) -> bool {
        matches!(self, Caption::Figures(_))
    }

    /// The state's name, for the line's `data-state` (styles and tests).
    pub fn state(&self) -> &'static str {
        match self {
            Caption::Figures(_) => "figures",
            Caption::Loading(_) => "loading",
            Caption::Problem(_) => "problem",
        }
    }
}

/// The line for `plan`: a value the link got wrong comes first (the plan drawn would not be the one the link
/// names: an unknown model falls back to the default preset), then the Hub model's state, then the figures in
/// `comp`, which are the plan's own only once its model is [`Model::Ready`].
pub fn caption(plan: &Plan, model: Model, comp: &Computed, refused: &[Diagnostic]) -> Caption {
    if let Some(first) = refused.first() {
        // The core's list ends with one "… and N more problems" line once it is long; count what is left either way.
        let more = match refused.len() - 1 {
            0 => String::new(),
            1 => " (and 1 more problem)".to_string(),
            n => format!(" (and {n} more problems)"),
        };
        return Caption::Problem(format!(
            "This chart cannot be drawn: the link's {first}{more}."
        ));
    }
    match model {
        Model::Loading(id) => Caption::Loading(format!("Loading {id} from the Hugging Face Hub…")),
        Model::Failed(id, failure) => Caption::Problem(format!(
            "This chart cannot be drawn: {}.",
            failure_reason(id, failure)
        )),
        Model::Ready => Caption::Figures(format!(
            "{} · {}{} · b={} s={} · nvidia-smi peak {}{} · peakplan",
            comp.model_name,
            method_label(plan.method),
            // A preference task is named: its chart holds a reference the SFT plan's has not.
            match plan.task {
                Task::Sft => String::new(),
                task => format!(" · {}", task.key().to_ascii_uppercase()),
            },
            plan.micro_batch,
            plan.seq_len,
            format_bytes(comp.selected.device_bytes),
            units::per_gpu(plan)
        )),
    }
}

/// Why a Hub model could not be loaded, in the embed's words: what happened, and nothing about what to click
/// (the full page's message offers a retry, a token field and the config paste; the embed has none of them).
fn failure_reason(id: &HubId, failure: &Failure) -> String {
    match failure {
        Failure::NotFound => format!(
            "the Hugging Face Hub has no model {} with a config.json at revision {} (HTTP 404)",
            id.repo(),
            id.revision()
        ),
        Failure::Denied(code) => format!(
            "{} is gated or private on the Hugging Face Hub (HTTP {code}), and an embed sends no token",
            id.repo()
        ),
        Failure::Offline => format!("the Hugging Face Hub could not be reached for {id}"),
        Failure::TimedOut => format!(
            "the Hugging Face Hub did not answer within {TIMEOUT_SECS} seconds for {id}"
        ),
        Failure::Status(code) => {
            format!("the Hugging Face Hub answered HTTP {code} for {id}'s config.json")
        }
        Failure::OverCap(limit) => {
            format!("{id}'s config.json runs over the {limit} bytes accepted")
        }
        Failure::NotText => format!("{id}'s config.json is not UTF-8 text"),
        Failure::Config(e) => format!("{id} cannot be planned: {e}"),
        Failure::Cancelled => format!("loading {id} from the Hugging Face Hub was stopped"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peakplan_core::hub::ConfigError;
    use peakplan_core::preset_arch;

    fn default_figures() -> (Plan, Computed) {
        let p = Plan::parse_query("").plan;
        let comp = Computed::new(preset_arch(&p), &p);
        (p, comp)
    }

    #[test]
    fn the_figures_show_only_when_the_model_is_ready() {
        let (p, comp) = default_figures();
        let c = caption(&p, Model::Ready, &comp, &[]);
        assert!(c.shows_chart());
        assert!(
            c.text()
                .starts_with("Llama 3.1 8B · QLoRA · b=1 s=2048 · nvidia-smi peak "),
            "{c:?}"
        );
        // A preference task is named beside the method.
        let dpo = Plan::parse_query("task=dpo&method=lora").plan;
        let c = caption(
            &dpo,
            Model::Ready,
            &Computed::new(preset_arch(&dpo), &dpo),
            &[],
        );
        assert!(
            c.text()
                .starts_with("Llama 3.1 8B · LoRA · DPO · b=1 s=2048 · "),
            "{c:?}"
        );
        // A Hub id whose config has not come: the figures at hand are the default preset's, and none is said.
        let hub = Plan::parse_query("model=Qwen/Qwen2.5-7B&method=lora").plan;
        let id = hub.hub.clone().unwrap();
        let loading = caption(&hub, Model::Loading(&id), &comp, &[]);
        assert_eq!(
            loading,
            Caption::Loading("Loading Qwen/Qwen2.5-7B from the Hugging Face Hub…".into())
        );
        assert!(!loading.shows_chart() && !loading.text().contains("GiB"));
    }

    #[test]
    fn a_failed_hub_model_says_why_and_names_no_control() {
        let (_, comp) = default_figures();
        let hub = Plan::parse_query("model=acme/x").plan;
        let id = hub.hub.clone().unwrap();
        let said = |f: Failure| caption(&hub, Model::Failed(&id, &f), &comp, &[]);
        let gone = said(Failure::NotFound);
        assert_eq!(
            gone.text(),
            "This chart cannot be drawn: the Hugging Face Hub has no model acme/x with a config.json at revision \
             main (HTTP 404)."
        );
        assert!(!gone.shows_chart() && gone.state() == "problem");
        for f in [
            Failure::Denied(401),
            Failure::Offline,
            Failure::TimedOut,
            Failure::Status(500),
            Failure::OverCap(1 << 20),
            Failure::NotText,
            Failure::Config(ConfigError::TooLarge {
                bytes: 2 << 20,
                limit: 1 << 20,
            }),
        ] {
            let text = said(f.clone()).text().to_string();
            assert!(text.contains("acme/x"), "{f:?}: {text}");
            for control in ["Try again", "token below", "paste", "GiB"] {
                assert!(!text.contains(control), "{f:?}: {text}");
            }
        }
    }

    #[test]
    fn a_link_value_refused_is_said_before_anything_is_drawn() {
        let (_, comp) = default_figures();
        let parsed = Plan::parse_query("model=llama-9-000b&method=lora");
        let c = caption(&parsed.plan, Model::Ready, &comp, &parsed.diagnostics);
        assert!(!c.shows_chart());
        assert!(
            c.text().starts_with(
                "This chart cannot be drawn: the link's model=`llama-9-000b` is not a known preset"
            ),
            "{c:?}"
        );
        let two = Plan::parse_query("b=0&theme=sepia");
        let c = caption(&two.plan, Model::Ready, &comp, &two.diagnostics);
        assert!(
            c.text()
                .starts_with("This chart cannot be drawn: the link's b=0 is out of range")
                && c.text().ends_with(" (and 1 more problem)."),
            "{c:?}"
        );
        // Even while a Hub model loads, a bad value is what the line says.
        let hub = Plan::parse_query("model=acme/x&r=0");
        let id = hub.plan.hub.clone().unwrap();
        let c = caption(&hub.plan, Model::Loading(&id), &comp, &hub.diagnostics);
        assert_eq!(c.state(), "problem", "{c:?}");
    }
}
