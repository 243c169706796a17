//! The planner page's components. State is one `Plan` signal; every figure comes from [`Computed`].

use crate::browser;
use crate::canvas::{paint_chart, paint_timeline, watch_size};
use crate::interop::{CopyAsCode, ImportConfig};
use crate::planner::{method_label, Computed};
use crate::scale::{self, Log2Scale};
use leptos::prelude::*;
use peakplan_chart::{chart_svg, Theme};
use peakplan_core::plan::{
    Alloc, Attn, DType, Framework, Loss, Method, MoeExperts, Optimizer, Peft, Precision, Quant,
    Targets,
};
use peakplan_core::units::{format_bytes, format_count};
use peakplan_core::{
    import_config, preset_arch, presets, Architecture, Category, Diagnostic, Kind, Plan, Target,
};
use wasm_bindgen::JsCast;

fn theme() -> Theme {
    if browser::prefers_dark() {
        Theme::DARK
    } else {
        Theme::LIGHT
    }
}

/// The whole page: the planner, or only the chart with `?embed=1`.
#[component]
pub fn App() -> impl IntoView {
    let parsed = Plan::parse_query(&browser::query());
    let plan = RwSignal::new(parsed.plan);
    let url_errors = RwSignal::new(parsed.diagnostics);
    let custom: RwSignal<Option<Architecture>> = RwSignal::new(None);
    let input_started = StoredValue::new(None::<f64>);
    let preview: RwSignal<Option<Plan>> = RwSignal::new(None);
    let computed = Memo::new(move |_| {
        let p = plan.get();
        let c = custom.get();
        let arch = planned_arch(&c, &p);
        let mut comp = Computed::new(arch, &p);
        if let Some(after) = preview.get() {
            comp.add_preview(arch, &after);
        }
        comp
    });
    // The URL is the state: every change replaces the query (no history entry per slider tick).
    Effect::new(move |_| browser::replace_query(&plan.with(Plan::to_query)));
    let embed = plan.get_untracked().embed;
    let ctx = Ctx {
        plan,
        computed,
        custom,
        preview,
        input_started,
    };
    provide_context(ctx);
    if embed {
        view! { <EmbedView/> }.into_any()
    } else {
        view! { <Planner url_errors=url_errors/> }.into_any()
    }
}

/// Shared page state, provided as context.
#[derive(Clone, Copy)]
pub(crate) struct Ctx {
    pub(crate) plan: RwSignal<Plan>,
    pub(crate) computed: Memo<Computed>,
    pub(crate) custom: RwSignal<Option<Architecture>>,
    /// When the current slider input started, for the latency figure.
    pub(crate) input_started: StoredValue<Option<f64>>,
    /// A suggestion's plan shown as an extra "after" bar while the pointer is on it.
    pub(crate) preview: RwSignal<Option<Plan>>,
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
    pub(crate) fn set(&self, key: &str, value: &str) {
        self.input_started.set_value(Some(browser::now_ms()));
        self.plan.update(|p| {
            // Controls only offer accepted values; a rejected one leaves the plan as it was.
            let _ = p.set(key, value);
        });
    }
}

/// The chart alone, sized to its container, with a one-line caption: for `<iframe>` embedding.
#[component]
fn EmbedView() -> impl IntoView {
    let c = ctx();
    let caption = move || {
        let comp = c.computed.get();
        let p = c.plan.get();
        format!(
            "{} · {} · b={} s={} · peak {} · peakplan",
            comp.model_name,
            method_label(p.method),
            p.micro_batch,
            p.seq_len,
            format_bytes(comp.selected.device_bytes)
        )
    };
    let link = move || {
        browser::url_with_query(&{
            let mut p = c.plan.get();
            p.embed = false;
            p.to_query()
        })
    };
    view! {
        <main class="embed">
            <ChartCanvas/>
            <p class="caption"><a href=link target="_blank" rel="noopener">{caption}</a></p>
        </main>
    }
}

#[component]
fn Planner(url_errors: RwSignal<Vec<Diagnostic>>) -> impl IntoView {
    view! {
        <header class="top">
            <h1>"peakplan"</h1>
            <p class="tagline">"Will this fine-tune fit on my GPU? Memory of one training step, part by part."</p>
        </header>
        <UrlErrors errors=url_errors/>
        <main class="layout">
            <section class="controls essentials" aria-label="Plan">
                <PlanEssentials/>
            </section>
            <section class="results" aria-label="Memory">
                <Verdict/>
                <ChartCanvas/>
                <crate::advisor::Advisor/>
                <crate::gpu_table::GpuTable/>
                <Figures/>
                <Timeline/>
                <crate::gpu::panel::GpuPanel
                    plan=ctx().plan
                    predict=Callback::new(|c: peakplan_core::micro::MicroConfig| peakplan_core::micro::predicted_peak_bytes(&c))/>
                <ShareBar/>
                <ComponentTable/>
                <crate::accuracy::Accuracy/>
            </section>
            <section class="controls settings" aria-label="Training settings">
                <PlanSettings/>
            </section>
        </main>
        <footer>
            <p>"Units: GiB = 2"<sup>"30"</sup>" bytes, as PyTorch and nvidia-smi report. Figures come from the peakplan core; the same numbers are in the CLI."</p>
        </footer>
    }
}

