"""Trace the allocations of one Hugging Face + PEFT training step on CPU.

usage: hf_step.py LAYERS BATCH SEQ [--full] [--qlora [--upcast] [--dq]] [--gc] [--targets q_proj,v_proj] [--target-params P,Q]
                  [--dropout P] [--amp] [--fp32] [--peft METHOD] [--vt N] [--adtype fp32|bf16]
                  [--mts embed_tokens,lm_head] [--tokens N] [--opt OPTIMIZER] [--ga N]
                  [--r R] [--hidden H] [--inter I] [--heads N] [--kv N] [--vocab V] [--tied]
                  [--preset config.json | --config config.json] [--json cfg.json]

A Llama-shaped model of LAYERS layers runs the step the Trainer runs (forward, `del outputs`, backward, once per
micro-batch with `--ga`; the optimizer's step, foreach AdamW unless `--opt` names another of the Trainer's `optim`
values; `zero_grad(set_to_none=True)`) twice; the second is measured (memtrace.report). Prints one JSON line.
`--peft` picks PEFT's method (LoRA unless told: rslora, dora, lorafa, ia3, vera, loha, oft, ln, prompt, prefix);
`--mts` lists PEFT's `modules_to_save`, `--tokens N` trains N rows of the embedding (`trainable_token_indices`);
`--adtype bf16` keeps adapters in the model's dtype (`autocast_adapter_dtype=False`).

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
ap.add_argument("--amp", action="store_true", help="run forward under 16-bit autocast (--half's type)")
ap.add_argument("--fp32", action="store_true", help="fp32 weights (16-bit otherwise)")
ap.add_argument("--half", default="bf16", choices=["bf16", "fp16"], help="the 16-bit type (weights, autocast, "
                "bitsandbytes compute dtype)")
ap.add_argument("--r", type=int, default=16)
shape_args(ap)
ap.add_argument("--tied", action="store_true")
ap.add_argument("--qlora", action="store_true", help="bitsandbytes NF4 base loaded by from_pretrained")
ap.add_argument("--upcast", action="store_true", help="QLoRA: prepare_model_for_kbit_training")
ap.add_argument("--dq", action="store_true", help="QLoRA: double quantization")
ap.add_argument("--quant", default="nf4", choices=["nf4", "fp4", "int8"], help="QLoRA: bitsandbytes' quantizer")
ap.add_argument("--preset", help="a config.json (../shared/models/*.json) whose family to build, scaled down")
ap.add_argument("--config", help="a config.json built as it is, but with LAYERS layers (nested text_config too)")
ap.add_argument("--json")
ap.add_argument("--peft", default="lora")
ap.add_argument("--vt", type=int, default=20, help="prompt/prefix tuning: virtual tokens")
ap.add_argument("--adtype", default="fp32", choices=["fp32", "bf16", "fp16"],
                help="fp32 (PEFT's autocast_adapter_dtype) or the model's 16-bit type")
ap.add_argument("--mts", help="PEFT modules_to_save, e.g. embed_tokens,lm_head")
ap.add_argument("--tokens", type=int, help="PEFT trainable_token_indices: the first N rows of embed_tokens")
ap.add_argument("--opt", default="adamw_torch",
                choices=["adamw_torch", "adamw_torch_fused", "sgd", "adafactor", "adamw_8bit"])
ap.add_argument("--ga", type=int, default=1, help="micro-batches accumulated before the optimizer's step")
ap.add_argument("--compile", action="store_true", help="torch.compile the model (inductor), as the Trainer's "
                "torch_compile does")
ap.add_argument("--lens", help="batches of varying length: each step's batch is BATCH rows padded to the next of these "
                "lengths (comma-separated, taken in turn): its first row that long, the others half as long with the rest "
                "padding (attention mask 0, labels -100), made at the step's start as a data loader's batch is")
ap.add_argument("--hold", action="store_true", help="keep the model's output (its logits) until after the "
                "optimizer's step, as loops that log from it do (fsdp_qlora's train.py, older torchtune recipes)")
a = ap.parse_args()



def peft_config(a):
    """PEFT's config for `--peft`, over `--targets` (the methods' own defaults where they need other modules)."""
    from peft import (IA3Config, LNTuningConfig, LoHaConfig, LoraConfig, OFTConfig, PrefixTuningConfig,
                      PromptTuningConfig, VeraConfig)
    targets = a.targets.split(",")
    extra = {"modules_to_save": a.mts.split(",")} if a.mts else {}
    if a.peft in ("lora", "rslora", "dora", "lorafa"):
        if a.target_params:
            extra["target_parameters"] = a.target_params.split(",")
        if a.tokens:
            extra["trainable_token_indices"] = {"embed_tokens": list(range(a.tokens))}
        return LoraConfig(r=a.r, lora_alpha=2 * a.r, lora_dropout=a.dropout, target_modules=targets,
                          use_rslora=a.peft == "rslora", use_dora=a.peft == "dora", task_type="CAUSAL_LM", **extra)
    if a.peft == "ia3":
        ff = [t for t in targets if t in ("down_proj", "gate_proj", "up_proj")]
        return IA3Config(target_modules=targets, feedforward_modules=ff, task_type="CAUSAL_LM", **extra)
    if a.peft == "vera":
        return VeraConfig(r=a.r, target_modules=targets, vera_dropout=a.dropout, task_type="CAUSAL_LM", **extra)
    if a.peft == "loha":
        return LoHaConfig(r=a.r, alpha=2 * a.r, target_modules=targets, rank_dropout=0.0, module_dropout=0.0,
                          task_type="CAUSAL_LM", **extra)
    if a.peft == "oft":
        return OFTConfig(r=a.r, oft_block_size=0, target_modules=targets, task_type="CAUSAL_LM", **extra)
    if a.peft == "ln":
        return LNTuningConfig(task_type="CAUSAL_LM", **extra)
    if a.peft == "prompt":
        return PromptTuningConfig(num_virtual_tokens=a.vt, task_type="CAUSAL_LM")
    if a.peft == "prefix":
        return PrefixTuningConfig(num_virtual_tokens=a.vt, task_type="CAUSAL_LM")
    raise SystemExit(f"--peft {a.peft}: not one of PEFT's methods this harness builds")


def optimizer(name, params):
    """The optimizer `TrainingArguments(optim=name)` builds (Trainer.get_optimizer_cls_and_kwargs)."""
    if name == "adamw_torch":
        return torch.optim.AdamW(params, lr=1e-4, foreach=True)
    if name == "adamw_torch_fused":
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4)
    if name == "adafactor":
        from transformers.optimization import Adafactor
        return Adafactor(params, lr=1e-4, scale_parameter=False, relative_step=False)
    import bitsandbytes as bnb
    return bnb.optim.AdamW(params, lr=1e-4, optim_bits=8)


torch.manual_seed(0)
if a.preset:
    # The preset's own family and features (biases, norms, tied head, softcapping, MoE, parallel blocks) at a size
    # a CPU steps quickly: `--hidden` wide, `--heads` heads, the same query/key-value head ratio, the MLP scaled
    # with the width, `--vocab` tokens and LAYERS layers.
    d = {k: v for k, v in json.load(open(a.preset)).items() if not k.startswith("_")}
    # GPT-3 was never released: peakplan reads it through GPT-2's layout, so GPT-2 builds it (its traced config
    # keeps the name gpt3, for peakplan to read as the preset is read).
    source_type = d["model_type"]
    mt = {"RefinedWebModel": "falcon", "RefinedWeb": "falcon", "gpt3": "gpt2"}.get(source_type, source_type)
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
    # A config's own dropout (GPT-2 and GPT-BigCode default to 0.1 for attention, residual and embedding) is not
    # modelled by peakplan yet, and on a CPU SDPA with dropout takes the math path, materializing the scores where
    # CUDA's kernels do not: the traced configs turn it off.
    for k in ("attn_pdrop", "resid_pdrop", "embd_pdrop"):
        if mt in ("gpt2", "gpt_bigcode"):
            d[k] = 0.0
    if a.json:
        named = {"model_type": source_type} if source_type == "gpt3" else {}
        json.dump(dict(d, torch_dtype="bfloat16", **named), open(a.json, "w"))
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
half = torch.float16 if a.half == "fp16" else torch.bfloat16
dtype = torch.float32 if a.fp32 else half
model = make(cfg).to(dtype)
if a.qlora:
    import tempfile
    from transformers import BitsAndBytesConfig
    from peft import prepare_model_for_kbit_training
    saved = tempfile.mkdtemp()
    model.save_pretrained(saved)
    if a.quant == "int8":
        quant = BitsAndBytesConfig(load_in_8bit=True)
    else:
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=a.quant, bnb_4bit_compute_dtype=half,
                                   bnb_4bit_use_double_quant=a.dq)
    model = AutoModelForCausalLM.from_pretrained(saved, quantization_config=quant, dtype=dtype, device_map="cpu",
                                             attn_implementation=cfg._attn_implementation)
    if a.upcast:
        # Upcasts every unquantized weight to fp32 (and turns checkpointing on when asked).
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=a.gc,
                                                gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
from peft import get_peft_model
if not a.full:
    model = get_peft_model(model, peft_config(a), autocast_adapter_dtype=a.adtype == "fp32")
if a.gc and not (a.qlora and a.upcast):
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not a.full:
        model.enable_input_require_grads()
model.train()
if a.peft == "lorafa":
    from peft.optimizers import create_lorafa_optimizer
    opt = create_lorafa_optimizer(model, r=a.r, lora_alpha=2 * a.r, lr=1e-4)
else:
    opt = optimizer(a.opt, [p for p in model.parameters() if p.requires_grad])
if a.compile:
    # The Trainer's torch_compile wraps the whole model; inductor compiles forward and backward on the first step.
    model = torch.compile(model)
ids = torch.randint(0, a.vocab, (a.b, a.s))
batch = {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}
lens = [int(n) for n in a.lens.split(",")] if a.lens else []
if lens:
    del ids, batch
turn = [0]


def padded_batch(n):
    """BATCH rows padded to n tokens: the first row n long, the others about half (right padding, as the collator
    pads)."""
    ids = torch.randint(0, a.vocab, (a.b, n))
    mask = torch.ones_like(ids)
    mask[1:, max(1, n // 2):] = 0
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def step():
    global batch
    if lens:
        batch = padded_batch(lens[turn[0] % len(lens)])
        turn[0] += 1
    for _ in range(a.ga):
        ctx = torch.autocast("cpu", dtype=half) if a.amp else torch.autocast("cpu", enabled=False)
        with ctx:
            outputs = model(**batch)
            loss = outputs["loss"] / a.ga
        if not a.hold:
            del outputs
        loss.backward()
        del loss
    opt.step()
    if a.hold:
        del outputs
    model.zero_grad(set_to_none=True)
    if lens:
        del batch


report(step)
