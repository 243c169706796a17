//! Python literals and torch names, shared by the formats that fill the Python script (`python.rs`, and the
//! adapter, quantization and Trainer parts it takes from `peft.rs`, `bnb.rs` and `training_args.rs`).

use super::yaml::json_str;
use crate::plan::{DType, Plan, Precision};

/// A Python string literal (JSON escaping is valid Python for these strings).
pub(super) fn py_str(s: &str) -> String {
    json_str(s)
}

/// A Python boolean literal.
pub(super) fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// The torch dtype's name in Python.
pub(super) fn torch_dtype(bytes_kind: DType) -> &'static str {
    match bytes_kind {
        DType::Fp32 => "torch.float32",
        DType::Bf16 => "torch.bfloat16",
        DType::Fp16 => "torch.float16",
    }
}

/// A list of module names as a Python list literal.
pub(super) fn py_list(names: &[&str]) -> String {
    let mut s = String::from("[");
    for (i, n) in names.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push('"');
        s.push_str(n);
        s.push('"');
    }
    s.push(']');
    s
}

/// The dtype the model computes in: the 4-bit compute dtype, and the Trainer's AMP dtype.
pub(super) fn compute_dtype(plan: &Plan) -> DType {
    match plan.precision {
        Precision::Fp32 => DType::Fp32,
        Precision::Bf16 | Precision::AmpBf16 => DType::Bf16,
        Precision::Fp16 | Precision::AmpFp16 => DType::Fp16,
    }
}