/// Messages for bad query parameters; the rest of the plan is kept.
#[component]
fn UrlErrors(errors: RwSignal<Vec<Diagnostic>>) -> impl IntoView {
    move || {
        let list = errors.get();
        (!list.is_empty()).then(|| {
            view! {
                <div class="url-error" role="alert" data-testid="url-error">
                    <strong>"Some link parameters were not understood; their defaults are used:"</strong>
                    <ul>{list.into_iter().map(|d| view! { <li>{d.message}</li> }).collect_view()}</ul>
                    <button on:click=move |_| errors.set(Vec::new())>"Dismiss"</button>
                </div>
            }
        })
    }
}

/// A log-scale slider over powers of two, with a number box for any value.
#[component]
fn LogSlider(
    label: &'static str,
    key: &'static str,
    testid: &'static str,
    scale: Log2Scale,
    #[prop(into)] value: Signal<u64>,
    #[prop(into)] disabled: Signal<Option<&'static str>>,
) -> impl IntoView {
    let c = ctx();
    let id = format!("in-{key}");
    let num_id = format!("num-{key}");
    let on_input = move |ev: leptos::ev::Event| {
        let Ok(pos) = event_target_value(&ev).parse::<u32>() else {
            return;
        };
        let v = scale.value(pos);
        // data-value is set at once as well, so scripts reading it right after the event see the new value.
        if let Some(el) = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        {
            let _ = el.set_attribute("data-value", &v.to_string());
        }
        c.set(key, &v.to_string());
    };
    let on_number = move |ev: leptos::ev::Event| {
        let text = event_target_value(&ev);
        c.set(key, text.trim());
    };
    view! {
        <div class="field slider" class:disabled=move || disabled.get().is_some()>
            <label for=id.clone()>{label}</label>
            <div class="slider-row">
                <input
                    type="range"
                    id=id
                    data-testid=testid
                    min=scale.min_exp
                    max=scale.max_exp
                    step="1"
                    prop:value=move || scale.position(value.get()).to_string()
                    data-value=move || value.get().to_string()
                    aria-valuetext=move || value.get().to_string()
                    disabled=move || disabled.get().is_some()
                    on:input=on_input
                />
                <input
                    type="number"
                    id=num_id
                    aria-label=format!("{label} (exact)")
                    min="1"
                    prop:value=move || value.get().to_string()
                    disabled=move || disabled.get().is_some()
                    on:change=on_number
                />
            </div>
            {move || disabled.get().map(|why| view! { <p class="why">{why}</p> })}
        </div>
    }
}

/// A `<select>` over a key's accepted values.
#[component]
fn KeySelect(
    label: &'static str,
    key: &'static str,
    options: Vec<(&'static str, &'static str)>,
    #[prop(optional, into)] disabled: Option<Signal<Option<&'static str>>>,
    /// What the choice means, shown as a tooltip so the option texts can stay short.
    #[prop(optional)]
    hint: Option<&'static str>,
) -> impl IntoView {
    let c = ctx();
    let disabled = disabled.unwrap_or_else(|| Signal::derive(|| None));
    // Memos, so that a slider move (which changes the plan) touches no option of a select it leaves as it is.
    let disabled = Memo::new(move |_| disabled.get());
    let value = Memo::new(move |_| c.plan.with(|p| p.get(key).unwrap_or_default()));
    let id = format!("sel-{key}");
    view! {
        <div class="field" class:disabled=move || disabled.get().is_some() title=hint>
            <label for=id.clone()>{label}</label>
            <select
                id=id
                data-testid=format!("select-{key}")
                disabled=move || disabled.get().is_some()
                on:change=move |ev| c.set(key, &event_target_value(&ev))
                prop:value=move || value.get()
            >
                {options
                    .into_iter()
                    .map(|(v, text)| {
                        view! {
                            <option value=v selected=move || value.with(|x| x == v)>
                                {text}
                            </option>
                        }
                    })
                    .collect_view()}
            </select>
            {move || disabled.get().map(|why| view! { <p class="why">{why}</p> })}
        </div>
    }
}

/// Why a LoRA setting is greyed out under full fine-tuning, if it is.
fn not_peft_reason(c: Ctx) -> Signal<Option<&'static str>> {
    Signal::derive(move || {
        c.plan
            .with(|p| p.method == Method::Full)
            .then_some("LoRA settings apply to LoRA and QLoRA, not full fine-tuning")
    })
}

