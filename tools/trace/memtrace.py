"""The measurement the harnesses share: a step's peak allocated bytes on CPU (and the Llama shape's arguments).

`peak_of(step)` runs `step` once under torch's profiler and returns the bytes live before it (every tensor storage
the garbage collector can reach: weights, adapters, optimizer states) plus the highest running sum of the
profiler's allocation events during it, the CPU counterpart of `torch.cuda.max_memory_allocated` (CPU allocations
are not rounded to blocks), and what the step left allocated (0 when it frees what it made). What gloo allocates
to stage an all-gather, which NCCL does not, is left out (`STAGED_IN`).

`sequence_of(step, path)` writes the allocation sequence itself, storage by storage, for the caching-allocator
simulator to replay (the core test `traced_sequences_replay_as_the_engine`): what is live before the first step,
then two steps' allocations and frees in order. `report` writes it first when `SEQUENCE=path` is set.
"""
import gc
import json

import torch
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile


def shape_args(ap):
    """The Llama-shaped model's size arguments, with the defaults every traced table starts from."""
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--inter", type=int, default=1376)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv", type=int, default=8)


def live_bytes():
    """Bytes of every CPU tensor storage the garbage collector can reach. Storages on other devices hold no memory
    here: DeepSpeed's ZeRO-1 and 2 keep `meta` tensors of the trainable parameters' shapes, all at address 0, and
    counting them (once, at that address) added whichever came first, a vocab x hidden one in a full fine-tune."""
    seen, total = set(), 0
    for obj in gc.get_objects():
        try:
            if torch.is_tensor(obj):
                storage = obj.untyped_storage()
                if storage.data_ptr() in seen or storage.nbytes() == 0 or storage.device.type != "cpu":
                    continue
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        except Exception:
            pass
    return total


def peak_of(step):
    gc.collect()
    base = live_bytes()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    current = peak = 0
    for size in allocations(prof):
        current += size
        peak = max(peak, current)
    return {"base": base, "peak_above": peak, "total": base + peak, "end": current}


# What gloo allocates for a gather that NCCL does not: an all-gather into one tensor (`_allgather_base`, as DeepSpeed
# and FSDP gather) goes to gloo's list all-gather, whose work gathers into a new flat tensor of the output's size and
# copies it out (`newLikeFlat`), and the dispatcher's op makes one more of that size; NCCL's writes the output in
# place. Traced: loading a full fine-tune under ZeRO-3 held the head whole twice more than DeepSpeed allocates
# (32,768,000 B each) while DeepSpeed gathered it to hook its gradient.
STAGED_IN = ("c10d::_allgather_base_", "gloo:all_gather")


def allocations(prof):
    """The CPU allocation events' sizes in time order (frees negative), less what a collective stages."""
    return [size for _, size, _, _ in unstaged(sorted(cpu_events(prof)))]


def cpu_events(prof):
    """Every CPU allocation and free the profile recorded, in the tree's order: (start ns, bytes, address, the op
    that made it, whether a collective staged it)."""
    events = []

    def walk(node, op, staged):
        if node.tag == _EventType.Allocation and str(node.extra_fields.device) == "cpu":
            events.append((node.start_time_ns, node.extra_fields.alloc_size, node.extra_fields.ptr, op, staged))
            return
        for child in node.children:
            walk(child, node.name, staged or node.name in STAGED_IN)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root, "?", False)
    return events


def unstaged(events):
    """`events` in time order without what a collective staged: (start ns, bytes, address, op). A staged block may
    be freed outside the collective (by the worker that completes it), so its free is matched by address; an
    address a later block reuses is that block's."""
    out, staged_live = [], set()
    for t, size, ptr, op, staged in events:
        if size > 0:
            if staged:
                staged_live.add(ptr)
                continue
            staged_live.discard(ptr)
        elif ptr in staged_live:
            staged_live.discard(ptr)
            continue
        out.append((t, size, ptr, op))
    return out


