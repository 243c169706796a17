"""List what one decoder layer keeps for backward, storage by storage, on CPU.

usage: saved.py CONFIG.json [--full | --targets q_proj,v_proj [--target-params P,...]] [--attn sdpa|eager] [--b 2]
                [--s 256]

Builds the model of CONFIG.json (a traced config from crates/peakplan-core/tests/data/traced/configs/, or any
scaled-down config.json) in bf16, runs its first layer once under `saved_tensors_hooks`, and prints every tensor
storage autograd saved that is not a parameter, largest first, with the total. Views share a storage, so a view
that keeps a larger tensor alive shows that tensor's size (Phi-3's v, sliced out of the fused qkv output, shows
the whole qkv). Compare the total with what the engine counts for one layer (the `saved_activations` component
of a 2-layer plan less that of a 1-layer plan) to find which tensor a mechanism misses.
"""
import argparse
import json

import torch
from transformers import AutoConfig, AutoModelForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("config")
ap.add_argument("--full", action="store_true", help="every parameter trains (else LoRA on --targets)")
ap.add_argument("--targets", default="q_proj,v_proj")
ap.add_argument("--target-params", help="comma list of 3D parameters LoRA adapts too (PEFT target_parameters)")
ap.add_argument("--attn", default="sdpa")
ap.add_argument("--b", type=int, default=2)
ap.add_argument("--s", type=int, default=256)
a = ap.parse_args()

d = {k: v for k, v in json.load(open(a.config)).items() if k != "torch_dtype"}
cfg = AutoConfig.for_model(**d)
cfg._attn_implementation = a.attn
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
if not a.full:
    from peft import LoraConfig, get_peft_model
    extra = {"target_parameters": a.target_params.split(",")} if a.target_params else {}
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                                             target_modules=a.targets.split(","), task_type="CAUSAL_LM", **extra))
    model = model.base_model.model
# The decoder stack: `layers` in most families, `h` in Falcon's.
inner = next(m for m in model.modules() if hasattr(m, "rotary_emb") and (hasattr(m, "layers") or hasattr(m, "h")))
blocks = inner.layers if hasattr(inner, "layers") else inner.h
params = {p.untyped_storage().data_ptr() for p in model.parameters()}
saved = {}


def pack(t):
    storage = t.untyped_storage()
    if storage.data_ptr() not in params:
        saved.setdefault(storage.data_ptr(), (storage.nbytes(), tuple(t.shape), str(t.dtype)))
    return t


x = torch.randn(a.b, a.s, cfg.hidden_size, dtype=torch.bfloat16, requires_grad=True)
positions = torch.arange(a.s).unsqueeze(0).expand(a.b, a.s)
rope = inner.rotary_emb(x, positions)
with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    # Falcon's layer also requires its ALiBi bias (None: rotary).
    falcon = type(blocks[0]).__name__.startswith("Falcon")
    blocks[0](x, position_embeddings=rope, attention_mask=None, **({"alibi": None} if falcon else {}))
total = 0
for nbytes, shape, dtype in sorted(saved.values(), key=lambda v: -v[0]):
    print(f"{nbytes:>12,} B  {dtype:<15} {shape}")
    total += nbytes
print(f"{total:>12,} B  in all ({a.b * a.s} tokens, hidden {cfg.hidden_size})")