/// The inputs that decide most of the answer, kept together so the verdict follows them on a narrow screen:
/// method, model, GPU, the three sliders and the LoRA targets.
#[component]
fn PlanEssentials() -> impl IntoView {
    let c = ctx();
    let method = Memo::new(move |_| c.plan.with(|p| p.method));
    let not_peft = not_peft_reason(c);
    let models: Vec<(&'static str, &'static str)> =
        presets::MODELS.iter().map(|m| (m.id, m.name)).collect();
    // The vendor prefix is the same for most cards.
    let gpus: Vec<(&'static str, &'static str)> = presets::GPUS
        .iter()
        .map(|g| {
            let short = g.name.strip_prefix("NVIDIA ").unwrap_or(g.name);
            (g.id, short.strip_prefix("GeForce ").unwrap_or(short))
        })
        .collect();
    view! {
        <fieldset class="method" data-testid="method">
            <legend>"Method"</legend>
            {Method::ALL
                .iter()
                .map(|m| {
                    let m = *m;
                    view! {
                        <label class="pill">
                            <input
                                type="radio"
                                name="method"
                                value=m.key()
                                prop:checked=move || method.get() == m
                                on:change=move |_| c.set("method", m.key())
                            />
                            <span>{method_label(m)}</span>
                        </label>
                    }
                })
                .collect_view()}
        </fieldset>
        <ModelPicker models=models/>
        <KeySelect label="GPU" key="gpu" options=gpus/>
        <LogSlider label="LoRA rank" key="r" testid="slider-rank" scale=scale::RANK
            value=Signal::derive(move || c.plan.with(|p| p.rank)) disabled=not_peft/>
        <LogSlider label="Micro-batch per GPU" key="b" testid="slider-batch" scale=scale::BATCH
            value=Signal::derive(move || c.plan.with(|p| p.micro_batch)) disabled=Signal::derive(|| None)/>
        <LogSlider label="Sequence length (tokens)" key="s" testid="slider-seq" scale=scale::SEQ
            value=Signal::derive(move || c.plan.with(|p| p.seq_len)) disabled=Signal::derive(|| None)/>
        <TargetPicker disabled=not_peft/>
    }
}

