"""Trace the allocations of one GRPO training step of TRL's own `GRPOTrainer` on CPU.

usage: grpo_step.py LAYERS PROMPTS GENS PROMPT COMPLETION [--full] [--gc] [--beta B] [--ga N]
                    [--targets q_proj,v_proj] [--r R] [--seed S] [--hidden H] [--inter I] [--heads N] [--kv N]
                    [--vocab V]

A Llama-shaped bf16 model of LAYERS layers (LoRA through the trainer's `peft_config` unless `--full`) is handed to
`GRPOTrainer` with a dataset of prompts of exactly PROMPT tokens (plain text, no chat template) and a length reward.
One optimizer step is PROMPTS prompts, GENS completions each, every completion exactly COMPLETION tokens, split into
GA micro-batches of PROMPTS * GENS / GA sequences (`per_device_train_batch_size`; `steps_per_generation` defaults to
GA, `num_iterations` is 1, so every optimizer step generates anew). The step is the Trainer's, on one process: GA
times `trainer.training_step` on a batch of the trainer's own dataloader (`_prepare_inputs`, which on the first
micro-batch generates with `model.generate`, scores with the reference when `beta` > 0 and the reward, and buffers
the generation batch split in GA; then `compute_loss` on the micro-batch's slice, backward), then a foreach AdamW step
and `zero_grad(set_to_none=True)`; run twice, the second measured (memtrace.report). Prints one JSON line.

The reference is what TRL builds: none when `beta` is 0; under LoRA the adapters switched off (no copy); under full
fine-tuning a second model that `GRPOTrainer` loads itself with `from_pretrained` from the policy's
`config._name_or_path` in the policy's dtype, so the policy is saved to a temporary folder and its config pointed
there, as a model loaded from the Hub would be.

Every completion must be COMPLETION tokens. The tokenizer's EOS (and pad) is the id VOCAB, one past the last row of
the model's vocabulary: the model cannot sample it, so generation always runs the full `max_completion_length` and
no sequence is padded. The reward function asserts the length of every completion and fails loudly otherwise.

The tokenizer is a word-level one over the model's vocabulary (one word, one token), built here: no Hub access. The
fused LM head takes CUDA's path as in pref_step.py (`_use_triton` answers True, tiles fed a row at a time), so the
CPU trace scores what a GPU run scores: GRPOTrainer computes its log-probabilities (and the policy's entropies) with
the same chunked head.
"""
import argparse
import sys
import tempfile

import torch
from memtrace import report, shape_args

ap = argparse.ArgumentParser()
ap.add_argument("layers", type=int)
ap.add_argument("prompts", type=int, help="prompts per optimizer step")
ap.add_argument("gens", type=int, help="completions per prompt (num_generations)")
ap.add_argument("prompt", type=int, help="prompt tokens")
ap.add_argument("completion", type=int, help="completion tokens (max_completion_length, always reached)")
ap.add_argument("--full", action="store_true")
ap.add_argument("--gc", action="store_true")
ap.add_argument("--beta", type=float, default=0.0)
ap.add_argument("--ga", type=int, default=1)
ap.add_argument("--targets", default="q_proj,v_proj")
ap.add_argument("--r", type=int, default=16)
ap.add_argument("--seed", type=int, default=0)
shape_args(ap)
a = ap.parse_args()
assert a.prompt > 0 and a.completion > 0, "PROMPT and COMPLETION must be at least 1"
assert (a.prompts * a.gens) % a.ga == 0, "PROMPTS * GENS must be a multiple of GA"

from datasets import Dataset
from peft import LoraConfig
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

# CUDA's path of TRL's fused head, as in pref_step.py (trl_head.py).
from trl_head import take_cuda_path

take_cuda_path()

torch.manual_seed(a.seed)
# Words w0 .. w{V-1} are the model's V tokens; EOS (also pad and unk) is id V, which the model cannot emit.
EOS = a.vocab
words = {f"w{i}": i for i in range(a.vocab)}
words["<eos>"] = EOS
tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<eos>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")

cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.inter, num_hidden_layers=a.layers,
                  num_attention_heads=a.heads, num_key_value_heads=a.kv, max_position_embeddings=4096,
                  tie_word_embeddings=False, eos_token_id=None, pad_token_id=None, bos_token_id=None)
