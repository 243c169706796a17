"""TRL's fused log-probability head as CUDA runs it, on a CPU: shared by the TRL harnesses (pref_step.py,
grpo_step.py).

`take_cuda_path()` makes TRL take CUDA's path of the fused head (compact: only the labelled positions), computed by
the torch tiles, and feeds the torch fallback a few rows (or inner columns) at a time. On CUDA a Triton kernel folds
each [tokens, 32768] tile of logits into per-token statistics in place, backward turns the tile into its gradient in
place, and the gradient GEMMs accumulate into fp32 with `addmm(out_dtype=float32)`: nothing is allocated but the
tile buffer and the fp32 accumulators. The torch fallback this CPU runs upcasts whole tiles (several fp32
tile-sized temporaries, and fp32 copies of both GEMM operands); fed a row at a time, its arithmetic unchanged, its
temporaries stay under a megabyte and the trace shows CUDA's buffers.
"""
import trl.kernels.chunked_logprob as chunked
import trl.trainer.utils as tu

ROWS, INNER = 1, 4
_forward_tile, _backward_tile = chunked._forward_tile, chunked._backward_tile


def forward_rows(tile, stride, targets, *stats, **kw):
    # stats: the seven per-token accumulators, then vocab_start and n_cols.
    per_token, rest = stats[:7], stats[7:]
    for i in range(0, tile.shape[0], ROWS):
        j = slice(i, i + ROWS)
        _forward_tile(tile[j], stride, targets[j], *(t[j] for t in per_token), *rest, **kw)


def backward_rows(tile, stride, targets, log_z, entropy, grad_logprobs, grad_entropy, *rest, **kw):
    for i in range(0, tile.shape[0], ROWS):
        j = slice(i, i + ROWS)
        _backward_tile(tile[j], stride, targets[j], log_z[j], entropy[j], grad_logprobs[j], grad_entropy[j],
                       *rest, **kw)


def addmm_inner(acc, a, b):
    for k in range(0, a.shape[1], INNER):
        acc.addmm_(a[:, k:k + INNER].float(), b[k:k + INNER].float())


def take_cuda_path():
    """Patches TRL in place: call before the trainer is built."""
    tu._use_triton = lambda device: True
    chunked._forward_tile, chunked._backward_tile, chunked._addmm_fp32 = forward_rows, backward_rows, addmm_inner