/// Every other switch of the plan (framework, precision, optimizer, memory savers, sharding), then the config
/// paste and import: below the answer on a narrow screen, under the essentials on a wide one.
#[component]
fn PlanSettings() -> impl IntoView {
    let c = ctx();
    let method = Memo::new(move |_| c.plan.with(|p| p.method));
    let not_peft = not_peft_reason(c);
    let not_virtual = Signal::derive(move || {
        c.plan
            .with(|p| p.method == Method::Full || !p.peft.uses_virtual_tokens())
            .then_some("Applies to prompt and prefix tuning only")
    });
    let not_qlora = Signal::derive(move || {
        (method.get() != Method::Qlora).then_some("Quantization settings apply to QLoRA only")
    });
    let not_chunked = Signal::derive(move || {
        c.plan
            .with(|p| p.loss != Loss::Chunked)
            .then_some("Applies to the chunked loss only")
    });
    let not_standard_loss = Signal::derive(move || {
        c.plan
            .with(|p| !p.returns_full_logits())
            .then_some("Applies to the HF and torchtune profiles' standard loss only")
    });
    let not_four_bit = Signal::derive(move || {
        not_qlora.get().or_else(|| {
            c.plan.with(|p| match p.quant {
                Quant::Int8 => Some("LLM.int8 has one scale per row, nothing to quantize twice"),
                Quant::Gptq4 | Quant::Gptq8 => {
                    Some("GPTQ keeps fp16 scales per group of 128 inputs, quantized once")
                }
                Quant::Nf4 | Quant::Fp4 => None,
            })
        })
    });
    let not_bnb = Signal::derive(move || {
        not_qlora.get().or_else(|| {
            c.plan
                .with(|p| p.quant.gptq_bits().is_some())
                .then_some("A bitsandbytes/torchao setting: a GPTQ checkpoint comes quantized and keeps its dequantized weight, not its input")
        })
    });
    let not_moe = Signal::derive(move || {
        not_qlora.get().or_else(|| {
            if !is_moe(c) {
                Some("The model has no MoE experts")
            } else if c.plan.with(|p| p.framework != Framework::Hf) {
                Some("litgpt and torchtune quantize one Linear per expert")
            } else {
                None
            }
        })
    });
    let single_gpu = Signal::derive(move || {
        c.plan
            .with(|p| p.gpus == 1)
            .then_some("Sharding needs more than one GPU")
    });
    let not_sharded = Signal::derive(move || {
        single_gpu.get().or_else(|| {
            c.plan
                .with(|p| p.split_layers)
                .then_some("The layers are split across the GPUs: nothing is sharded")
        })
    });
    let no_split = Signal::derive(move || {
        c.plan
            .with(|p| p.gpus == 1)
            .then_some("Splitting needs more than one GPU")
    });
    let kw = |all: &'static [&'static str]| all.iter().map(|k| (*k, *k)).collect::<Vec<_>>();
    let opts: Vec<&'static str> = Optimizer::ALL.iter().map(|o| o.key()).collect();
    let opts: &'static [&'static str] = Box::leak(opts.into_boxed_slice());
    view! {
        <div class="grid2">
            <KeySelect label="Gradient checkpointing" key="gc" options=vec![("1", "on"), ("0", "off")]/>
            <KeySelect label="Gradient accumulation" key="ga" options=vec![("1", "1 (none)"), ("2", "2"), ("4", "4"), ("8", "8"), ("16", "16"), ("32", "32")]/>
            <KeySelect label="Activation offloading" key="aoff" options=vec![("0", "off"), ("1", "on (torchtune)")]/>
            <KeySelect label="Optimizer in backward" key="oib" options=vec![("0", "off"), ("1", "on (torchtune)")]
                hint="torchtune optimizer_in_bwd: each parameter steps as soon as its gradient is ready, and the gradient is freed."/>
            <KeySelect label="Logits kept through the step" key="hold" options=vec![("0", "no (Trainer)"), ("16", "16-bit"), ("32", "fp32")] disabled=not_standard_loss
                hint="A training loop that keeps the model's output until after the optimizer step holds its logits through backward: fsdp_qlora's (fp32 under transformers 4.36 to 4.44), and torchtune's recipes before mid-2024 (fp32)."/>
            <KeySelect label="Allocator cache" key="alloc" options=vec![(Alloc::Cached.key(), "warm (default)"), (Alloc::Emptied.key(), "emptied"), (Alloc::Expandable.key(), "expandable")]
                hint="What PyTorch's caching allocator holds at the peak step, which sets reserved memory (and nvidia-smi) against allocated. Warm: blocks freed by earlier steps stay cached, and about one largest transient block cannot serve the peak. Emptied: torch.cuda.empty_cache() just before the peak step. Expandable: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reuses freed memory instead of stranding it."/>
            <KeySelect label="Attention" key="attn" options=vec![(Attn::Sdpa.key(), "SDPA"), (Attn::Flash.key(), "Flash"), (Attn::Eager.key(), "Eager (s² scores)")]/>
            <KeySelect label="Loss" key="loss" options=vec![(Loss::Standard.key(), "standard"), (Loss::Chunked.key(), "chunked"), (Loss::Fused.key(), "fused linear CE"), (Loss::Kernel.key(), "kernel (unsloth)")]/>
            <ChunkInput disabled=not_chunked/>
            <KeySelect label="Optimizer" key="opt" options=kw(opts)/>
            <KeySelect label="Precision" key="prec" options=vec![(Precision::AmpBf16.key(), "AMP bf16"), (Precision::AmpFp16.key(), "AMP fp16"), (Precision::Bf16.key(), "pure bf16"), (Precision::Fp16.key(), "pure fp16"), (Precision::Fp32.key(), "fp32")]
                hint="AMP: autocast over fp32 master weights for a full fine-tune. Pure: everything in 16-bit."/>
            <KeySelect label="PEFT method" key="peft" options=vec![(Peft::Lora.key(), "LoRA"), (Peft::Rslora.key(), "rsLoRA"), (Peft::Dora.key(), "DoRA"), (Peft::Lorafa.key(), "LoRA-FA (A frozen)"), (Peft::Ia3.key(), "(IA)³"), (Peft::Vera.key(), "VeRA"), (Peft::Loha.key(), "LoHa"), (Peft::Oft.key(), "OFT (r blocks)"), (Peft::Ln.key(), "LayerNorm tuning"), (Peft::Prompt.key(), "Prompt tuning"), (Peft::Prefix.key(), "Prefix tuning")] disabled=not_peft/>
            <KeySelect label="Virtual tokens" key="vt" options=vec![("8", "8"), ("20", "20"), ("50", "50"), ("100", "100"), ("200", "200")] disabled=not_virtual/>
            <KeySelect label="Adapter dtype" key="adtype" options=vec![(DType::Fp32.key(), "fp32 (PEFT)"), (DType::Bf16.key(), "bf16"), (DType::Fp16.key(), "fp16")] disabled=not_peft/>
            <KeySelect label="LoRA dropout" key="dropout" options=vec![("0", "0"), ("0.05", "0.05"), ("0.1", "0.1")] disabled=not_peft/>
            <KeySelect label="Quantized base" key="quant" options=vec![(Quant::Nf4.key(), "4-bit NF4"), (Quant::Fp4.key(), "4-bit FP4"), (Quant::Int8.key(), "8-bit LLM.int8"), (Quant::Gptq4.key(), "GPTQ 4-bit"), (Quant::Gptq8.key(), "GPTQ 8-bit")] disabled=not_qlora
                hint="bitsandbytes 4-bit (load_in_4bit) or LLM.int8 (load_in_8bit) base weights under the adapters, or a GPTQ checkpoint (auto-gptq, groups of 128), which dequantizes each weight to 16-bit for its matmul and keeps that copy for backward."/>
            <KeySelect label="Double quantization" key="dq" options=vec![("1", "on"), ("0", "off")] disabled=not_four_bit/>
            <KeySelect label="fp32 frozen base" key="upcast" options=vec![("0", "off"), ("1", "on")] disabled=not_peft
                hint="QLoRA: prepare_model_for_kbit_training casts the non-quantized parameters to fp32. LoRA: the whole base stays fp32 under autocast; with ZeRO-3 its shards stay fp32 and layers are gathered in 16-bit."/>
            <KeySelect label="4-bit layers keep inputs" key="qsave" options=vec![("0", "no (bnb ≥ 0.45)"), ("1", "yes (bnb ≤ 0.44)")] disabled=not_bnb
                hint="bitsandbytes up to 0.44 kept each 4-bit matmul's input for backward; later releases keep none."/>
            <KeySelect label="Quantizer at load" key="qload" options=vec![("0", "chunked"), ("1", "wide (torchao < 5/2024)")] disabled=not_bnb
                hint="Chunked: bitsandbytes and torchao from May 2024. Wide: torchao's earlier NF4 quantizer compared every weight of a matrix with the 16 NF4 values at once."/>
            <KeySelect label="MoE experts" key="moe" options=vec![(MoeExperts::Fused.key(), "3D (v5+)"), (MoeExperts::Linear.key(), "per expert (v4)")] disabled=not_moe
                hint="transformers 5 stores each MoE layer's experts as 3D parameters, which bitsandbytes leaves 16-bit (fp32 once upcast); one Linear per expert (transformers 4, Unsloth's checkpoints) is quantized."/>
            <FrameworkSelect/>
            <KeySelect label="GPUs" key="gpus" options=vec![("1", "1"), ("2", "2"), ("4", "4"), ("8", "8"), ("16", "16"), ("64", "64")]/>
            <KeySelect label="Layers split across GPUs" key="split" options=vec![("0", "no"), ("1", "yes (device_map)")] disabled=no_split
                hint="device_map=\"auto\" puts a slice of the layers on each GPU, and they run one after another: no data parallelism, no sharding. The last GPU also holds the head and the logits."/>
            <KeySelect label="ZeRO / FSDP stage" key="zero" options=vec![("0", "0 (DDP)"), ("1", "1: optimizer"), ("2", "2: + gradients"), ("3", "3: + weights")] disabled=not_sharded/>
            <KeySelect label="CPU offload" key="cpuoff" options=vec![("0", "off"), ("1", "on")]
                hint="Optimizer states (and the weights at stage 3) wait in CPU memory."/>
        </div>
        <ConfigPaste/>
        <ImportConfig/>
    }
}

