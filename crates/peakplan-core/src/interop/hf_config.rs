//! A model's `config.json`: its `quantization_config`, and its model fields matched to a bundled preset.

use super::bnb;
use super::fields::{cat, get, get_str, has_any, is_empty, preset_for_hf_id, type_name, Reader};
use super::table;
use crate::hf::import_config;
use crate::presets;
use serde_json::{Map, Value};

#[inline(never)]
pub(super) fn read(r: &mut Reader, map: &Map<String, Value>, text: &str) {
    match get(map, "quantization_config") {
        Some(Value::Object(q)) => bnb::read(r, "quantization_config.", q),
        Some(Value::Null) | None => {}
        Some(other) => r.note_fmt(format_args!(
            "quantization_config must be a mapping, got {}; not used",
            type_name(other)
        )),
    }
    match import_config(text) {
        Ok(arch) => {
            let same = table(presets::MODELS).iter().find(|m| {
                presets::model_arch(m.id).is_some_and(|a| {
                    let mut b = arch.clone();
                    b.name.clone_from(&a.name);
                    &b == a
                })
            });
            match same {
                Some(m) => r.fact("model", m.id, "model fields"),
                None => match get_str(map, "_name_or_path").and_then(preset_for_hf_id) {
                    Some(m) => {
                        r.fact("model", m.id, "_name_or_path");
                        r.note_fmt(format_args!("the model fields differ from the bundled {}; planned as that preset", m.id));
                    }
                    None => r.note(
                        "this model is not a bundled preset: model unchanged; give this config.json to --hf-config (CLI) or the page's config box to plan for it",
                    ),
                },
            }
        }
        Err(e) if has_any(map, &["model_type"]) => {
            r.note(&cat("its model fields were not used: ", &e.to_string()));
        }
        Err(_) => {}
    }
    if let Some(v) = get(map, "torch_dtype").or_else(|| get(map, "dtype")) {
        if !is_empty(v) {
            r.neutral("torch_dtype");
        }
    }
}
