//! Formatting shared by every front end: bytes in binary units (GiB), as `nvidia-smi` and PyTorch report them,
//! counts, a method's name, and the words for a plan spread over several GPUs.

use crate::plan::{Method, Shard};
use crate::Plan;

/// What [`format_bytes`] says for a saturated figure.
pub const SATURATED_BYTES: &str = "more than any GPU";

/// Formats bytes in binary units with three significant figures: `13.5 GiB`, `512 MiB`, `0 B`. `u64::MAX` is
/// where the engine saturates a figure beyond arithmetic (`Estimate::saturated`), not a size: it is said in
/// words ([`SATURATED_BYTES`]) rather than as `16.0 EiB`, which would read as a measured amount.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes == u64::MAX {
        return SATURATED_BYTES.to_string();
    }
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else if v >= 10.0 {
        format!("{v:.1} {}", UNITS[u])
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// Formats a parameter count: `6.74B`, `4.19M`.
pub fn format_count(n: u64) -> String {
    let v = n as f64;
    if v >= 1e12 {
        format!("{:.2}T", v / 1e12)
    } else if v >= 1e9 {
        format!("{:.2}B", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}K", v / 1e3)
    } else {
        n.to_string()
    }
}

/// How a plan spreads over its GPUs, when it uses more than one: "32 GPUs with ZeRO-3", "layers split over 3
/// GPUs", "4 GPUs, each with a full copy (DDP)". Every figure of such a plan is per GPU; the page's answer, the
/// embed caption, the chart title and the CLI all say so through [`per_gpu`].
pub fn gpu_spread(plan: &Plan) -> Option<String> {
    let n = plan.gpus;
    if n <= 1 {
        return None;
    }
    let offload = if plan.cpu_offload {
        " and CPU offload"
    } else {
        ""
    };
    Some(if plan.split_layers {
        format!("layers split over {n} GPUs")
    } else if plan.zero == 0 {
        format!("{n} GPUs, each with a full copy (DDP){offload}")
    } else {
        // FSDP has no stage of its own that shards the optimizer alone: a stage-1 plan is DeepSpeed's.
        match (plan.sharding().shard, plan.zero) {
            (shard @ (Shard::Fsdp1 | Shard::Fsdp2), 2 | 3) => {
                let v = if shard == Shard::Fsdp1 { 1 } else { 2 };
                let how = if plan.zero == 3 {
                    "full shard"
                } else {
                    "grad-op shard"
                };
                format!("{n} GPUs, FSDP{v} {how}{offload}")
            }
            _ => format!("{n} GPUs with ZeRO-{}{offload}", plan.zero),
        }
    })
}

/// " per GPU (32 GPUs with ZeRO-3)" after a figure of a plan on several GPUs; empty for one GPU.
pub fn per_gpu(plan: &Plan) -> String {
    gpu_spread(plan)
        .map(|s| format!(" per GPU ({s})"))
        .unwrap_or_default()
}

/// A method's name on a bar, a button or a table: "Full", "LoRA", "QLoRA".
pub fn method_label(m: Method) -> &'static str {
    match m {
        Method::Full => "Full",
        Method::Lora => "LoRA",
        Method::Qlora => "QLoRA",
    }
}

/// A method named in a sentence or a header ("… for full fine-tuning"): its label, with full fine-tuning
/// spelled out.
pub fn method_in_words(m: Method) -> &'static str {
    match m {
        Method::Full => "full fine-tuning",
        Method::Lora | Method::Qlora => method_label(m),
    }
}

/// The chart's title: the model, what the bars measure (the device total, as nvidia-smi counts it), and the shape
/// of the step (per GPU on several).
pub fn chart_title(model_name: &str, plan: &Plan) -> String {
    let shape = format!("b={}, s={}", plan.micro_batch, plan.seq_len);
    match gpu_spread(plan) {
        None => format!("{model_name}: nvidia-smi memory at the peak of one step ({shape})"),
        Some(s) => format!(
            "{model_name}: nvidia-smi memory per GPU at the peak of one step ({shape}; {s})"
        ),
    }
}

