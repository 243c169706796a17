//! DeepSpeed's own sizes and switches (`ds_*`, `zinit`), shown where the plan shards with DeepSpeed: what
//! `engine/deepspeed.rs` prices. An empty size box is `auto`, whose value (the Trainer's fill or DeepSpeed's
//! default, from the core's `Plan::deepspeed_sizes`) is its placeholder.

use crate::panels::controls::{AutoInput, KeySelect};
use crate::state::ctx;
use leptos::prelude::*;
use peakplan_core::plan::{DeepSpeedSizes, Shard};
use peakplan_core::units::format_count;

/// DeepSpeed's settings, enabled while the plan shards with DeepSpeed over several GPUs.
#[component]
pub fn DeepSpeedSettings() -> impl IntoView {
    let c = ctx();
    let not_deepspeed = crate::state::memo(move || {
        c.steady
            .with(|p| p.gpus < 2 || p.split_layers || p.sharding().shard != Shard::Deepspeed)
            .then_some("Applies where DeepSpeed shards the plan over several GPUs")
    });
    let not_zero3 = crate::state::memo(move || {
        not_deepspeed.get().or_else(|| {
            c.steady
                .with(|p| p.zero != 3)
                .then_some("Applies to ZeRO-3 only")
        })
    });
    view! {
        <SizeInput label="Optimizer sub-group (elements)" key="ds_sub" disabled=not_zero3
            auto=|s| s.sub_group
            hint="sub_group_size: ZeRO-3's optimizer steps its fp32 partition a sub-group at a time; the step's fp32 and 16-bit gradient copies are one sub-group's."/>
        <SizeInput label="Reduce bucket (elements)" key="ds_rbucket" disabled=not_deepspeed
            auto=|s| s.reduce_bucket
            hint="reduce_bucket_size: gradients are copied into buckets of this size and reduced when one fills (ZeRO-1 and 2 through backward, two with overlap_comm; ZeRO-3 keeps one)."/>
        <KeySelect label="Overlap communication" key="ds_overlap" testid="select-ds_overlap"
            options=vec![("auto", "auto (on under ZeRO-3)"), ("1", "on"), ("0", "off")] disabled=not_deepspeed/>
        <KeySelect label="Contiguous gradients" key="ds_contig"
            options=vec![("auto", "auto (on)"), ("1", "on"), ("0", "off (no buckets)")] disabled=not_deepspeed/>
        <SizeInput label="Prefetch bucket (elements)" key="ds_prefetch" disabled=not_zero3
            auto=|s| s.prefetch_bucket
            hint="stage3_prefetch_bucket_size: at every module's fetch ZeRO-3 gathers the next parameters of the step's trace not yet gathered, up to this many (at least one, however large); 0 turns prefetching off."/>
        <SizeInput label="Live parameters (elements)" key="ds_live" disabled=not_zero3
            auto=|s| s.max_live
            hint="stage3_max_live_parameters: ZeRO-3 prefetches only while fewer parameters than this are gathered."/>
        <SizeInput label="Reuse distance (elements)" key="ds_reuse" disabled=not_zero3
            auto=|s| s.max_reuse
            hint="stage3_max_reuse_distance: a module used again within this many fetched parameters stays gathered from forward to backward; one released earlier is usually prefetched back for its backward, so on a small model this saves little."/>
        <SizeInput label="Persistence threshold (elements)" key="ds_persist" disabled=not_zero3
            auto=|s| s.persistence
            hint="stage3_param_persistence_threshold: smaller parameters stay whole on every GPU."/>
        <KeySelect label="Partition at load" key="zinit" options=vec![("1", "zero.Init (the Trainer's)"), ("0", "whole model first")]
            disabled=not_zero3
            hint="Without zero.Init (the model loaded before DeepSpeed's config is known, and any quantized base) every GPU holds the whole model before it is partitioned, and the allocator keeps that memory."/>
    }
}

/// A DeepSpeed size typed into a box (elements); empty is `auto`, shown as the placeholder with the value it
/// resolves to for this plan and model.
#[component]
fn SizeInput(
    label: &'static str,
    key: &'static str,
    #[prop(into)] disabled: Signal<Option<&'static str>>,
    /// The size `auto` resolves to.
    auto: fn(&DeepSpeedSizes) -> u64,
    hint: &'static str,
) -> impl IntoView {
    let c = ctx();
    let placeholder = Memo::new(move |_| {
        c.with_model(|arch, p| {
            arch.map_or_else(
                || "auto".to_string(),
                |a| format!("auto ({})", format_count(auto(&p.deepspeed_sizes(a)))),
            )
        })
    });
    view! { <AutoInput label=label key=key disabled=disabled placeholder=placeholder hint=hint/> }
}
