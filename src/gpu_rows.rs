//! The "On other GPUs" table as markup: plain Rust over the core's `gpu_fits` rows, tested natively.
//!
//! Written as one string (`inner_html`) rather than a view per cell: eighteen rows of seven cells as Leptos views
//! cost about 10 KB of gzipped wasm, the string costs a few hundred bytes. Buttons carry what they apply in
//! `data-gpu` and `data-gpus`; the component reads them back through [`UseGpu::from_attrs`].

use crate::html::esc;
use peakplan_core::gpu_choice::GpuFit;
use peakplan_core::presets::{self, GpuId};
use peakplan_core::units::format_bytes;

/// The one-line answer shown while the table is closed: how many bundled GPUs hold the plan, and the smallest.
pub fn summary(device_bytes: u64, gpus: u64) -> String {
    let fitting = presets::GPUS
        .iter()
        .filter(|g| device_bytes <= g.capacity_bytes);
    let count = fitting.clone().count();
    let per = if gpus > 1 { " each" } else { "" };
    match fitting.min_by_key(|g| g.capacity_bytes) {
        None => format!(
            "On other GPUs: none of the {} bundled GPUs holds {}{per}; see how many it takes",
            presets::GPUS.len(),
            format_bytes(device_bytes)
        ),
        Some(g) => format!(
            "On other GPUs: {count} of {} hold {}{per}; the smallest is the {} ({})",
            presets::GPUS.len(),
            format_bytes(device_bytes),
            g.short_name,
            format_bytes(g.capacity_bytes)
        ),
    }
}

/// What a row's button applies: this GPU, and for a plan that does not fit as it is, this many of it, sharded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UseGpu {
    pub gpu: GpuId,
    /// None keeps the plan's own GPU count and sharding.
    pub gpus: Option<u64>,
}

impl UseGpu {
    /// Reads a button's `data-gpu` and `data-gpus` back; None for anything that is not such a button.
    pub fn from_attrs(gpu: Option<String>, gpus: Option<String>) -> Option<UseGpu> {
        let gpu = GpuId::parse(&gpu?)?;
        let gpus = match gpus {
            None => None,
            Some(n) => Some(n.parse().ok()?),
        };
        Some(UseGpu { gpu, gpus })
    }
}

