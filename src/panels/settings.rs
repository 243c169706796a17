//! Every other switch of the plan (framework, precision, optimizer, memory savers, sharding), the loss chunk, and
//! the config paste and import.

use crate::panels::controls::{not_peft_reason, AutoInput, KeySelect, NumberBox};
use crate::panels::deepspeed::DeepSpeedSettings;
use crate::panels::interop::ImportConfig;
use crate::state::ctx;
use leptos::prelude::*;
use peakplan_core::import_config;
use peakplan_core::plan::{
    Alloc, Attn, DType, DatasetLengths, Framework, GradSync, Loss, Method, MoeExperts, Optimizer,
    Overlong, Peft, Precision, Quant, Shard, Wrap,
};
use peakplan_core::profile::Profile;
use peakplan_core::units::format_count;

/// Every other switch of the plan (framework, precision, optimizer, memory savers, sharding), then the config
/// paste and import: below the answer on a narrow screen, under the essentials on a wide one.
#[component]
pub(crate) fn PlanSettings() -> impl IntoView {
    let c = ctx();
    let method = Memo::new(move |_| c.steady.with(|p| p.method));
    let not_peft = not_peft_reason(c);
    let not_virtual = crate::state::memo(move || {
        c.steady
            .with(|p| p.method == Method::Full || !p.peft.uses_virtual_tokens())
            .then_some("Applies to prompt and prefix tuning only")
    });
    let not_qlora = crate::state::memo(move || {
        (method.get() != Method::Qlora).then_some("Quantization settings apply to QLoRA only")
    });
    let not_chunked = crate::state::memo(move || {
        c.steady
            .with(|p| p.loss != Loss::Chunked)
            .then_some("Applies to the chunked loss only")
    });
    let fixed_lengths = crate::state::memo(move || {
        c.steady
            .with(|p| !p.lengths.varies())
            .then_some("Applies where batch lengths vary (padded or grouped)")
    });
    let holding = hold_applies();
    let not_standard_loss = crate::state::memo(move || {
        c.steady
            .with(|p| !p.returns_full_logits())
            .then_some(holding)
    });
    let not_four_bit = crate::state::memo(move || {
        not_qlora.get().or_else(|| {
            c.steady.with(|p| match p.quant {
                Quant::Int8 => Some("LLM.int8 has one scale per row, nothing to quantize twice"),
                Quant::Gptq4 | Quant::Gptq8 => {
                    Some("GPTQ keeps fp16 scales per group of 128 inputs, quantized once")
                }
                Quant::Nf4 | Quant::Fp4 => None,
            })
        })
    });
    let not_bnb = crate::state::memo(move || {
        not_qlora.get().or_else(|| {
            c.steady
                .with(|p| p.quant.gptq_bits().is_some())
                .then_some("A bitsandbytes/torchao setting: a GPTQ checkpoint comes quantized and keeps its dequantized weight, not its input")
        })
    });
    let not_moe = crate::state::memo(move || {
        not_qlora.get().or_else(|| {
            if !c.is_moe() {
                Some("The model has no MoE experts")
            } else if c
                .plan
                .with(|p| !Profile::of(p.framework).expert_storage_from_plan)
            {
                Some("This framework profile quantizes one Linear per expert")
            } else {
                None
            }
        })
    });
    let single_gpu = crate::state::memo(move || {
        c.steady
            .with(|p| p.gpus == 1)
            .then_some("Sharding needs more than one GPU")
    });
    let not_sharded = crate::state::memo(move || {
        single_gpu.get().or_else(|| {
            c.steady
                .with(|p| p.split_layers)
                .then_some("The layers are split across the GPUs: nothing is sharded")
        })
    });
    let not_fsdp1_peft = crate::state::memo(move || {
        not_sharded.get().or_else(|| not_peft.get()).or_else(|| {
            c.steady
                .with(|p| p.sharding().shard != Shard::Fsdp1)
                .then_some("Applies to FSDP1 only")
        })
    });
    let no_split = crate::state::memo(move || {
        c.steady
            .with(|p| p.gpus == 1)
            .then_some("Splitting needs more than one GPU")
    });
    let kw = |all: &'static [&'static str]| all.iter().map(|k| (*k, *k)).collect::<Vec<_>>();
    let opts: Vec<&'static str> = Optimizer::ALL.iter().map(|o| o.key()).collect();
    let opts: &'static [&'static str] = Box::leak(opts.into_boxed_slice());
    let [auto_shard, auto_wrap, auto_sync] = auto_options();
    view! {
        <div class="grid2">
            <KeySelect label="Gradient checkpointing" key="gc" options=vec![("1", "on"), ("0", "off"), ("offload", "on, inputs to CPU (Unsloth)")]
                hint="Unsloth's checkpointing sends each layer's input to pinned CPU memory (from 512 tokens, on one GPU) and brings it back for backward: the host needs that memory instead."/>
            <KeySelect label="Gradient accumulation" key="ga" options=vec![("1", "1 (none)"), ("2", "2"), ("4", "4"), ("8", "8"), ("16", "16"), ("32", "32")]/>
            <KeySelect label="Activation offloading" key="aoff" options=vec![("0", "off"), ("1", "on (torchtune)")]/>
            <KeySelect label="Optimizer in backward" key="oib" options=vec![("0", "off"), ("1", "on (torchtune)")]
                hint="torchtune optimizer_in_bwd: each parameter steps as soon as its gradient is ready, and the gradient is freed."/>
            <KeySelect label="Logits kept through the step" key="hold" options=vec![("0", "no (Trainer)"), ("16", "16-bit"), ("32", "fp32")] disabled=not_standard_loss
                hint="A training loop that keeps the model's output until after the optimizer step holds its logits through backward: fsdp_qlora's (fp32 under transformers 4.36 to 4.44), and torchtune's recipes before mid-2024 (fp32)."/>
            <KeySelect label="Allocator cache" key="alloc" options=vec![(Alloc::Cached.key(), "warm (default)"), (Alloc::Emptied.key(), "emptied"), (Alloc::Expandable.key(), "expandable")]
                hint="How PyTorch's caching allocator runs, which sets reserved memory (and nvidia-smi) against allocated: the step is replayed through a simulator of it. Warm: the cache the first step left serves the second. Emptied: torch.cuda.empty_cache() just before the measured step. Expandable: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True maps pages as needed, so freed memory is reused instead of stranded."/>
            <AutoInput label="max_split_size_mb" key="msplit" disabled=Signal::derive(|| None) placeholder=Signal::derive(|| "auto (no limit)".to_string())
                hint="PYTORCH_CUDA_ALLOC_CONF's max_split_size_mb: cached blocks of this many MiB or more are never split for a smaller tensor (and are freed first when the card is full). Usually it costs memory; the advisor offers it where the replay says it saves. Empty: PyTorch's default, no limit; PyTorch refuses 20 and less."/>
            <KeySelect label="Batch lengths" key="lens" options=vec![("fixed", "every batch b × s"), ("padded", "padded per batch"), ("packed", "packed rows of s"), ("grouped", "grouped by length")]
                hint="Without packing each batch is padded to its own longest sequence and lengths change every step; the allocator keeps segments sized for earlier batches. Allocated memory is the longest batch's; reserved memory is the mean of four replayed runs of 16 steps, at lengths drawn from the mean, deviation and longest below."/>
            <LengthInput label="Mean length (tokens)" key="lmean" disabled=fixed_lengths/>
            <LengthInput label="Length deviation (tokens)" key="lsd" disabled=fixed_lengths/>
            <LengthInput label="Longest sequence (tokens)" key="lmax" disabled=fixed_lengths/>
            <KeySelect label="Longer sequences" key="ltrunc" options=vec![(Overlong::Cut.key(), "cut to the longest"), (Overlong::Drop.key(), "dropped")] disabled=fixed_lengths
                hint="What becomes of the dataset's sequences longer than the longest above: cut to it (the tokenizer's truncation, as the Trainer's and TRL's max_length do), or dropped before training (ms-swift's default truncation_strategy='delete'). Dropped, fewer batches are exactly the longest, so more of them are longer than every batch before them, and each of those leaves new segments cached."/>
            <DatasetLengthsInput/>
            <KeySelect label="Attention" key="attn" options=vec![(Attn::Sdpa.key(), "SDPA"), (Attn::Flash.key(), "Flash"), (Attn::Eager.key(), "Eager (s² scores)")]/>
            <KeySelect label="Loss" key="loss" options=vec![(Loss::Standard.key(), "standard"), (Loss::Chunked.key(), "chunked"), (Loss::Fused.key(), "fused linear CE"), (Loss::Kernel.key(), "kernel (unsloth)")]/>
            <NumberBox label="Loss chunk (tokens)" key="chunk" min="1" disabled=not_chunked/>
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
            <KeySelect label="Layers split across GPUs" key="split" options=vec![("0", "no"), ("1", "yes (device_map)")] disabled=no_split
                hint="device_map=\"auto\" puts a slice of the layers on each GPU, and they run one after another: no data parallelism, no sharding. The last GPU also holds the head and the logits."/>
            <KeySelect label="ZeRO / FSDP stage" key="zero" options=vec![("0", "0 (DDP)"), ("1", "1: optimizer"), ("2", "2: + gradients"), ("3", "3: + weights")] disabled=not_sharded/>
            <KeySelect label="Sharding" key="shard" testid="shard" options=vec![("auto", auto_shard), ("fsdp1", "FSDP1"), ("fsdp2", "FSDP2"), ("deepspeed", "DeepSpeed")] disabled=not_sharded/>
            <KeySelect label="FSDP1 units" key="wrap" testid="wrap" options=vec![("auto", auto_wrap), ("block", "blocks with adapters (mixed)"), ("lora", "adapters apart (PEFT)")] disabled=not_fsdp1_peft/>
            <KeySelect label="Gradient sync" key="gsync" testid="gsync" options=vec![("auto", auto_sync), ("0", "no_sync (whole gradients)"), ("1", "every micro-batch")] disabled=not_sharded/>
            <KeySelect label="CPU offload" key="cpuoff" options=vec![("0", "off"), ("1", "on")]
                hint="Optimizer states (and the weights at stage 3) wait in CPU memory."/>
            <DeepSpeedSettings/>
        </div>
        <ConfigPaste/>
        <ImportConfig/>
    }
}