/// The framework profile: choosing one also sets that framework's default adapter dtype.
#[component]
fn FrameworkSelect() -> impl IntoView {
    let c = ctx();
    let framework = Memo::new(move |_| c.plan.with(|p| p.framework));
    view! {
        <div class="field">
            <label for="sel-fw">"Framework profile"</label>
            <select id="sel-fw" data-testid="select-fw"
                on:change=move |ev| {
                    if let Some(fw) = Framework::from_key(&event_target_value(&ev)) {
                        c.input_started.set_value(Some(browser::now_ms()));
                        c.plan.update(|p| fw.apply_defaults(p));
                    }
                }
                prop:value=move || framework.get().key()>
                {[(Framework::Hf, "HF + PEFT"), (Framework::Torchtune, "torchtune"), (Framework::Litgpt, "litgpt")]
                    .into_iter()
                    .map(|(f, label)| view! { <option value=f.key() selected=move || framework.get() == f>{label}</option> })
                    .collect_view()}
            </select>
        </div>
    }
}

/// Model preset list with a filter box.
#[component]
fn ModelPicker(models: Vec<(&'static str, &'static str)>) -> impl IntoView {
    let c = ctx();
    let filter = RwSignal::new(String::new());
    let models = StoredValue::new(models);
    // The model alone: read through the whole plan, every slider move would rebuild the option list.
    let model = Memo::new(move |_| c.plan.with(|p| p.model.clone()));
    view! {
        <div class="field">
            <label for="model-filter">"Model"</label>
            <input id="model-filter" type="search" placeholder="Filter presets…" aria-label="Filter model presets"
                on:input=move |ev| filter.set(event_target_value(&ev).to_lowercase())/>
            <select id="sel-model" data-testid="select-model" aria-label="Model preset"
                disabled=move || c.custom.with(Option::is_some)
                on:change=move |ev| c.set("model", &event_target_value(&ev))
                prop:value=move || model.get()>
                {move || {
                    let f = filter.get();
                    let current = model.get();
                    models
                        .get_value()
                        .into_iter()
                        .filter(|(id, name)| f.is_empty() || id.contains(&f) || name.to_lowercase().contains(&f) || *id == current)
                        .map(|(id, name)| {
                            let params = presets::model_arch(id).map(|a| format_count(a.total_params())).unwrap_or_default();
                            view! { <option value=id selected=move || model.with(|m| m == id)>{format!("{name} ({params})")}</option> }
                        })
                        .collect_view()
                }}
            </select>
        </div>
    }
}