cfg._attn_implementation = "sdpa"
model = LlamaForCausalLM(cfg).to(torch.bfloat16)

if a.full and a.beta != 0.0:
    # GRPOTrainer loads the full fine-tune's reference from the policy's path (`create_model_from_path`).
    ref_dir = tempfile.mkdtemp()
    model.save_pretrained(ref_dir)
    model.config._name_or_path = ref_dir


def text(n):
    return " ".join(f"w{int(i)}" for i in torch.randint(0, a.vocab, (n,)))


# Enough distinct prompts for several steps; the dataloader is cycled anyway.
rows = [{"prompt": text(a.prompt)} for _ in range(8 * a.prompts)]
for r in rows:
    assert len(tokenizer(r["prompt"])["input_ids"]) == a.prompt, "a prompt is not PROMPT tokens"
dataset = Dataset.from_list(rows)

generated = []


def length_reward(completions, completion_ids, **kwargs):
    # Every completion must have run to max_completion_length (EOS cannot be sampled): fail loudly otherwise.
    lengths = [len(ids) for ids in completion_ids]
    if any(n != a.completion for n in lengths):
        raise SystemExit(f"completion lengths {lengths} differ from COMPLETION={a.completion}")
    generated.append(len(lengths))
    return [float(len(c)) for c in completions]


peft_config = None if a.full else LoraConfig(r=a.r, lora_alpha=2 * a.r, lora_dropout=0.0,
                                             target_modules=a.targets.split(","), task_type="CAUSAL_LM")
from trl import GRPOConfig, GRPOTrainer

args = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=a.prompts * a.gens // a.ga,
                  gradient_accumulation_steps=a.ga, num_generations=a.gens, max_completion_length=a.completion,
                  beta=a.beta, use_cpu=True, bf16=False, gradient_checkpointing=a.gc, report_to=[],
                  logging_steps=1000, dataloader_num_workers=0, seed=a.seed)
trainer = GRPOTrainer(model=model, reward_funcs=length_reward, args=args, train_dataset=dataset,
                      processing_class=tokenizer, peft_config=peft_config)
assert args.steps_per_generation == a.ga and args.num_iterations == 1
assert (trainer.ref_model is not None) == (a.full and a.beta != 0.0), "unexpected reference model"

policy = trainer.model
# What `Trainer.train` does before its loop (`train` itself is not called): checkpointing with the args' kwargs.
if args.activation_checkpointing:
    gc_kwargs = dict(args.activation_checkpointing_kwargs or {})
    every_n_layers, offload = gc_kwargs.pop("every_n_layers", 1), gc_kwargs.pop("offload", False)
    policy.activation_checkpointing_enable(activation_checkpointing_kwargs=gc_kwargs or None,
                                           every_n_layers=every_n_layers, offload=offload)
policy.train()
# Set by the Trainer's loop for each optimizer step.
trainer.current_gradient_accumulation_steps = a.ga
opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-4, foreach=True)


def batches():
    # The trainer's dataloader: each batch is a generation batch (PROMPTS prompts, each GENS times), repeated GA
    # times in a row (RepeatSampler), one per micro-batch; the first of each run of GA generates.
    while True:
        yield from trainer.get_train_dataloader()


loader = batches()


def step():
    before, first = len(generated), trainer._step
    for _ in range(a.ga):
        # `Trainer.training_step`: `_prepare_inputs` (generation on the first micro-batch), compute_loss, backward;
        # GRPOTrainer's override counts `_step`.
        loss = trainer.training_step(policy, next(loader), None)
        del loss
    opt.step()
    policy.zero_grad(set_to_none=True)
    # One generation round per optimizer step, buffered as GA micro-batches.
    assert len(generated) == before + 1 and trainer._step - first == a.ga, "not one generation per step"
    assert len(trainer._buffered_inputs) == a.ga
    if before == 0:
        print({k: tuple(v.shape) for k, v in trainer._buffered_inputs[0].items() if torch.is_tensor(v)},
              f"x{a.ga}", file=sys.stderr)


report(step)
