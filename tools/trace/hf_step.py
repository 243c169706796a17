"""Trace the allocations of one Hugging Face + PEFT training step on CPU.

usage: hf_step.py LAYERS BATCH SEQ [--full] [--qlora [--upcast] [--dq]] [--gc] [--targets q_proj,v_proj] [--target-params P,Q]
                  [--dropout P] [--amp] [--fp32]
                  [--r R] [--hidden H] [--inter I] [--heads N] [--kv N] [--vocab V] [--tied]
                  [--preset config.json | --config config.json] [--json cfg.json]

A Llama-shaped model of LAYERS layers runs the step the Trainer runs (forward, `del outputs`, backward, a
foreach AdamW step, `zero_grad(set_to_none=True)`) twice; the second is measured (memtrace.report). Prints one
JSON line.

Two CPU artifacts to keep in mind when comparing with peakplan, which models CUDA:
- CPU dropout is not fused: it keeps its mask in the input's dtype (4 B for fp32), not CUDA's 1-byte mask.
- Recent transformers pass grouped keys and values to SDPA (`enable_gqa`) when the batch has no padding;
  compare grouped-query models with `attn=flash` then.
`--json` writes the model's config.json, for `peakplan estimate --hf-config`.
"""
import argparse
import json

import torch
from memtrace import report, shape_args
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("layers", type=int)
ap.add_argument("b", type=int)
ap.add_argument("s", type=int)
ap.add_argument("--full", action="store_true")
ap.add_argument("--gc", action="store_true")
ap.add_argument("--targets", default="q_proj,v_proj")
ap.add_argument("--dropout", type=float, default=0.0)
ap.add_argument("--target-params", help="PEFT target_parameters, e.g. mlp.experts.gate_up_proj,mlp.experts.down_proj "
                "(MoE experts stored as 3D parameters)")
ap.add_argument("--amp", action="store_true", help="run forward under bf16 autocast")
ap.add_argument("--fp32", action="store_true", help="fp32 weights (bf16 otherwise)")
ap.add_argument("--r", type=int, default=16)
shape_args(ap)
ap.add_argument("--tied", action="store_true")
ap.add_argument("--qlora", action="store_true", help="bitsandbytes NF4 base loaded by from_pretrained")
ap.add_argument("--upcast", action="store_true", help="QLoRA: prepare_model_for_kbit_training")
ap.add_argument("--dq", action="store_true", help="QLoRA: double quantization")
ap.add_argument("--preset", help="a config.json (../shared/models/*.json) whose family to build, scaled down")
ap.add_argument("--config", help="a config.json built as it is, but with LAYERS layers (nested text_config too)")
ap.add_argument("--json")
a = ap.parse_args()

torch.manual_seed(0)
if a.preset:
    # The preset's own family and features (biases, norms, tied head, softcapping, MoE, parallel blocks) at a size
    # a CPU steps quickly: `--hidden` wide, `--heads` heads, the same query/key-value head ratio, the MLP scaled
    # with the width, `--vocab` tokens and LAYERS layers.
    d = {k: v for k, v in json.load(open(a.preset)).items() if not k.startswith("_")}
    mt = {"RefinedWebModel": "falcon", "RefinedWeb": "falcon"}.get(d["model_type"], d["model_type"])
    d["model_type"] = mt
    if mt == "falcon":
        # FalconConfig checks its rotary size before mapping the GPT-2 style names: use the canonical ones.
        for old_key, new_key in (("n_head", "num_attention_heads"), ("n_layer", "num_hidden_layers")):
            if old_key in d:
                d[new_key] = d.pop(old_key)
    d.setdefault("pad_token_id", None)
    # A checkpoint's quantization (gpt-oss's MXFP4 experts) belongs to from_pretrained, not to this bf16 model.
    for k in ("architectures", "auto_map", "torch_dtype", "transformers_version", "quantization_config"):
        d.pop(k, None)
    hkey = "n_embd" if "n_embd" in d else "hidden_size"
    scale = a.hidden / d[hkey]
    d[hkey] = a.hidden
    nkey = "n_head" if "n_head" in d else "num_attention_heads"
    heads0 = d[nkey]
    for k in ("num_attention_heads", "n_head"):
        if k in d:
            d[k] = a.heads
    for k in ("num_key_value_heads", "num_kv_heads"):
        if d.get(k):
            kv = max(1, round(a.heads * d[k] / heads0))
            while a.heads % kv:
                kv -= 1
            d[k] = kv
    for k in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(d.get(k), int) and d[k] >= a.vocab:
            d[k] = a.vocab - 1
    if "head_dim" in d:
        d["head_dim"] = a.hidden // a.heads
    for k in ("intermediate_size", "n_inner", "ffn_hidden_size"):
        if d.get(k):
            d[k] = max(64, int(round(d[k] * scale / 64)) * 64)
    for k in ("num_hidden_layers", "n_layer", "num_layers"):
        if k in d or k == "num_hidden_layers":
            d[k] = a.layers
    # Per-layer attention kinds (gpt-oss alternates sliding and full) keep their pattern over the first LAYERS.
    if "layer_types" in d:
        d["layer_types"] = d["layer_types"][: a.layers]
    d["vocab_size"] = a.vocab
    for k in ("max_position_embeddings", "n_positions"):
        if k in d:
            d[k] = max(d[k], 4096) if k == "max_position_embeddings" else max(d[k], a.s)
    if a.json:
        json.dump(dict(d, torch_dtype="bfloat16"), open(a.json, "w"))
    cfg = AutoConfig.for_model(**d)
    # Gemma 2's attention softcapping has no SDPA path: transformers runs it eagerly.
    # gpt-oss's attention sinks have no SDPA path either.
    cfg._attn_implementation = "eager" if mt in ("gemma2", "gpt_oss") else "sdpa"
    make = lambda c: AutoModelForCausalLM.from_config(c)