/// The framework profile: choosing one also sets that framework's defaults (adapter dtype; Unsloth's optimizer,
/// checkpointing, loss and allocator) where the plan still had the previous framework's.
#[component]
fn FrameworkSelect() -> impl IntoView {
    let c = ctx();
    let framework = Memo::new(move |_| c.steady.with(|p| p.framework));
    view! {
        <div class="field">
            <label for="sel-fw">"Framework profile"</label>
            <select id="sel-fw" data-testid="select-fw"
                on:change=move |ev| {
                    let key = event_target_value(&ev);
                    match Framework::from_key(&key) {
                        Some(fw) => c.edit(|p| fw.apply_defaults(p)),
                        // Only offered keys arrive; were one refused, the core words why.
                        None => c.set_text("fw", &key),
                    }
                }
                prop:value=move || framework.get().key()>
                {Profile::page_list()
                    .map(|(f, label)| view! { <option value=f.key() selected=move || framework.get() == f>{label}</option> })
                    .collect_view()}
            </select>
        </div>
    }
}

/// Why `hold` may not apply: the frameworks whose loop may hold the logits, from their profiles. Made once per
/// page.
fn hold_applies() -> &'static str {
    let labels: Vec<&str> = Profile::page_list()
        .filter(|&(f, _)| Profile::of(f).loop_may_hold_logits)
        .map(|(_, label)| label)
        .collect();
    let text = format!(
        "Applies to the standard loss of {} only",
        labels.join(" and ")
    );
    Box::leak(text.into_boxed_str())
}