/// LoRA target modules as checkboxes, with an "all linear" shortcut.
#[component]
fn TargetPicker(#[prop(into)] disabled: Signal<Option<&'static str>>) -> impl IntoView {
    let c = ctx();
    let targets = Memo::new(move |_| c.plan.with(|p| p.targets));
    view! {
        <fieldset class="targets" class:disabled=move || disabled.get().is_some()>
            <legend>"LoRA targets"</legend>
            {Target::ALL
                .iter()
                .map(|t| {
                    let t = *t;
                    view! {
                        <label class="chip">
                            <input type="checkbox" prop:checked=move || targets.get().contains(t)
                                disabled=move || disabled.get().is_some()
                                on:change=move |ev| {
                                    let on = event_target_checked(&ev);
                                    let next = targets.get_untracked().with(t, on);
                                    if next.0 != 0 {
                                        c.set("targets", &next.key());
                                    }
                                }/>
                            <span>{t.key()}</span>
                        </label>
                    }
                })
                .collect_view()}
            <button class="link" disabled=move || disabled.get().is_some()
                on:click=move |_| c.set("targets", &Targets::ALL_LINEAR.key())>"all-linear"</button>
            {move || disabled.get().map(|why| view! { <p class="why">{why}</p> })}
            {move || experts_as_parameters(c).then(|| view! {
                <p class="why" data-testid="moe-targets-note">"gate, up and down adapt every expert: transformers 5 stores them as 3D parameters, which PEFT reaches through target_parameters (a dense W + BA per layer); its all-linear leaves them out"</p>
            })}
        </fieldset>
    }
}

/// Whether the planned model (the pasted config, else the preset) routes tokens to experts.
fn is_moe(c: Ctx) -> bool {
    c.custom
        .with(|custom| c.plan.with(|p| planned_arch(custom, p).experts > 1))
}

/// A LoRA plan on an MoE model under transformers whose experts are 3D parameters, with expert targets checked.
fn experts_as_parameters(c: Ctx) -> bool {
    c.plan.with(|p| {
        p.method != Method::Full
            && p.experts_are_parameters()
            && [Target::Gate, Target::Up, Target::Down]
                .iter()
                .any(|t| p.targets.contains(*t))
    }) && is_moe(c)
}

#[component]
fn ChunkInput(#[prop(into)] disabled: Signal<Option<&'static str>>) -> impl IntoView {
    let c = ctx();
    view! {
        <div class="field" class:disabled=move || disabled.get().is_some()>
            <label for="num-chunk">"Loss chunk (tokens)"</label>
            <input id="num-chunk" type="number" min="1" prop:value=move || c.plan.with(|p| p.chunk.to_string())
                disabled=move || disabled.get().is_some()
                on:change=move |ev| c.set("chunk", event_target_value(&ev).trim())/>
        </div>
    }
}

/// Paste a Hugging Face `config.json` to plan for a model that is not bundled.
#[component]
fn ConfigPaste() -> impl IntoView {
    let c = ctx();
    let text = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let apply = move |_| match import_config(&text.get_untracked()) {
        Ok(a) => {
            error.set(None);
            c.custom.set(Some(a));
        }
        // The current plan stays as it was; only the message changes.
        Err(e) => error.set(Some(e.to_string())),
    };
    view! {
        <details class="config">
            <summary>"Use a Hugging Face config.json"</summary>
            <textarea rows="6" aria-label="config.json" data-testid="config-input" placeholder="{\"model_type\": \"llama\", …}"
                on:input=move |ev| text.set(event_target_value(&ev))></textarea>
            <div class="row">
                <button data-testid="config-apply" on:click=apply>"Use this config"</button>
                {move || c.custom.with(Option::is_some).then(|| view! {
                    <button on:click=move |_| c.custom.set(None)>"Back to the preset"</button>
                })}
            </div>
            {move || error.get().map(|e| view! { <p class="error" role="alert" data-testid="config-error">{e}</p> })}
            {move || c.custom.get().map(|a| view! {
                <p class="note">{format!("Planning for the pasted {} model ({} params). The link holds the other settings, not the pasted config.", a.model_type, format_count(a.total_params()))}</p>
            })}
        </details>
    }
}

#[component]
fn Verdict() -> impl IntoView {
    let c = ctx();
    move || {
        let comp = c.computed.get();
        let p = c.plan.get();
        // Beyond u64 the engine saturates rather than wrapping: say so instead of printing a clamped figure.
        let need = if comp.selected.saturated {
            "more than 16 EiB (beyond what the arithmetic holds)".to_string()
        } else {
            format_bytes(comp.selected.device_bytes)
        };
        let (class, text) = match comp.fits() {
            Some(true) => (
                "verdict fits",
                format!(
                    "Fits: needs {need} of the {}'s {}",
                    comp.gpu_name,
                    format_bytes(comp.capacity_bytes.unwrap_or(0))
                ),
            ),
            Some(false) => (
                "verdict nofit",
                format!(
                    "Does not fit: needs {need}, the {} has {}",
                    comp.gpu_name,
                    format_bytes(comp.capacity_bytes.unwrap_or(0))
                ),
            ),
            None => ("verdict", format!("Needs {need}")),
        };
        let limits = match (comp.max_batch, comp.max_seq) {
            (Some(b), Some(s)) => format!("Largest micro-batch that fits at s={}: {b}. Longest sequence at b={}: {s} tokens.", p.seq_len, p.micro_batch),
            (None, Some(s)) => format!("No micro-batch fits at s={}; longest sequence at b=1: {s} tokens.", p.seq_len),
            _ => format!(
                "Not even batch 1 at sequence 1 fits this GPU: try {}more GPUs with ZeRO-3, or a larger GPU (\"On other GPUs\" below counts them).",
                if p.method == Method::Qlora { "" } else { "QLoRA, " }
            ),
        };
        view! {
            <div class=class data-testid="verdict" role="status">
                <p class="big">{text}</p>
                <p>{limits}</p>
                <p class="model">{format!("{} · {} params · {} trainable · peak during {}", comp.model_name, format_count(comp.selected.total_params), format_count(comp.selected.trainable_params), comp.selected.peak_phase_label())}</p>
            </div>
        }
    }
}

