//! Quantized bases: the `quantization_config` of the Python script (bitsandbytes 4-bit or LLM.int8, GPTQ) and the
//! import of a `quantization_config` (bitsandbytes or GPTQ), alone or inside a `config.json`.

use super::fields::{cat, dtype_name, get, get_str, Reader};
use super::num;
use super::py::{compute_dtype, torch_dtype};
use super::template::{vars, Vars};
use crate::plan::{Method, Plan, Quant};
use crate::text::quote;
use serde_json::{Map, Value};

/// The quantization of the Python script's base model (and PEFT's `prepare_model_for_kbit_training`).
pub(crate) fn script_vars(plan: &Plan) -> Vars<'static> {
    let qlora = plan.method == Method::Qlora;
    let gptq_bits = plan.gptq_bits();
    let gptq = gptq_bits.is_some();
    vars!(
        "kbit_import" => if qlora { ", prepare_model_for_kbit_training" } else { "" },
        "quant" => plan.quant.key(),
        "gptq_bits" => gptq_bits.map(num).unwrap_or_default(),
        "compute_dtype" => torch_dtype(compute_dtype(plan)),
        "quantization_arg" => if qlora { "quantization_config=QUANTIZATION, " } else { "" },
        ;
        "qsave" => plan.qlora_saves_input && qlora,
        "qlora" => qlora,
        "int8" => qlora && plan.quant == Quant::Int8,
        "nf4_fp4" => qlora && matches!(plan.quant, Quant::Nf4 | Quant::Fp4),
        "gptq" => gptq,
        "bnb" => qlora && !gptq,
        "dq" => plan.double_quant,
        "upcast" => plan.upcast,
    )
}

/// A GPTQ `quantization_config` (a quantized checkpoint's, or `GPTQConfig`'s): its bits pick `quant=gptq4` or
/// `gptq8`; peakplan models auto-gptq's layout with groups of 128 inputs.
#[inline(never)]
fn read_gptq(r: &mut Reader, prefix: &str, map: &Map<String, Value>) {
    let f = |k: &str| cat(prefix, k);
    let field = f("bits");
    match get(map, "bits").and_then(|v| r.uint(&field, v)) {
        Some(4) => r.fact("quant", "gptq4", &field),
        Some(8) => r.fact("quant", "gptq8", &field),
        Some(other) => {
            r.unsupported_value(&field, &num(other));
            r.note_fmt(format_args!(
                "{field} = {other}: peakplan models 4- and 8-bit GPTQ bases; the quantization is not in the plan"
            ));
            return;
        }
        None => {
            r.note_fmt(format_args!(
                "{} is gptq without bits: planned as 4-bit (quant=gptq4)",
                f("quant_method")
            ));
            r.fact("quant", "gptq4", &f("quant_method"));
        }
    }
    r.fact("method", "qlora", &f("quant_method"));
    if let Some(g) = get(map, "group_size") {
        let field = f("group_size");
        if r.uint(&field, g) != Some(128) {
            r.unsupported(&field);
            r.note_fmt(format_args!(
                "{field} is not 128: peakplan counts a scale and a zero point per 128 inputs"
            ));
        }
    }
    r.rest(
        prefix,
        map,
        &["quant_method", "bits", "group_size"],
        &[
            "desc_act",
            "sym",
            "damp_percent",
            "true_sequential",
            "static_groups",
            "model_name_or_path",
            "model_file_base_name",
            "use_exllama",
            "exllama_config",
            "disable_exllama",
            "use_cuda_fp16",
            "dataset",
            "tokenizer",
            "checkpoint_format",
            "meta",
            "module_name_preceding_first_block",
            "block_name_to_quantize",
            "modules_in_block_to_quantize",
            "cache_block_outputs",
            "max_input_length",
            "batch_size",
            "pad_token_id",
            "use_marlin",
            "backend",
        ],
    );
}

#[inline(never)]
pub(super) fn read(r: &mut Reader, prefix: &str, map: &Map<String, Value>) {
    let f = |k: &str| cat(prefix, k);
    if get_str(map, "quant_method") == Some("gptq") {
        read_gptq(r, prefix, map);
        return;
    }
    if let Some(m) = get_str(map, "quant_method") {
        if m != "bitsandbytes" {
            let field = f("quant_method");
            r.unsupported(&field);
            r.note_fmt(format_args!(
                "{field} is {}: only bitsandbytes 4-bit (QLoRA) is modelled; the quantization is not in the plan",
                quote(m)
            ));
            return;
        }
    }
    let four = r.flag_in(map, prefix, "load_in_4bit");
    let eight = r.flag_in(map, prefix, "load_in_8bit");
    if four == Some(true) {
        r.fact("method", "qlora", &f("load_in_4bit"));
    } else if eight == Some(true) {
        // LoRA over an LLM.int8 base: peakplan's quantized-base method with 8-bit weights.
        let field = f("load_in_8bit");
        r.fact("method", "qlora", &field);
        r.fact("quant", "int8", &field);
    }
    if let Some(v) = get(map, "bnb_4bit_quant_type") {
        let field = f("bnb_4bit_quant_type");
        if let Some(t) = r.text(&field, v) {
            r.fact("quant", &t.to_ascii_lowercase(), &field);
        }
    }
    if let Some(b) = r.flag_in(map, prefix, "bnb_4bit_use_double_quant") {
        r.fact_bool("dq", b, &f("bnb_4bit_use_double_quant"));
    }
    if let Some(v) = get(map, "bnb_4bit_compute_dtype") {
        let field = f("bnb_4bit_compute_dtype");
        if let Some(t) = r.text(&field, v) {
            match dtype_name(t) {
                Some("bf16") => r.weak("prec", "amp_bf16", &["bf16"], &field),
                Some("fp16") => r.weak("prec", "amp_fp16", &["fp16"], &field),
                Some(_) => r.weak("prec", "fp32", &[], &field),
                None => r.note_fmt(format_args!(
                    "{field} = {} is not a dtype peakplan knows",
                    quote(t)
                )),
            }
        }
    }
    if let Some(s) = get_str(map, "bnb_4bit_quant_storage") {
        if s.trim_start_matches("torch.") != "uint8" {
            r.unsupported(&f("bnb_4bit_quant_storage"));
        }
    }
    r.rest(
        prefix,
        map,
        &[
            "quant_method",
            "load_in_4bit",
            "load_in_8bit",
            "bnb_4bit_quant_type",
            "bnb_4bit_use_double_quant",
            "bnb_4bit_compute_dtype",
            "bnb_4bit_quant_storage",
        ],
        &[
            "llm_int8_threshold",
            "llm_int8_enable_fp32_cpu_offload",
            "llm_int8_has_fp16_weight",
            "_load_in_4bit",
            "_load_in_8bit",
        ],
    );
}