/// The `auto` options of the sharding, FSDP1 units and gradient sync selects, from the profiles.
fn auto_options() -> [&'static str; 3] {
    [
        auto_label(|p| match p.default_shard {
            Shard::Fsdp1 => "FSDP1",
            Shard::Fsdp2 => "FSDP2",
            Shard::Deepspeed => "DeepSpeed",
            Shard::Auto => "auto",
        }),
        auto_label(|p| match p.default_wrap {
            Wrap::Lora => "PEFT's",
            Wrap::Block => "blocks",
            Wrap::Auto => "auto",
        }),
        auto_label(|p| match p.default_grad_sync {
            GradSync::Accumulate => "no_sync",
            GradSync::EachBatch => "each batch",
            GradSync::Auto => "auto",
        }),
    ]
}

/// An `auto` option's text: what it resolves to under each framework the page lists, frameworks that agree
/// together ("auto (HF + PEFT: FSDP1; torchtune, litgpt: FSDP2)"). Made once per page, from the profiles.
fn auto_label(value: impl Fn(&Profile) -> &'static str) -> &'static str {
    let mut groups: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for (f, label) in Profile::page_list() {
        let v = value(Profile::of(f));
        match groups.iter_mut().find(|(seen, _)| *seen == v) {
            Some((_, labels)) => labels.push(label),
            None => groups.push((v, vec![label])),
        }
    }
    let each: Vec<String> = groups
        .iter()
        .map(|(v, labels)| format!("{}: {v}", labels.join(", ")))
        .collect();
    Box::leak(format!("auto ({})", each.join("; ")).into_boxed_str())
}

/// A sequence-length statistic typed into a box; an empty box is `auto`, whose value (from the core's
/// `Plan::length_stats`) is the placeholder.
#[component]
fn LengthInput(
    label: &'static str,
    key: &'static str,
    #[prop(into)] disabled: Signal<Option<&'static str>>,
) -> impl IntoView {
    let c = ctx();
    let auto = Memo::new(move |_| {
        c.plan.with(|p| {
            let stats = p.length_stats();
            let v = match key {
                "lmean" => stats.mean,
                "lsd" => stats.sd,
                _ => stats.max,
            };
            format!("auto ({v})")
        })
    });
    view! { <AutoInput label=label key=key disabled=disabled placeholder=auto/> }
}

/// Paste a dataset's token lengths: their mean, deviation and longest (cut to `s`) become the plan's batch
/// lengths, padded per batch unless they already vary. The text stays in the box whatever the outcome.
#[component]
fn DatasetLengthsInput() -> impl IntoView {
    let c = ctx();
    let text = RwSignal::new(String::new());
    let said: RwSignal<Option<Result<String, String>>> = RwSignal::new(None);
    let apply = move |_| match DatasetLengths::parse(&text.get_untracked()) {
        Ok(d) => {
            let mut cut = false;
            c.edit(|p| cut = d.apply(p));
            let (s, overlong) = c.plan.with_untracked(|p| (p.seq_len, p.len_overlong));
            let cut = match (cut, overlong) {
                (false, _) => String::new(),
                (true, Overlong::Cut) => format!(" (longer sequences are cut to s = {s})"),
                (true, Overlong::Drop) => format!(" (sequences longer than s = {s} are dropped)"),
            };
            said.set(Some(Ok(format!(
                "{} sequences: mean {}, deviation {}, longest {}{cut}.",
                format_count(d.count as u64),
                d.mean,
                d.sd,
                d.max
            ))));
        }
        // The plan stays as it was; only the message changes.
        Err(e) => said.set(Some(Err(e))),
    };
    view! {
        <details class="dataset-lengths">
            <summary>"Lengths from your dataset"</summary>
            <textarea rows="3" aria-label="Token lengths" data-testid="dataset-lengths" placeholder="Each sequence's token count: 312, 95, 1840, …"
                on:input=move |ev| text.set(event_target_value(&ev))></textarea>
            <div class="row">
                <button data-testid="dataset-lengths-apply" on:click=apply>"Use these lengths"</button>
            </div>
            {move || said.get().map(|r| match r {
                Ok(line) => view! { <p class="note" data-testid="dataset-lengths-said">{line}</p> }.into_any(),
                Err(e) => view! { <p class="error" role="alert" data-testid="dataset-lengths-said">{e}</p> }.into_any(),
            })}
        </details>
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
        <details class="config" id="config-paste">
            <summary>"Use a Hugging Face config.json"</summary>
            <textarea id="config-text" rows="6" aria-label="config.json" data-testid="config-input" placeholder="{\"model_type\": \"llama\", …}"
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