/// The plan's answer in one sentence, for a reader who cannot see the chart (the SVG's `<desc>`): the model, the
/// method and shape, the nvidia-smi peak against the GPU and the verdict, decided as the page's verdict and the
/// CLI's table decide it (`device_bytes` at most the GPU's capacity). "Llama 2 7B, QLoRA r=16, b=1, s=1024: needs
/// 10.2 GiB (nvidia-smi) of the RTX 4090's 24.0 GiB: fits".
pub fn answer_sentence(model_name: &str, plan: &Plan, device_bytes: u64) -> String {
    let gpu = plan.gpu.preset();
    let method = match plan.method {
        Method::Full => method_label(plan.method).to_string(),
        m => format!("{} r={}", method_label(m), plan.rank),
    };
    // On several GPUs the figure is one GPU's, held against each one's capacity.
    let whose = if plan.gpus > 1 { "each" } else { "the" };
    let verdict = if device_bytes <= gpu.capacity_bytes {
        "fits"
    } else {
        "does not fit"
    };
    format!(
        "{model_name}, {method}, b={}, s={}: needs {} (nvidia-smi){} of {whose} {}'s {}: {verdict}",
        plan.micro_batch,
        plan.seq_len,
        format_bytes(device_bytes),
        per_gpu(plan),
        gpu.short_name,
        format_bytes(gpu.capacity_bytes)
    )
}

/// What a chart's SVG says of itself in words (its `<desc>`): [`answer_sentence`], then the query that reproduces
/// the plan, so a file with no link back (the CLI has no site address) still leads back to the plan.
pub fn chart_description(model_name: &str, plan: &Plan, device_bytes: u64) -> String {
    let mut linked = plan.clone();
    // The file is the chart already: the query is for the planner itself.
    linked.embed = false;
    format!(
        "{}. peakplan query: {}",
        answer_sentence(model_name, plan, device_bytes),
        linked.to_query()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_sentence_names_the_plan_its_peak_and_the_verdict() {
        let p = Plan::parse_query("model=llama-2-7b&method=qlora&r=16&b=1&s=1024").plan;
        assert_eq!(
            answer_sentence("Llama 2 7B", &p, 10_952_166_604),
            "Llama 2 7B, QLoRA r=16, b=1, s=1024: needs 10.2 GiB (nvidia-smi) of the RTX 4090's 24.0 GiB: fits"
        );
        let full = Plan::parse_query("method=full&gpus=4&zero=3&gpu=a100-80gb").plan;
        let said = answer_sentence("Llama 3.1 8B", &full, 200 << 30);
        assert!(said.starts_with(
            "Llama 3.1 8B, Full, b=1, s=2048: needs 200 GiB (nvidia-smi) per GPU (4 GPUs"
        ));
        assert!(
            said.contains(") of each A100 80GB's ") && said.ends_with(": does not fit"),
            "{said}"
        );
    }

    #[test]
    fn a_saturated_figure_is_said_in_words_and_the_largest_real_one_in_units() {
        let check = |bytes: u64, expect: &str| assert_eq!(format_bytes(bytes), expect, "{bytes}");
        check(0, "0 B");
        check(13 << 30, "13.0 GiB");
        check(u64::MAX - 1, "16.0 EiB");
        check(u64::MAX, "more than any GPU");
    }

    #[test]
    fn several_gpus_are_named_with_their_sharding_and_one_gpu_is_not() {
        let says = |q: &str| per_gpu(&Plan::parse_query(q).plan);
        assert_eq!(says("gpus=1&zero=3"), "");
        assert_eq!(
            says("gpus=32&zero=3"),
            " per GPU (32 GPUs, FSDP1 full shard)"
        );
        assert_eq!(
            says("gpus=32&zero=3&fw=torchtune"),
            " per GPU (32 GPUs, FSDP2 full shard)"
        );
        assert_eq!(
            says("gpus=32&zero=3&shard=deepspeed"),
            " per GPU (32 GPUs with ZeRO-3)"
        );
        assert_eq!(says("gpus=2&zero=1"), " per GPU (2 GPUs with ZeRO-1)");
        assert_eq!(
            says("gpus=3&split=1"),
            " per GPU (layers split over 3 GPUs)"
        );
        assert_eq!(
            says("gpus=4"),
            " per GPU (4 GPUs, each with a full copy (DDP))"
        );
        assert_eq!(
            says("gpus=8&zero=2&cpuoff=1"),
            " per GPU (8 GPUs, FSDP1 grad-op shard and CPU offload)"
        );
        let p = Plan::parse_query("gpus=32&zero=3&b=2&s=4096").plan;
        assert_eq!(
            chart_title("Llama 3.1 70B", &p),
            "Llama 3.1 70B: nvidia-smi memory per GPU at the peak of one step (b=2, s=4096; 32 GPUs, FSDP1 full shard)"
        );
        assert_eq!(
            chart_title("Llama 3.1 70B", &Plan::default()),
            "Llama 3.1 70B: nvidia-smi memory at the peak of one step (b=1, s=2048)"
        );
    }
}
