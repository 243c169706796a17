"""Trace the allocations of one litgpt fine-tuning step on CPU (litgpt 0.5's `finetune/lora.py` and `full.py` loops).

usage: lg_step.py LAYERS BATCH SEQ [--full] [--r R] [--hidden H] [--inter I] [--heads N] [--kv N] [--vocab V]

A Llama-shaped litgpt `GPT` (`litgpt.lora.GPT` for LoRA on q and v) in Fabric's "bf16-true" precision runs the
step of `fit()`: the forward (the LoRA recipe's head in 128-token chunks, `lm_head_chunk_size=128`; the full
recipe's unchunked), litgpt's `chunked_cross_entropy`, `fabric.backward`, a foreach AdamW step, `zero_grad`. Fabric
hands the head's output back in the default dtype (fp32), and the loop keeps those logits through backward. The
second step is measured (memtrace.report). Prints one JSON line. Needs litgpt and lightning beside torch
(tools/trace/README.md).
"""
import argparse

import lightning as L
import torch
from litgpt.lora import GPT, Config, mark_only_lora_as_trainable
from litgpt.utils import chunked_cross_entropy
from memtrace import report, shape_args

ap = argparse.ArgumentParser()
ap.add_argument("layers", type=int)
ap.add_argument("b", type=int)
ap.add_argument("s", type=int)
ap.add_argument("--full", action="store_true")
ap.add_argument("--r", type=int, default=16)
shape_args(ap)
a = ap.parse_args()

torch.manual_seed(0)
config = Config(n_layer=a.layers, n_embd=a.hidden, n_head=a.heads, n_query_groups=a.kv, intermediate_size=a.inter,
                vocab_size=a.vocab, padded_vocab_size=a.vocab, block_size=4096, bias=False, norm_class_name="RMSNorm",
                mlp_class_name="LLaMAMLP", rotary_percentage=1.0, parallel_residual=False,
                lora_r=0 if a.full else a.r, lora_alpha=2 * a.r, lora_dropout=0.0, lora_query=not a.full,
                lora_value=not a.full)
fabric = L.Fabric(accelerator="cpu", devices=1, precision="bf16-true")
with fabric.init_module(empty_init=False):
    model = GPT(config)
if not a.full:
    mark_only_lora_as_trainable(model)
model = fabric.setup_module(model)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, foreach=True)
opt = fabric.setup_optimizers(opt)
ids = torch.randint(0, a.vocab, (a.b, a.s))


def step():
    if a.full:
        logits = model(ids)
        loss = chunked_cross_entropy(logits[..., :-1, :], ids[..., 1:])
    else:
        logits = model(ids, lm_head_chunk_size=128)
        logits[-1] = logits[-1][..., :-1, :]
        loss = chunked_cross_entropy(logits, ids[..., 1:])
    fabric.backward(loss)
    opt.step()
    opt.zero_grad()


report(step)