fn button(r: &GpuFit) -> String {
    let id = esc(r.id);
    match (r.fits, r.gpus_needed) {
        (true, _) => format!(r#"<button data-testid="gpu-use-{id}" data-gpu="{id}">Use</button>"#),
        (false, Some(n)) => format!(
            r#"<button data-testid="gpu-use-{id}" data-gpu="{id}" data-gpus="{n}">Use {n}</button>"#
        ),
        (false, None) => r#"<span class="note">–</span>"#.to_string(),
    }
}

/// The "GPUs needed" cell: the count, and the count with the free changes where they lower it ("18, or 14*").
/// The `gpu-needed-` hook holds the count alone, so scripts reading it as a number keep working.
fn needed(r: &GpuFit) -> String {
    let id = esc(r.id);
    let now = r.gpus_needed.map_or("none".to_string(), |v| v.to_string());
    let now = format!(r#"<span data-testid="gpu-needed-{id}">{now}</span>"#);
    match r.gpus_needed_with_free_changes {
        Some(n) => format!(
            r#"{now}, or <span class="free" data-testid="gpu-needed-free-{id}">{n}*</span>"#
        ),
        None => now,
    }
}

/// The note under the table that names the free changes behind a starred count, if any row has one.
fn free_note(rows: &[GpuFit]) -> String {
    let Some(r) = rows.iter().find(|r| !r.free_changes.is_empty()) else {
        return String::new();
    };
    let labels: Vec<String> = r.free_changes.iter().map(|c| esc(&c.label)).collect();
    format!(
        r#"<p class="note" data-testid="gpu-table-free">*: with the free changes (same result, no slower): {}.</p>"#,
        labels.join("; ")
    )
}

/// The table for `rows`, worked out for a plan on `current_gpu` at micro-batch `micro_batch` and sequence `seq_len`.
pub fn table_html(rows: &[GpuFit], current_gpu: &str, micro_batch: u64, seq_len: u64) -> String {
    let mut body = String::new();
    for r in rows {
        // A row whose limits are still being worked out shows an ellipsis rather than "none".
        let opt = |v: Option<u64>| match v {
            _ if !r.limits_known => "…".to_string(),
            None => "none".to_string(),
            Some(v) => v.to_string(),
        };
        let current = r.id == current_gpu;
        let verdict = r.verdict();
        let action = if current && r.fits {
            r#"<span class="note">current</span>"#.to_string()
        } else {
            button(r)
        };
        body.push_str(&format!(
            r#"<tr class="{}{}" data-testid="gpu-row-{id}" data-fits="{}"><td title="{}">{}</td><td class="num" title="{}">{}</td><td class="num">{verdict}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td>{action}</td></tr>"#,
            if r.fits { "fits" } else { "short" },
            if current { " current" } else { "" },
            r.fits,
            esc(r.name),
            esc(r.short_name),
            r.capacity_bytes,
            format_bytes(r.capacity_bytes),
            opt(r.max_batch),
            opt(r.max_seq),
            needed(r),
            id = esc(r.id),
        ));
    }
    let none = if rows.iter().any(|r| r.gpus_needed.is_none()) {
        r#"<p class="note" data-testid="gpu-table-none">None: not even 64 of that GPU hold the plan. Sharding splits the parameters, gradients and optimizer states, not each GPU's own activations and logits: lower the micro-batch or the sequence length, or see the changes above.</p>"#
    } else {
        ""
    };
    let free = free_note(rows);
    format!(
        r#"<p class="scroll-hint">Scroll the table sideways for every column →</p><table><thead><tr><th>GPU</th><th class="num">Memory</th><th class="num">Verdict</th><th class="num wrap">Largest batch<br>at s={seq_len}</th><th class="num wrap">Longest sequence<br>at b={micro_batch}</th><th class="num wrap">GPUs<br>needed</th><th>Plan on it</th></tr></thead><tbody>{body}</tbody></table><p class="note">GPUs needed: the fewest that hold the plan (every count up to 64; no more than the plan has where it fits as planned). Beyond one they share the parameters, gradients and optimizer states (ZeRO-3 / FSDP full shard, or the plan's own layer split), each with this micro-batch.</p>{free}{none}"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use peakplan_core::gpu_choice::gpu_fits;
    use peakplan_core::{preset_arch, Plan};

    fn table(query: &str) -> (Vec<GpuFit>, String) {
        let p = Plan::parse_query(query).plan;
        let rows = gpu_fits(preset_arch(&p), &p);
        let html = table_html(&rows, p.gpu.id(), p.micro_batch, p.seq_len);
        (rows, html)
    }

    #[test]
    fn every_row_is_in_the_markup_with_the_button_that_applies_it() {
        let (rows, html) = table("model=llama-3.1-8b&method=lora&b=3&s=2048&gpu=rtx-4090");
        assert_eq!(html.matches("<tr class=").count(), rows.len());
        // The 4090 is 3.6 GiB short at b=3 and two of them hold the plan sharded; an A100 80GB fits as planned.
        assert!(html.contains(
            r#"data-testid="gpu-use-rtx-4090" data-gpu="rtx-4090" data-gpus="2">Use 2<"#
        ));
        assert!(html.contains(r#"data-testid="gpu-use-a100-80gb" data-gpu="a100-80gb">Use<"#));
        assert!(html
            .contains(r#"class="short current" data-testid="gpu-row-rtx-4090" data-fits="false""#));
        assert!(
            html.contains("Largest batch<br>at s=2048")
                && html.contains("Longest sequence<br>at b=3")
        );
        // Three sequences' activations alone outgrow a 12 GB card, however many share the weights.
        assert!(html.contains(r#"data-testid="gpu-needed-rtx-3060-12gb">none<"#));
        assert!(html.contains("gpu-table-none"));
    }

    #[test]
    fn the_current_gpu_that_fits_has_no_button_and_unreachable_plans_say_why() {
        let (_, html) = table("model=qwen2.5-14b&method=qlora&b=4&s=4096&gpu=h100-80gb");
        assert!(html.contains(r#"<span class="note">current</span>"#));
        assert!(!html.contains(r#"data-testid="gpu-use-h100-80gb""#));
        // Qwen's 152k-entry vocabulary makes the logits alone outgrow a 12 GB card: no GPU count helps. On a 24 GB
        // card the free changes make two enough: on one, the allocator cannot place the step's blocks.
        assert!(html.contains(r#"data-testid="gpu-needed-rtx-3060-12gb">none<"#));
        assert!(html.contains(r#"data-testid="gpu-needed-rtx-4090">none</span>, or <span class="free" data-testid="gpu-needed-free-rtx-4090">2*<"#));
        assert!(html.contains(r#"data-testid="gpu-needed-a10g-24gb">none</span>, or <span class="free" data-testid="gpu-needed-free-a10g-24gb">2*<"#));
        assert!(html.contains("gpu-table-none"));
    }

    #[test]
    fn a_count_the_free_changes_lower_is_starred_and_the_changes_named() {
        let (rows, html) =
            table("model=llama-3.1-70b&method=full&prec=amp_bf16&gpus=32&zero=3&gpu=h100-80gb");
        let h100 = rows
            .iter()
            .find(|r| r.id == "h100-80gb")
            .expect("an H100 row");
        let (now, free) = (
            h100.gpus_needed.unwrap(),
            h100.gpus_needed_with_free_changes.unwrap(),
        );
        assert!(html.contains(&format!(
            r#"data-testid="gpu-needed-h100-80gb">{now}</span>, or <span class="free" data-testid="gpu-needed-free-h100-80gb">{free}*</span><"#
        )));
        assert!(
            html.contains("*: with the free changes (same result, no slower): ")
                && html.contains("Use the fused AdamW")
        );
        let (_, plain) = table("model=llama-3.1-8b&method=lora&b=2&s=2048&gpu=rtx-4090&opt=adamw_torch_fused&alloc=expandable&loss=fused&liger=1");
        assert!(!plain.contains("gpu-table-free") && !plain.contains("*<"));
    }

    #[test]
    fn the_summary_names_the_smallest_gpu_that_holds_the_plan() {
        assert_eq!(
            summary(20 << 30, 1),
            "On other GPUs: 15 of 18 hold 20.0 GiB; the smallest is the A10G (22.5 GiB)"
        );
        assert_eq!(
            summary(300 << 30, 4),
            "On other GPUs: none of the 18 bundled GPUs holds 300 GiB each; see how many it takes"
        );
    }

    #[test]
    fn only_a_bundled_gpu_and_a_whole_count_are_applied() {
        let attrs =
            |g: &str, n: Option<&str>| UseGpu::from_attrs(Some(g.into()), n.map(Into::into));
        assert_eq!(
            attrs("h100-80gb", Some("16")),
            Some(UseGpu {
                gpu: GpuId::parse("h100-80gb").unwrap(),
                gpus: Some(16)
            })
        );
        assert_eq!(
            attrs("a100-80gb", None),
            Some(UseGpu {
                gpu: GpuId::parse("a100-80gb").unwrap(),
                gpus: None
            })
        );
        assert_eq!(attrs("tpu-v5", None), None);
        assert_eq!(attrs("h100-80gb", Some("two")), None);
        assert_eq!(UseGpu::from_attrs(None, None), None);
    }
}
