"""The measurement the harnesses share: a step's peak allocated bytes on CPU (and the Llama shape's arguments).

`peak_of(step)` runs `step` once under torch's profiler and returns the bytes live before it (every tensor storage
the garbage collector can reach: weights, adapters, optimizer states) plus the highest running sum of the
profiler's allocation events during it, the CPU counterpart of `torch.cuda.max_memory_allocated` (CPU allocations
are not rounded to blocks), and what the step left allocated (0 when it frees what it made).
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
    seen, total = set(), 0
    for obj in gc.get_objects():
        try:
            if torch.is_tensor(obj):
                storage = obj.untyped_storage()
                if storage.data_ptr() in seen or storage.nbytes() == 0:
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
    events = []

    def walk(node):
        if node.tag == _EventType.Allocation and str(node.extra_fields.device) == "cpu":
            events.append((node.start_time_ns, node.extra_fields.alloc_size))
        for child in node.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    events.sort()
    current = peak = 0
    for _, size in events:
        current += size
        peak = max(peak, current)
    return {"base": base, "peak_above": peak, "total": base + peak, "end": current}


def report(step):
    """Prints the peak of a steady step as JSON: one step first, so optimizer states exist as in every later one.
    With DETAIL=1 in the environment, what the peak holds goes to stderr first (`live_at_peak`)."""
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
    events = []

    def walk(node, op):
        if node.tag == _EventType.Allocation and str(node.extra_fields.device) == "cpu":
            events.append((node.start_time_ns, node.extra_fields.alloc_size, node.extra_fields.ptr, op))
        for child in node.children:
            walk(child, node.name if node.tag != _EventType.Allocation else op)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root, "?")
    events.sort()
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
