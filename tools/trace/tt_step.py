"""Trace the allocations of one torchtune full fine-tuning step on CPU (torchtune 0.6's recipe loop).

usage: tt_step.py LAYERS BATCH SEQ [--chunked] [--lora R [--mlp] [--qlora]] [--oib] [--hidden H] [--inter I]
                  [--heads N] [--kv N] [--vocab V]

A Llama-3-shaped `TransformerDecoder` (torchtune's own `llama3` / `lora_llama3` builders) in bf16 runs the step
of `full_finetune_single_device` (`lora_finetune_single_device` with `--lora`: LoRA on q and v, and on the MLP with
`--mlp`; `--qlora` quantizes the base to torchao NF4): forward, the cross-entropy (`--chunked`: `CEWithChunkedOutputLoss`), `del logits`,
backward, a foreach AdamW step, `zero_grad(set_to_none=True)`; with `--oib` (`optimizer_in_bwd: True`) every
parameter has its own AdamW, stepped and zeroed by a post-accumulate-grad hook inside backward
(`training.register_optim_in_bwd_hooks`). The second step is measured (memtrace.report).
Prints one JSON line.
"""
import argparse

import torch
from memtrace import report
from torchtune.models.llama3._component_builders import llama3, lora_llama3
from torchtune.modules.peft import get_adapter_params, set_trainable_params
from torchtune.modules.loss import CEWithChunkedOutputLoss

ap = argparse.ArgumentParser()
ap.add_argument("layers", type=int)
ap.add_argument("b", type=int)
ap.add_argument("s", type=int)
ap.add_argument("--chunked", action="store_true")
ap.add_argument("--hidden", type=int, default=512)
ap.add_argument("--inter", type=int, default=1376)
ap.add_argument("--heads", type=int, default=8)
ap.add_argument("--kv", type=int, default=8)
ap.add_argument("--vocab", type=int, default=32000)
ap.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
ap.add_argument("--mlp", action="store_true")
ap.add_argument("--qlora", action="store_true")
ap.add_argument("--oib", action="store_true", help="optimizer in backward (full_finetune_single_device)")
a = ap.parse_args()

torch.manual_seed(0)
dims = dict(vocab_size=a.vocab, num_layers=a.layers, num_heads=a.heads, num_kv_heads=a.kv, embed_dim=a.hidden,
            max_seq_len=4096, intermediate_dim=a.inter)
if a.lora:
    with torch.device("cpu"):
        torch.set_default_dtype(torch.bfloat16)
        model = lora_llama3(lora_attn_modules=["q_proj", "v_proj"], apply_lora_to_mlp=a.mlp, lora_rank=a.lora,
                            lora_alpha=2 * a.lora, quantize_base=a.qlora, **dims)
        torch.set_default_dtype(torch.float32)
    set_trainable_params(model, get_adapter_params(model))
else:
    model = llama3(**dims).to(torch.bfloat16)
model.train()
if a.chunked:
    loss_fn = CEWithChunkedOutputLoss()
    model.set_num_output_chunks(loss_fn.num_output_chunks)
else:
    loss_fn = torch.nn.CrossEntropyLoss()
trainable = [p for p in model.parameters() if p.requires_grad]
if a.oib:
    from torchtune import training
    # foreach as on CUDA, where torch picks it by default (a single tensor each: one state-sized temporary).
    optim_dict = {p: torch.optim.AdamW([p], lr=1e-5, foreach=True) for p in trainable}
    training.register_optim_in_bwd_hooks(model=model, optim_dict=optim_dict)
else:
    opt = torch.optim.AdamW(trainable, lr=1e-5, foreach=True)
tokens = torch.randint(0, a.vocab, (a.b, a.s))
ignore = torch.full((a.b, 1), -100)


def step():
    logits = model(tokens)
    labels = torch.hstack((tokens[..., 1:], ignore))
    if not isinstance(logits, list):
        labels = labels.reshape(-1)
        logits = logits.reshape(-1, logits.size(-1))
    loss = loss_fn(logits, labels)
    del logits
    loss.backward()
    if not a.oib:
        opt.step()
        opt.zero_grad(set_to_none=True)


report(step)
