"""Trace the allocations of one preference-training step of TRL's own trainers on CPU.

usage: pref_step.py TASK LAYERS BATCH SEQ PROMPT [--full] [--gc] [--ref model|adapters_off|precomputed]
                    [--targets q_proj,v_proj] [--r R] [--hidden H] [--inter I] [--heads N] [--kv N] [--vocab V]

TASK is dpo (`DPOTrainer`), orpo (`ORPOTrainer`), cpo or simpo (`CPOTrainer`, SimPO as its `loss_type="simpo"`)
or kto (`KTOTrainer`). A Llama-shaped bf16 model of LAYERS layers (LoRA through the trainer's `peft_config`
unless `--full`) is handed to the trainer with a preference dataset whose every example is PROMPT prompt tokens
and SEQ - PROMPT completion tokens (chosen and rejected), so that each sequence is SEQ tokens, as peakplan's
`s` and `prompt` say. The trainer builds what it builds (the reference: adapters switched off under PEFT, a
second copy under full fine-tuning, none with `--ref precomputed`, which precomputes the log-probabilities at
start-up as `precompute_ref_log_probs=True` does), its collator makes one batch of BATCH examples, and the step
is the Trainer's: `trainer.compute_loss`, backward, a foreach AdamW step, `zero_grad(set_to_none=True)`; run twice,
the second measured (memtrace.report). Prints one JSON line.

The tokenizer is a word-level one over the model's vocabulary (one word, one token), built here: no Hub access.
TRL's fused LM head scores only completion positions on Triton devices and every position elsewhere; the harness
makes it take CUDA's path (`_use_triton` answers True, the Triton kernels are never reached: the tiles run in
torch), so the CPU trace scores what a GPU run scores. ORPO and CPO (`trl.experimental`) compute the model's full
logits and score them with `selective_log_softmax`, whose CUDA branch is a fused Triton kernel: the harness runs
that branch with the kernel's arithmetic done a row at a time in torch and its allocations CUDA's (trl_head.py),
where the torch fallback a CPU takes would upcast rows and stack them.
"""
import argparse
import tempfile

import torch
from memtrace import report, shape_args

ap = argparse.ArgumentParser()
ap.add_argument("task", choices=["dpo", "orpo", "cpo", "simpo", "kto"])
ap.add_argument("layers", type=int)
ap.add_argument("b", type=int)
ap.add_argument("s", type=int)
ap.add_argument("prompt", type=int)
ap.add_argument("--full", action="store_true")
ap.add_argument("--gc", action="store_true")
ap.add_argument("--ref", default=None, choices=["model", "adapters_off", "precomputed"])
ap.add_argument("--targets", default="q_proj,v_proj")
ap.add_argument("--r", type=int, default=16)
shape_args(ap)
a = ap.parse_args()
assert 0 < a.prompt < a.s, "PROMPT must be at least 1 and less than SEQ"

from datasets import Dataset
from peft import LoraConfig
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

# CUDA's path of TRL's fused head, its tiles fed to the torch fallback a row at a time, and CUDA's fused
# log-softmax kernel for the experimental trainers' full logits (trl_head.py).
from trl_head import take_cuda_logprob_kernel, take_cuda_path

take_cuda_path()
take_cuda_logprob_kernel()

torch.manual_seed(0)
words = {f"w{i}": i for i in range(a.vocab - 1)}
words["<eos>"] = a.vocab - 1
tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<eos>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")

cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.inter, num_hidden_layers=a.layers,
                  num_attention_heads=a.heads, num_key_value_heads=a.kv, max_position_embeddings=4096,
                  tie_word_embeddings=False, eos_token_id=a.vocab - 1, pad_token_id=a.vocab - 1)
cfg._attn_implementation = "sdpa"
model = LlamaForCausalLM(cfg).to(torch.bfloat16)
model.config.use_cache = False


def text(n):
    return " ".join(f"w{int(i)}" for i in torch.randint(0, a.vocab - 1, (n,)))


# A completion is one word fewer than its tokens (the trainer appends EOS), with a space on both sides so that
# neither the prompt's last word nor EOS merges with it into one unknown word.
completion = a.s - a.prompt
pair = lambda: (" " + text(completion - 1) + " ")
rows = [{"prompt": text(a.prompt), "chosen": pair(), "rejected": pair()} for _ in range(a.b)]
if a.task == "kto":
    # Unpaired: each example one completion with its label; the KL batch pairs prompts with other completions.
    rows = [{"prompt": r["prompt"], "completion": r["chosen"], "label": i % 2 == 0} for i, r in enumerate(rows)]
dataset = Dataset.from_list(rows)
peft_config = None if a.full else LoraConfig(r=a.r, lora_alpha=2 * a.r, lora_dropout=0.0,
                                             target_modules=a.targets.split(","), task_type="CAUSAL_LM")
common = dict(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=a.b, max_length=a.s, report_to=[],
              use_cpu=True, bf16=False, gradient_checkpointing=a.gc, dataloader_num_workers=0, logging_steps=1000,
              remove_unused_columns=False)
if a.gc:
    common["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
# Full fine-tuning's reference is a second copy of the model, which TRL loads from the policy's path in the
# policy's dtype; this model has no path, so the copy is handed over as `ref_model` (what TRL would load).
ref_model = None
if a.full and a.task in ("dpo", "kto") and a.ref != "precomputed":
    import copy
    ref_model = copy.deepcopy(model)
if a.task == "dpo":
    from trl import DPOConfig, DPOTrainer
    args = DPOConfig(**common, precompute_ref_log_probs=a.ref == "precomputed")
    trainer = DPOTrainer(model=model, ref_model=ref_model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=peft_config)
elif a.task in ("cpo", "simpo", "orpo"):
    if a.task == "orpo":
        from trl.experimental.orpo import ORPOConfig as Config, ORPOTrainer as Trainer
        args = Config(**common)
    else:
        from trl.experimental.cpo import CPOConfig as Config, CPOTrainer as Trainer
        args = Config(**common, loss_type="simpo" if a.task == "simpo" else "sigmoid",
                      cpo_alpha=0.0 if a.task == "simpo" else 1.0)
    trainer = Trainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                      peft_config=peft_config)
else:
    from trl import KTOConfig, KTOTrainer
    args = KTOConfig(**common, precompute_ref_log_probs=a.ref == "precomputed")
    trainer = KTOTrainer(model=model, ref_model=ref_model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=peft_config)

policy = trainer.model
# The Trainer turns checkpointing on when training starts (`Trainer.train`), which this step does not call.
if a.gc:
    policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not a.full:
        policy.enable_input_require_grads()
policy.train()
batch = next(iter(trainer.get_train_dataloader()))
batch = {k: v for k, v in batch.items()}
import sys
print({k: tuple(v.shape) for k, v in batch.items() if torch.is_tensor(v)}, file=sys.stderr)
opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-4, foreach=True)


def step():
    loss = trainer.compute_loss(policy, batch)
    loss.backward()
    del loss
    opt.step()
    policy.zero_grad(set_to_none=True)


report(step)
