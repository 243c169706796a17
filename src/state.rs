//! The page's state: the plan context every component reads ([`Ctx`], provided once by [`provide`]), the planned
//! architecture ("pasted config, else preset"), the settled-plan effect for slow panels, and the one way controls
//! change the plan. It imports no component.

use crate::browser;
use crate::history::{Steps, Write};
use crate::planner::Computed;
use leptos::prelude::*;
use peakplan_core::{preset_arch, Architecture, Diagnostic, Parsed, Plan};

/// Shared page state, provided as context.
#[derive(Clone, Copy)]
pub(crate) struct Ctx {
    pub(crate) plan: RwSignal<Plan>,
    pub(crate) computed: Memo<Computed>,
    pub(crate) custom: RwSignal<Option<Architecture>>,
    /// When the current slider input started, for the latency figure.
    pub(crate) input_started: StoredValue<Option<f64>>,
    /// The plan an advisor card would make, and the card's label, while the card is hovered.
    pub(crate) preview: RwSignal<Option<(Plan, String)>>,
    /// Values the page could not use, shown in the `url-error` banner.
    pub(crate) refused: RwSignal<Refused>,
}

/// Values the page refused; the plan kept its other values (and, for these keys, its previous ones).
#[derive(Clone, Default)]
pub(crate) struct Refused {
    /// Bad query parameters of the link the page opened with.
    pub(crate) link: Vec<Diagnostic>,
    /// Values typed or picked in a control since.
    pub(crate) typed: Vec<Diagnostic>,
}

/// Makes the page state from the parsed link and provides it as context; the URL follows the plan from then on.
pub(crate) fn provide(parsed: Parsed) -> Ctx {
    let plan = RwSignal::new(parsed.plan);
    let custom: RwSignal<Option<Architecture>> = RwSignal::new(None);
    let preview: RwSignal<Option<(Plan, String)>> = RwSignal::new(None);
    let computed = Memo::new(move |_| {
        let p = plan.get();
        let c = custom.get();
        let arch = planned_arch(&c, &p);
        let mut comp = Computed::new(arch, &p);
        if let Some((after, change)) = preview.get() {
            comp.add_preview(arch, &after, &change);
        }
        comp
    });
    // The URL is the state, and the plan's history the browser's: a burst of changes (a slider drag) is one entry,
    // and Back or Forward restore the plan the URL then holds.
    let steps = StoredValue::new(Steps::default());
    Effect::new(move |_| {
        let query = plan.with(Plan::to_query);
        match steps.try_update_value(|s| s.write(&query, browser::now_ms())) {
            Some(Write::Push) => browser::write_query(&query, true),
            Some(Write::Replace) => browser::write_query(&query, false),
            _ => {}
        }
    });
    // Dropping the handle keeps the listener: the page lives as long as the tab.
    let _ = window_event_listener_untyped("popstate", move |_| {
        let restored = Plan::parse_query(&browser::query()).plan;
        steps.update_value(|s| s.restored(&restored.to_query()));
        preview.set(None);
        plan.set(restored);
    });
    let ctx = Ctx {
        plan,
        computed,
        custom,
        preview,
        input_started: StoredValue::new(None),
        refused: RwSignal::new(Refused {
            link: parsed.diagnostics,
            typed: Vec::new(),
        }),
    };
    provide_context(ctx);
    ctx
}

pub(crate) fn ctx() -> Ctx {
    use_context::<Ctx>().expect("App provides the context")
}

/// The planned model: the pasted config, else the plan's preset.
pub(crate) fn planned_arch<'a>(custom: &'a Option<Architecture>, plan: &Plan) -> &'a Architecture {
    custom.as_ref().unwrap_or_else(|| preset_arch(plan))
}

/// Runs `work` on the plan and its architecture (the pasted config, else the preset) `settle` after the last change,
/// and only while `active` holds: for panels whose searches run many estimates, kept off the slider's path.
pub(crate) fn on_settled_plan(
    settle: std::time::Duration,
    active: impl Fn() -> bool + 'static,
    work: impl Fn(&Architecture, &Plan) + Clone + 'static,
) {
    let c = ctx();
    let pending = StoredValue::new(None::<TimeoutHandle>);
    Effect::new(move |_| {
        if !active() {
            return;
        }
        let plan = c.plan.get();
        let custom = c.custom.get();
        if let Some(h) = pending.get_value() {
            h.clear();
        }
        let work = work.clone();
        let handle =
            set_timeout_with_handle(move || work(planned_arch(&custom, &plan), &plan), settle);
        pending.set_value(handle.ok());
    });
}

impl Ctx {
    /// Changes the plan with typed values, and starts the latency figure's clock.
    pub(crate) fn edit(self, change: impl FnOnce(&mut Plan)) {
        self.input_started.set_value(Some(browser::now_ms()));
        self.plan.update(change);
    }

    /// Applies a value that arrives as text (a select's key, a typed number), parsed once by the core. A refused
    /// value leaves the plan as it was and is listed in the page's error banner.
    pub(crate) fn set_text(self, key: &str, text: &str) {
        let mut refused = None;
        self.edit(|p| refused = p.set(key, text).err());
        match refused {
            Some(message) => {
                let key = key.to_string();
                self.refused
                    .update(|r| r.typed.push(Diagnostic { key, message }));
            }
            None => self.accepted(key),
        }
    }

    /// A value for `key` was taken: an earlier refusal of it no longer stands.
    pub(crate) fn accepted(self, key: &str) {
        if self
            .refused
            .with_untracked(|r| r.typed.iter().any(|d| d.key == key))
        {
            self.refused.update(|r| r.typed.retain(|d| d.key != key));
        }
    }

    /// Whether the planned model (the pasted config, else the preset) routes tokens to experts.
    pub(crate) fn is_moe(self) -> bool {
        self.custom
            .with(|custom| self.plan.with(|p| planned_arch(custom, p).experts > 1))
    }
}