class SkipMatmuls:
    """A dispatch mode that hands matrix products and attention kernels an uninitialized output of the shape,
    dtype and strides the real kernel returns (its meta kernel's), instead of computing it. A CPU without bf16
    instructions multiplies bf16 at well under 1 GFLOP/s, so real widths (a 7B model's 4096 x 11008 layers) would
    take hours; the allocation sequence needs the outputs' sizes, not their values. What a CPU kernel allocates
    inside itself (bf16 converted to fp32) is left out, as CUDA's kernels have no such copies."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        aten = torch.ops.aten
        skipped = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
                   aten._scaled_dot_product_flash_attention_for_cpu.default,
                   aten._scaled_dot_product_flash_attention_for_cpu_backward.default}

        def to_meta(x):
            return x.to("meta") if torch.is_tensor(x) else x

        def empty_like_meta(m):
            return torch.empty_strided(m.shape, m.stride(), dtype=m.dtype) if torch.is_tensor(m) else m

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func not in skipped:
                    return func(*args, **kwargs)
                meta = func(*torch.utils._pytree.tree_map(to_meta, args),
                            **torch.utils._pytree.tree_map(to_meta, kwargs))
                return torch.utils._pytree.tree_map(empty_like_meta, meta)

        self.mode = Mode()

    def __enter__(self):
        return self.mode.__enter__()

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def live_storages():
    """Every tensor storage the garbage collector can reach: (data pointer, bytes), each storage once."""
    seen, rows = set(), []
    for obj in gc.get_objects():
        try:
            if torch.is_tensor(obj):
                storage = obj.untyped_storage()
                if storage.data_ptr() in seen or storage.nbytes() == 0 or storage.device.type != "cpu":
                    continue
                seen.add(storage.data_ptr())
                rows.append((storage.data_ptr(), storage.nbytes()))
        except Exception:
            pass
    return rows


def sequence_of(step, path, steps=2):
    """Writes the allocation sequence of `steps` steps to `path`, one event a line: `a,TAG,BYTES` allocates,
    `f,TAG` frees, `step` starts a step. What is live before the first step (weights, adapters, the batch) comes
    first as allocations; the first step creates the optimizer's states, as a real run's does. CPU allocations
    are exact sizes: the simulator rounds them as CUDA's allocator would."""
    gc.collect()
    tags, next_tag, lines = {}, 0, []
    for ptr, size in live_storages():
        tags[ptr] = next_tag
        lines.append(f"a,{next_tag},{size}")
        next_tag += 1
    for _ in range(steps):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step()
        # Sorted by time alone: a free and the allocation that reuses its address can share a timestamp, and the
        # profiler lists them in order.
        events = unstaged(sorted(cpu_events(prof), key=lambda e: e[0]))
        lines.append("step")
        for _, size, ptr, _ in events:
            if size > 0:
                tags[ptr] = next_tag
                lines.append(f"a,{next_tag},{size}")
                next_tag += 1
            elif size < 0 and ptr in tags:
                lines.append(f"f,{tags.pop(ptr)}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def report(step):
    """Prints the peak of a steady step as JSON: one step first, so optimizer states exist as in every later one.
    With DETAIL=1 in the environment, what the peak holds goes to stderr first (`live_at_peak`); with SEQUENCE=path,
    the allocation sequence of the first two steps (SEQUENCE_STEPS steps) goes to path first (`sequence_of`); with SKIP_MATMULS=1, matrix
    products and attention are not computed (`SkipMatmuls`)."""
    import os
    if os.environ.get("SKIP_MATMULS"):
        inner = step

        def step():
            with SkipMatmuls():
                inner()
    if os.environ.get("SEQUENCE"):
        # The traced steps (two, or SEQUENCE_STEPS) leave the optimizer's states made, as the first step would.
        sequence_of(step, os.environ["SEQUENCE"], int(os.environ.get("SEQUENCE_STEPS", 2)))
    else:
        step()
    if __import__("os").environ.get("DETAIL"):
        import sys
        peak, rows = live_at_peak(step)
        for size, op in rows:
            print(f"{size:>12} {op}", file=sys.stderr)
    print(json.dumps(peak_of(step)))


def live_at_peak(step, top=int(__import__("os").environ.get("TOP", 25))):
    """What is live at the step's peak, largest first: (bytes, op that allocated it); for finding a gap."""
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = unstaged(sorted(cpu_events(prof)))
    # Frees of blocks made before the step (what the step releases of the base) show as negative rows.
    live, current, peak, at_peak, freed, at_freed, peak_op = {}, 0, 0, {}, [], [], "?"
    for _, size, ptr, op in events:
        current += size
        if size > 0:
            live[ptr] = (size, op)
        elif ptr in live:
            live.pop(ptr)
        else:
            freed.append((size, "freed by " + op))
        if current > peak:
            peak, at_peak, at_freed, peak_op = current, dict(live), list(freed), op
    rows = sorted(list(at_peak.values()) + at_freed, key=lambda r: -abs(r[0]))
    return peak, [(0, "peak at " + peak_op)] + rows[:top]
