"""Trace the allocations of one sharded training step on CPU, on every rank of a gloo process group.

usage: fsdp_step.py WORLD LAYERS BATCH SEQ [--fsdp 1|2] [--full] [--wrap block|lora] [--orig 0|1] [--ga K]
                    [--sync] [--amp] [--fp32] [--gc] [--targets q_proj,v_proj] [--r R]
                    [--hidden H] [--inter I] [--heads N] [--kv N] [--vocab V]

WORLD local processes (torch.multiprocessing, gloo, `device_id=cpu`; WORLD 1 runs the model unsharded) each build the same Llama-shaped model, wrap
it and run the loop the Hugging Face Trainer runs under accelerate: K micro-batches whose forward and backward run
inside `no_sync()` (FSDP1) or with `set_requires_gradient_sync(False)` (FSDP2) except the last, unless `--sync`
(accelerate's `sync_each_batch=True`); then a foreach AdamW step and `zero_grad(set_to_none=True)`. One step
runs first so the optimizer states exist; the second is measured on every rank (memtrace.peak_of) and the largest
rank's figure is printed as one JSON line.

- `--fsdp 1`: `FullyShardedDataParallel`, FULL_SHARD, `limit_all_gathers=True`. `--wrap block` wraps each decoder
  layer (transformers' `transformer_auto_wrap_policy`, what litgpt's Block policy does too): with LoRA every
  layer's unit mixes frozen and trainable parameters, which FSDP1 accepts with `--orig 1` only. `--wrap lora` is
  PEFT's `fsdp_auto_wrap_policy`: each LoRA linear's adapter parameters in a unit of their own.
- `--fsdp 2`: `fully_shard` on each decoder layer, then on the root, on a CPU mesh.
- `--amp`: fp32 parameters, `MixedPrecision(param_dtype=bf16)` (FSDP1) or `MixedPolicy(param_dtype=bf16)` (FSDP2),
  gradients reduced in fp32; without it the model is bf16 throughout (or fp32 with `--fp32`).

CPU artifacts to keep in mind: one stream, so an all-gather's output is allocated when the unit runs (CUDA's
prefetch and rate limiter overlap at most two units; the CPU trace shows one at a time plus what FSDP keeps);
gloo's transport buffers are not torch allocations (NCCL's are not counted by `max_memory_allocated` either).
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def args():
    ap = argparse.ArgumentParser()
    ap.add_argument("world", type=int)
    ap.add_argument("layers", type=int)
    ap.add_argument("b", type=int)
    ap.add_argument("s", type=int)
    ap.add_argument("--fsdp", type=int, default=1, choices=(1, 2))
    ap.add_argument("--ds", type=int, default=0, choices=(0, 1, 2, 3), help="DeepSpeed ZeRO stage instead of FSDP")
    ap.add_argument("--ddp", action="store_true", help="DistributedDataParallel (no sharding) instead of FSDP")
    # DeepSpeed's sizes (elements; 0 leaves the Trainer's `auto` fill) and switches, as the plan keys name them.
    for key in ("sub", "rbucket", "agbucket", "prefetch", "live", "reuse", "persist"):
        ap.add_argument(f"--ds-{key}", type=int, default=0)
    ap.add_argument("--ds-overlap", type=int, default=-1, choices=(-1, 0, 1), help="-1: DeepSpeed's default")
    ap.add_argument("--ds-contig", type=int, default=1, choices=(0, 1))
    ap.add_argument("--zinit", type=int, default=1, choices=(0, 1),
                    help="ZeRO-3: build the model inside zero.Init (partitioned as it is made) or whole first")
    ap.add_argument("--ds-opt", default="torch", choices=("torch", "fused"),
                    help="torch's AdamW, or DeepSpeed's FusedAdam (what a config's \"AdamW\" runs on a GPU)")
    ap.add_argument("--load", action="store_true",
                    help="print the peak of loading (building the model and DeepSpeed's initialize) instead")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--qlora", action="store_true", help="a bitsandbytes NF4 base stored in bf16 (quant_storage), "
                    "as the Trainer shards QLoRA")
    ap.add_argument("--wrap", default="block", choices=("block", "lora"))
    ap.add_argument("--orig", type=int, default=1, choices=(0, 1))
    ap.add_argument("--ga", type=int, default=1)
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--amp", action="store_true")
    ap.add_argument("--fp32", action="store_true")
    ap.add_argument("--gc", action="store_true")
    ap.add_argument("--targets", default="q_proj,v_proj")
    ap.add_argument("--r", type=int, default=16)
    from memtrace import shape_args

    shape_args(ap)
    return ap.parse_args()


def llama_config(a):
    """The Llama-shaped model every rank builds: untied head, SDPA attention."""
    from transformers import LlamaConfig

    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.inter,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv,
                      max_position_embeddings=4096, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    return cfg


def build(a):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    if a.qlora:
        from transformers import BitsAndBytesConfig

        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
                                   bnb_4bit_quant_storage=torch.bfloat16)
        model = LlamaForCausalLM.from_pretrained(a.saved, quantization_config=quant, dtype=torch.bfloat16,
                                                 device_map="cpu", attn_implementation="sdpa")
    else:
        model = LlamaForCausalLM(llama_config(a)).to(torch.float32 if a.fp32 or a.amp else torch.bfloat16)
    model.config.use_cache = False
    if not a.full:
        from peft import LoraConfig, get_peft_model

        pc = LoraConfig(r=a.r, lora_alpha=2 * a.r, lora_dropout=0.0, target_modules=a.targets.split(","),
                        task_type="CAUSAL_LM")
        # The Trainer keeps PEFT's fp32 adapters; under pure bf16 they are cast like the rest (FSDP1 needs one
        # dtype per flat parameter).
        model = get_peft_model(model, pc, autocast_adapter_dtype=a.amp or a.fp32)
        if not (a.amp or a.fp32):
            model = model.to(torch.bfloat16)
    if a.gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if not a.full:
            model.enable_input_require_grads()
    return model


def wrap_fsdp1(a, model):
    import functools

    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    if a.wrap == "lora":
        from peft.utils.other import fsdp_auto_wrap_policy

        policy = fsdp_auto_wrap_policy(model)
    else:
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={LlamaDecoderLayer})
    mp_policy = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                               buffer_dtype=torch.bfloat16) if a.amp else None
    return FSDP(model, auto_wrap_policy=policy, sharding_strategy=ShardingStrategy.FULL_SHARD,
                device_id=torch.device("cpu"), use_orig_params=bool(a.orig), mixed_precision=mp_policy,
                limit_all_gathers=True, sync_module_states=False)


def wrap_fsdp2(a, model):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    mesh = init_device_mesh("cpu", (a.world,))
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if a.amp \
        else MixedPrecisionPolicy()
    for module in model.modules():
        if isinstance(module, LlamaDecoderLayer):
            fully_shard(module, mesh=mesh, mp_policy=mp_policy)
    fully_shard(model, mesh=mesh, mp_policy=mp_policy)
    return model


def ds_config(a):
    """The DeepSpeed config the Trainer would hand over: bf16 (fp32 master partitions of the trainable parameters
    come with it), the Trainer's "auto" sizes (hidden^2, 0.9 hidden^2 and 10 hidden) unless a flag sets one, and
    AdamW: torch's (`torch_adam`) or DeepSpeed's FusedAdam, which a GPU runs for "AdamW" (on the CPU accelerator
    its CPU build: in place, as CUDA's multi-tensor kernel)."""
    h = a.hidden
    zero = {"stage": a.ds, "reduce_bucket_size": a.ds_rbucket or h * h, "contiguous_gradients": bool(a.ds_contig)}
    if a.ds_agbucket:
        zero["allgather_bucket_size"] = a.ds_agbucket
    if a.ds_sub:
        zero["sub_group_size"] = a.ds_sub
    if a.ds_overlap >= 0:
        zero["overlap_comm"] = bool(a.ds_overlap)
    if a.ds == 3:
        zero.update(stage3_prefetch_bucket_size=a.ds_prefetch or int(0.9 * h * h),
                    stage3_param_persistence_threshold=a.ds_persist or 10 * h)
        if a.ds_live:
            zero["stage3_max_live_parameters"] = a.ds_live
        if a.ds_reuse:
            zero["stage3_max_reuse_distance"] = a.ds_reuse
    params = {"lr": 1e-4}
    if a.ds_opt == "torch":
        params["torch_adam"] = True
    return {"train_micro_batch_size_per_gpu": a.b, "gradient_accumulation_steps": a.ga, "bf16": {"enabled": True},
            "zero_optimization": zero, "optimizer": {"type": "AdamW", "params": params}}


def wrap_deepspeed(a, model):
    """DeepSpeed's engine on its CPU accelerator over gloo (see `ds_config`)."""
    import deepspeed

    params = [p for p in model.parameters() if p.requires_grad]
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=params, config=ds_config(a))
    return engine