elif a.config:
    d = {k: v for k, v in json.load(open(a.config)).items() if not k.startswith("_")}
    for sub in (d, d.get("text_config") or {}):
        if "num_hidden_layers" in sub or sub is not d:
            sub["num_hidden_layers"] = a.layers
    if a.json:
        json.dump(dict(d, torch_dtype="bfloat16"), open(a.json, "w"))
    cfg = AutoConfig.for_model(**d)
    cfg._attn_implementation = "sdpa"
    make = lambda c: AutoModelForCausalLM.from_config(c)
else:
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.inter,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv,
                      max_position_embeddings=4096, tie_word_embeddings=a.tied)
    cfg._attn_implementation = "sdpa"
    make = lambda c: LlamaForCausalLM(c)
    if a.json:
        d = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": a.vocab,
             "hidden_size": a.hidden, "intermediate_size": a.inter, "num_hidden_layers": a.layers,
             "num_attention_heads": a.heads, "num_key_value_heads": a.kv, "tie_word_embeddings": a.tied,
             "torch_dtype": "bfloat16", "max_position_embeddings": 4096, "rms_norm_eps": 1e-5}
        json.dump(d, open(a.json, "w"))
dtype = torch.float32 if a.fp32 else torch.bfloat16
model = make(cfg).to(dtype)
if a.qlora:
    import tempfile
    from transformers import BitsAndBytesConfig
    from peft import prepare_model_for_kbit_training
    saved = tempfile.mkdtemp()
    model.save_pretrained(saved)
    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
                               bnb_4bit_use_double_quant=a.dq)
    model = AutoModelForCausalLM.from_pretrained(saved, quantization_config=quant, dtype=dtype, device_map="cpu",
                                             attn_implementation=cfg._attn_implementation)
    if a.upcast:
        # Upcasts every unquantized weight to fp32 (and turns checkpointing on when asked).
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=a.gc,
                                                gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
if not a.full:
    from peft import LoraConfig, get_peft_model
    extra = {"target_parameters": a.target_params.split(",")} if a.target_params else {}
    pc = LoraConfig(r=a.r, lora_alpha=2 * a.r, lora_dropout=a.dropout, target_modules=a.targets.split(","),
                    task_type="CAUSAL_LM", **extra)
    model = get_peft_model(model, pc)
if a.gc and not (a.qlora and a.upcast):
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not a.full:
        model.enable_input_require_grads()
model.train()
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
ids = torch.randint(0, a.vocab, (a.b, a.s))
batch = {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}


def step():
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if a.amp else torch.autocast("cpu", enabled=False)
    with ctx:
        outputs = model(**batch)
        loss = outputs["loss"]
    del outputs
    loss.backward()
    opt.step()
    model.zero_grad(set_to_none=True)


report(step)