trait PeakLabel {
    fn peak_phase_label(&self) -> &'static str;
}
impl PeakLabel for peakplan_core::Estimate {
    fn peak_phase_label(&self) -> &'static str {
        self.peak_phase.label()
    }
}

/// The laid-out size of `canvas`, kept by a `ResizeObserver` once the element exists (see `watch_size`).
fn watched_size(canvas: NodeRef<leptos::html::Canvas>) -> RwSignal<Option<(u32, u32)>> {
    let size = RwSignal::new(None);
    Effect::new(move |_| {
        if let Some(el) = canvas.get() {
            watch_size(&el, size);
        }
    });
    size
}

/// The stacked bars, repainted whenever the plan changes.
#[component]
fn ChartCanvas() -> impl IntoView {
    let c = ctx();
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    let size = watched_size(canvas);
    Effect::new(move |_| {
        let comp = c.computed.get();
        let Some(size) = size.get() else {
            return;
        };
        if let Some(el) = canvas.get_untracked() {
            paint_chart(&el, size, &comp.chart, &theme());
            browser::mark_first_paint();
            if let Some(t0) = c.input_started.get_value() {
                browser::record_timing(browser::now_ms() - t0);
                c.input_started.set_value(None);
            }
        }
    });
    let tip = RwSignal::new(
        None::<(
            i32,
            i32,
            String,
            String,
            Vec<(String, String, &'static str)>,
        )>,
    );
    // The tooltip for segment `seg` of bar `i`, placed at (x, y) on the canvas.
    let tip_for = move |i: usize, seg: peakplan_chart::Segment, x: i32, y: i32| {
        c.computed.with_untracked(|comp| {
            let e = comp.by_method.get(i).or(comp.preview_estimate.as_ref())?;
            let parts = Kind::ALL
                .iter()
                .filter(|k| k.category() == seg.category && e.component(**k) > 0)
                .map(|k| {
                    (
                        k.label().to_string(),
                        format_bytes(e.component(*k)),
                        k.formula(),
                    )
                })
                .collect::<Vec<_>>();
            let head = format!(
                "{} · {}",
                comp.chart.bars.get(i)?.label,
                seg.category.label()
            );
            let value = format!(
                "{} at the peak ({} bytes)",
                format_bytes(seg.bytes),
                seg.bytes
            );
            Some((x, y, head, value, parts))
        })
    };
    let layout = move || {
        let el = canvas.get_untracked()?;
        c.computed
            .with_untracked(|comp| peakplan_chart::layout(&comp.chart, el.width(), el.height()))
    };
    let on_move = move |ev: leptos::ev::MouseEvent| {
        let (x, y) = (ev.offset_x() as i32, ev.offset_y() as i32);
        tip.set(
            layout()
                .and_then(|l| l.hit(x, y))
                .and_then(|(i, seg)| tip_for(i, seg, x, y)),
        );
    };
    // Keyboard: the chart is focusable; arrows walk the segments (left/right across bars, up/down within one).
    let focused = StoredValue::new((0usize, 0usize));
    let show_focused = move || {
        let Some(l) = layout() else { return };
        let (mut bi, mut si) = focused.get_value();
        bi = bi.min(l.bars.len().saturating_sub(1));
        let Some(bar) = l.bars.get(bi) else { return };
        si = si.min(bar.segments.len().saturating_sub(1));
        focused.set_value((bi, si));
        if let Some(seg) = bar.segments.get(si) {
            tip.set(tip_for(bi, *seg, bar.x1, (seg.y0 + seg.y1) / 2));
        }
    };
    let on_key = move |ev: leptos::ev::KeyboardEvent| {
        let (bi, si) = focused.get_value();
        let next = match ev.key().as_str() {
            "ArrowRight" => (bi + 1, 0),
            "ArrowLeft" => (bi.saturating_sub(1), 0),
            "ArrowUp" => (bi, si + 1),
            "ArrowDown" => (bi, si.saturating_sub(1)),
            "Escape" => {
                tip.set(None);
                return;
            }
            _ => return,
        };
        ev.prevent_default();
        focused.set_value(next);
        show_focused();
    };
    view! {
        <figure class="chart">
            {move || tip.get().map(|(x, y, head, value, parts)| view! {
                <div class="tip" data-testid="chart-tip" role="tooltip" style=format!("left:{}px;top:{}px", x + 14, y + 14)>
                    <strong>{head}</strong>
                    <div>{value}</div>
                    <ul>{parts.into_iter().map(|(l, b, f)| view! { <li><b>{l}</b>" "{b}": "{f}</li> }).collect_view()}</ul>
                </div>
            })}
            <canvas node_ref=canvas data-testid="chart" role="img" tabindex="0"
                on:mousemove=on_move on:mouseleave=move |_| tip.set(None)
                on:focus=move |_| show_focused() on:blur=move |_| tip.set(None) on:keydown=on_key
                aria-label=move || {
                    let comp = c.computed.get();
                    comp.chart.bars.iter().map(|b| format!("{}: {}", b.label, format_bytes(b.parts.total()))).collect::<Vec<_>>().join(", ")
                }></canvas>
        </figure>
    }
}

#[component]
fn Figures() -> impl IntoView {
    let c = ctx();
    let fig = move |testid: &'static str,
                    label: &'static str,
                    get: fn(&peakplan_core::Estimate) -> u64| {
        let bytes = Memo::new(move |_| c.computed.with(|comp| get(&comp.selected)));
        view! {
            <div class="figure" data-testid=testid data-bytes=move || bytes.get().to_string()>
                <span class="label">{label}</span>
                <span class="value">{move || format_bytes(bytes.get())}</span>
            </div>
        }
    };
    view! {
        <div class="figures">
            {fig("value-weights", "Weights", |e| e.category(Category::Weights))}
            {fig("value-gradients", "Gradients", |e| e.category(Category::Gradients))}
            {fig("value-optimizer", "Optimizer states", |e| e.category(Category::Optimizer))}
            {fig("value-activations", "Activations", |e| e.category(Category::Activations))}
            {fig("value-peak", "Peak (nvidia-smi)", |e| e.device_bytes)}
            {fig("value-allocated", "max_memory_allocated", |e| e.peak_allocated_bytes)}
            {fig("value-reserved", "max_memory_reserved", |e| e.peak_reserved_bytes)}
        </div>
    }
}

#[component]
fn Timeline() -> impl IntoView {
    let c = ctx();
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    let size = watched_size(canvas);
    Effect::new(move |_| {
        let comp = c.computed.get();
        let Some(size) = size.get() else {
            return;
        };
        if let Some(el) = canvas.get_untracked() {
            paint_timeline(&el, size, &comp.selected, &theme());
        }
    });
    view! {
        <figure class="timeline">
            <figcaption>"When the peak happens: live memory through one step"</figcaption>
            <canvas node_ref=canvas data-testid="timeline" role="img"
                aria-label=move || c.computed.with(|comp| format!("peak during {}", comp.selected.peak_phase.label()))></canvas>
        </figure>
    }
}

#[component]
fn ShareBar() -> impl IntoView {
    let c = ctx();
    let copied = RwSignal::new("");
    let copy_link = move |_| {
        browser::copy(&browser::url_with_query(&c.plan.with(Plan::to_query)));
        copied.set("Link copied");
    };
    let copy_embed = move |_| {
        let mut p = c.plan.get_untracked();
        p.embed = true;
        let url = browser::url_with_query(&p.to_query());
        browser::copy(&format!(
            "<iframe src=\"{url}\" width=\"720\" height=\"420\" style=\"border:0\" title=\"peakplan memory chart\" loading=\"lazy\"></iframe>"
        ));
        copied.set("Embed code copied");
    };
    let download = move |_| {
        let svg = c
            .computed
            .with_untracked(|comp| chart_svg(&comp.chart, &Theme::LIGHT, (720, 420)));
        match browser::download("peakplan-chart.svg", "image/svg+xml", &svg) {
            Ok(()) => copied.set("SVG downloaded"),
            Err(_) => copied.set("The download could not start"),
        }
    };
    view! {
        <div class="share">
            <button data-testid="copy-link" on:click=copy_link>"Copy link"</button>
            <button data-testid="copy-embed" on:click=copy_embed>"Copy embed code"</button>
            <button data-testid="download-svg" on:click=download>"Download SVG"</button>
            <span class="status" role="status">{move || copied.get()}</span>
            <CopyAsCode/>
        </div>
    }
}

#[component]
fn ComponentTable() -> impl IntoView {
    let c = ctx();
    view! {
        <details class="components" open>
            <summary>"Every component, with its formula"</summary>
            <table data-testid="components">
                <thead><tr><th>"Component"</th><th>"Category"</th><th class="num">"Bytes"</th><th>"How it is computed"</th></tr></thead>
                <tbody>
                    {move || {
                        let comp = c.computed.get();
                        Kind::ALL
                            .iter()
                            .filter(|k| comp.selected.component(**k) > 0)
                            .map(|k| {
                                let b = comp.selected.component(*k);
                                view! {
                                    <tr>
                                        <td>{k.label()}</td>
                                        <td>{k.category().label()}</td>
                                        <td class="num" title=b.to_string()>{format_bytes(b)}</td>
                                        <td class="formula">{k.formula()}</td>
                                    </tr>
                                }
                            })
                            .collect_view()
                    }}
                </tbody>
            </table>
        </details>
    }
}