def worker(rank, a, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(a.world))
    if a.ds:
        os.environ["DS_ACCELERATOR"] = "cpu"
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo")
    else:
        dist.init_process_group("gloo", rank=rank, world_size=a.world)
    torch.set_num_threads(1)
    from memtrace import peak_of

    model = None if a.ds else build(a)

    def load():
        if a.load:
            # A checkpoint loads in its 16-bit dtype (`from_pretrained(..., dtype=torch.bfloat16)`); made here from
            # the config, the parameters are made in it too, not in fp32 first and cast.
            torch.set_default_dtype(torch.bfloat16)
        if a.ds == 3 and a.zinit:
            # The Trainer's `from_pretrained` under ZeRO-3 (`is_deepspeed_zero3_enabled()`): each module is
            # partitioned as it is made; without it the whole model is made first and partitioned by initialize.
            import deepspeed
            # zero.Init patches tensor construction; what imports torch._dynamo (transformers' generation
            # utilities) must be imported before it.
            __import__("torch._dynamo")
            from transformers import LlamaForCausalLM  # noqa: F401
            from transformers.models.llama import modeling_llama  # noqa: F401

            with deepspeed.zero.Init(config_dict_or_path=ds_config(a)):
                built = build(a)
        else:
            built = build(a)
        return wrap_deepspeed(a, built) if a.ds else built

    if a.load:
        # Loading is what is measured: the model is made (on a GPU it is loaded there, here on the CPU, the
        # accelerator) and DeepSpeed partitions it and makes its buffers.
        loaded = []
        out[rank] = peak_of(lambda: loaded.append(load()))["total"]
        dist.barrier()
        dist.destroy_process_group()
        return
    # One process runs the same model unsharded: the reference a sharded step is compared with.
    if a.ds:
        model = load()
    elif a.ddp:
        # The Trainer's DDP: gradients reduced in 25 MB buckets, the buckets' flat buffers beside the gradients.
        # The reducer allocates them in C++ when it wraps the model, where the garbage collector cannot see them:
        # what the wrap leaves allocated is added to the step's base.
        wrapped = []
        hidden = peak_of(lambda: wrapped.append(torch.nn.parallel.DistributedDataParallel(model)))["end"]
        model = wrapped[0]
    elif a.world > 1:
        model = wrap_fsdp1(a, model) if a.fsdp == 1 else wrap_fsdp2(a, model)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = None if a.ds else torch.optim.AdamW(params, lr=1e-4, foreach=True)
    gen = torch.Generator().manual_seed(1 + rank)
    batches = []
    for _ in range(a.ga):
        ids = torch.randint(0, a.vocab, (a.b, a.s), generator=gen)
        batches.append({"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)})

    def micro(batch, sync):
        import contextlib

        ctx = contextlib.nullcontext()
        if a.world == 1:
            pass
        elif a.ddp:
            if not sync:
                ctx = model.no_sync()
        elif a.fsdp == 1 and not sync:
            ctx = model.no_sync()
        elif a.fsdp == 2:
            model.set_requires_gradient_sync(sync)
        with ctx:
            outputs = model(**batch)
            loss = outputs["loss"] / a.ga
            del outputs
            loss.backward()

    def step():
        if a.ds:
            # The engine scales the loss, accumulates, and steps at the accumulation boundary.
            for batch in batches:
                outputs = model(**batch)
                loss = outputs["loss"]
                del outputs
                model.backward(loss)
                model.step()
            return
        for i, batch in enumerate(batches):
            micro(batch, a.sync or i == len(batches) - 1)
        opt.step()
        # The Trainer clears through the model: FSDP1 then also drops each flat parameter's gradient.
        model.zero_grad(set_to_none=True)

    # A step makes the optimizer states; a profiled one follows, because a unit's gathered parameter made in one
    # step is freed in the next, and a profiler session cannot see the free of a block made before it started
    # (the first profiled step reads one unit high); the next profiled step is measured, and one more checks it.
    # DeepSpeed's ZeRO-3 records the order parameters are used in its first steps and prefetches by it after.
    for _ in range(3 if a.ds else 1):
        step()
    peak_of(step)
    if os.environ.get("DETAIL"):
        # Every rank runs the step (its collectives need all of them); rank 0 tells what its peak holds.
        from memtrace import live_at_peak, live_bytes

        base = live_bytes()
        peak, rows = live_at_peak(step)
        if rank == 0:
            print(json.dumps({"base": base, "peak_above": peak}), file=sys.stderr)
            for size, op in rows:
                print(f"{size:>12} {op}", file=sys.stderr)
    result = peak_of(step)
    again = peak_of(step)
    out[rank] = result["total"] + (hidden if a.ddp else 0)
    if a.ds:
        # DeepSpeed's steps differ on some steps by a buffer it has released that a reference cycle keeps until
        # Python's collector runs (a gathered embedding at LoRA's two layers: 303 and 336 MB; the step ends with
        # it still allocated, and `peak_of`'s `gc.collect()` frees it before the next): when the collector runs
        # is the interpreter's, not DeepSpeed's, so the step recorded is the smallest of four, what DeepSpeed
        # allocates once the collector has run.
        out[rank] = min([result["total"], again["total"]] + [peak_of(step)["total"] for _ in range(2)])
    if again["total"] != result["total"]:
        print(f"rank {rank}: steps differ, {result['total']} then {again['total']}", file=sys.stderr)
    dist.barrier()
    dist.destroy_process_group()


def main():
    a = args()
    import random

    port = random.randint(20000, 40000)
    a.saved = None
    if a.qlora:
        # The 16-bit checkpoint every rank quantizes at load, written once before the ranks start.
        import tempfile

        from transformers import LlamaForCausalLM

        torch.manual_seed(0)
        a.saved = tempfile.mkdtemp()
        LlamaForCausalLM(llama_config(a)).to(torch.bfloat16).save_pretrained(a.saved)
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(worker, args=(a, port, out), nprocs=a.world, join=True)
        peaks = [out[r] for r in range(a.world)]
    print(json.dumps({"total": max(peaks), "ranks": peaks}))


if __name__ == "__main__":
    main()
