"""TRL's log-probability kernels as CUDA runs them, on a CPU: shared by the TRL harnesses (pref_step.py,
grpo_step.py).

`take_cuda_path()` makes TRL take CUDA's path of the fused head (compact: only the labelled positions), computed by
the torch tiles, and feeds the torch fallback a few rows (or inner columns) at a time. On CUDA a Triton kernel folds
each [tokens, 32768] tile of logits into per-token statistics in place, backward turns the tile into its gradient in
place, and the gradient GEMMs accumulate into fp32 with `addmm(out_dtype=float32)`: nothing is allocated but the
tile buffer and the fp32 accumulators. The torch fallback this CPU runs upcasts whole tiles (several fp32
tile-sized temporaries, and fp32 copies of both GEMM operands); fed a row at a time, its arithmetic unchanged, its
temporaries stay under a megabyte and the trace shows CUDA's buffers.
"""
import torch
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


BLOCK, ROWS_AT_ONCE = 4096, 4


def _row_groups(logits):
    """(first flat row, a [rows, vocab] view) over a possibly strided logits view, without copying it."""
    if logits.ndim == 1:
        yield 0, logits.unsqueeze(0)
        return
    flat = 0
    for b in (logits if logits.ndim == 3 else [logits]):
        for r in range(0, b.shape[0], ROWS_AT_ONCE):
            yield flat, b[r:r + ROWS_AT_ONCE]
            flat += b[r:r + ROWS_AT_ONCE].shape[0]


def _blocks(rows, temperature):
    """Rows' logits in fp32, 4096 columns at a time: (first column, block)."""
    for k in range(0, rows.shape[-1], BLOCK):
        yield k, rows[:, k:k + BLOCK].float() / temperature


class _RowsLogProbEntropy(torch.autograd.Function):
    """`trl/kernels/logprob_entropy.py`'s `_LogProbEntropyFunction` with its Triton kernels' arithmetic done in
    torch 4 rows and 4096 columns at a time, its allocations CUDA's: four fp32
    per-token tensors in forward (log-probabilities, entropy, log-sum-exp, expected logit), the logits (a view)
    saved, and one contiguous logits-sized gradient in backward. A block's fp32 temporaries (64 KB each) are all
    the emulation adds."""

    @staticmethod
    def forward(ctx, logits, index, temperature, row_mask):
        logprobs = torch.empty(logits.shape[:-1], dtype=torch.float32)
        entropy, log_z, expected = (torch.empty_like(logprobs) for _ in range(3))
        lp, en, lzs, ex = (t.view(-1) for t in (logprobs, entropy, log_z, expected))
        idx = index.reshape(-1)
        for i, rows in _row_groups(logits):
            j = slice(i, i + rows.shape[0])
            lz = torch.logsumexp(torch.stack([torch.logsumexp(x, -1) for _, x in _blocks(rows, temperature)]), 0)
            e = sum(((x - lz[:, None]).exp() * x).sum(-1) for _, x in _blocks(rows, temperature))
            chosen = rows.gather(-1, idx[j, None]).squeeze(-1).float() / temperature
            lp[j], en[j], lzs[j], ex[j] = chosen - lz, lz - e, lz, e
        if row_mask is not None:
            logprobs.masked_fill_(row_mask == 0, 0.0)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(logits, index, log_z, expected, row_mask)
        ctx.temperature = temperature
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy):
        logits, index, log_z, expected, row_mask = ctx.saved_tensors
        grad = torch.empty_like(logits, memory_format=torch.contiguous_format)
        g_all, idx = grad.view(-1, grad.shape[-1]), index.reshape(-1)
        t = ctx.temperature
        glp = torch.zeros_like(log_z.view(-1)) if grad_logprobs is None else grad_logprobs.reshape(-1).float()
        gen = None if grad_entropy is None else grad_entropy.reshape(-1).float()
        if row_mask is not None:
            keep = (row_mask.reshape(-1) != 0).float()
            glp, gen = glp * keep, None if gen is None else gen * keep
        for i, rows in _row_groups(logits):
            j = slice(i, i + rows.shape[0])
            lz, e = log_z.view(-1)[j, None], expected.view(-1)[j, None]
            for k, x in _blocks(rows, t):
                p = (x - lz).exp()
                g = p.mul_(-glp[j, None]) if gen is None else -(glp[j, None] * p) - gen[j, None] * p * (x - e)
                g_all[j, k:k + x.shape[1]].copy_(g / t)
            for r in range(i, i + rows.shape[0]):  # the chosen token's share, one element each
                g_all[r, idx[r]] += glp[r] / t
        return grad, None, None, None


def take_cuda_logprob_kernel():
    """Patches TRL in place so that `selective_log_softmax` (the experimental ORPO and CPO trainers' full-logits
    path) takes its CUDA branch, the fused log-softmax kernel, emulated by `_RowsLogProbEntropy`."""
    def on_cpu_too(logits, index=None, row_mask=None):
        # `_supports_trl_loss_kernel`'s conditions but the device's.
        return (logits.dtype in (torch.float16, torch.bfloat16, torch.float32) and 1 <= logits.ndim <= 3
                and logits.stride(-1) == 1 and logits.shape[-1] > 0
                and (index is None or (index.shape == logits.shape[:-1] and index.dtype in (torch.int32, torch.int64)))
                and (row_mask is None or (index is not None and row_mask.shape == index.shape)))

    tu._supports_trl_loss_kernel = on_cpu_too
    tu._fused_logprob_entropy = lambda logits, index, temperature=1.0, row_mask=None: _RowsLogProbEntropy.apply(
        logits, index, temperature, row_mask)
