"""The chunked linear cross-entropy equals ``F.cross_entropy(F.linear(h, w), t)``: loss and gradients in
fp32 and under bf16 autocast, with ignored rows and a ragged last chunk, eager and compiled."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from gpulab.engines.torch.linear_cross_entropy import MAX_CHUNKS, chunk_rows, linear_cross_entropy

ROWS, HIDDEN, VOCAB = 300, 32, 500
# bf16: each chunk's weight gradient is rounded to bf16 once, as the unchunked head's one matmul is, then
# summed in fp32; the two differ by bf16 rounding (2**-8 relative), so the bound is 1 % of the largest.
BF16_TOLERANCE = 1e-2


def _inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(ROWS, HIDDEN, generator=g, dtype=dtype).requires_grad_()
    w = (0.1 * torch.randn(VOCAB, HIDDEN, generator=g, dtype=dtype)).requires_grad_()
    t = torch.randint(0, VOCAB, (ROWS,), generator=g)
    t[[3, 100, 299]] = -100  # ignored, as padding is
    return h, w, t


def _loss_and_grads(fn, h, w, t, bf16=False):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = fn(h, w, t)
    return (loss, *torch.autograd.grad(loss, (h, w)))


def _whole(h, w, t):
    return F.cross_entropy(F.linear(h, w), t)


@pytest.mark.parametrize("rows", [1, 7, 64, ROWS])  # one row a chunk, ragged, even, one chunk
def test_fp32_loss_and_gradients_equal_the_whole_logits_to_1e_6(rows):
    h, w, t = _inputs()
    expected = _loss_and_grads(_whole, h, w, t)
    got = _loss_and_grads(lambda *a: linear_cross_entropy(*a, rows=rows), h, w, t)
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-6, atol=1e-6)


def test_bf16_autocast_matches_the_whole_logits_within_bf16_rounding():
    h, w, t = _inputs()
    expected = _loss_and_grads(_whole, h, w, t, bf16=True)
    got = _loss_and_grads(lambda *a: linear_cross_entropy(*a, rows=64), h, w, t, bf16=True)
    assert got[0].dtype == torch.float32  # the loss in fp32, as autocast's cross_entropy gives it
    torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=0)
    for e, g in zip(expected[1:], got[1:], strict=True):
        assert g.dtype == e.dtype == torch.float32
        assert (g - e).abs().max() <= BF16_TOLERANCE * e.abs().max()
    # and no less accurate than the whole logits, against fp64
    exact = _loss_and_grads(_whole, *(x.detach().double().requires_grad_() for x in (h, w)), t)
    for e, g, x in zip(expected[1:], got[1:], exact[1:], strict=True):
        assert (g.double() - x).abs().max() <= 1.25 * (e.double() - x).abs().max()


def test_without_gradients_the_loss_is_the_same_and_builds_no_graph():
    h, w, t = _inputs()
    with torch.no_grad():
        loss = linear_cross_entropy(h, w, t, rows=64)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, _whole(h, w, t).detach(), rtol=1e-6, atol=1e-6)


def test_every_row_ignored_is_nan_as_f_cross_entropy_says():
    h, w, t = _inputs()
    t[:] = -100
    assert torch.isnan(linear_cross_entropy(h, w, t, rows=64)) and torch.isnan(_whole(h, w, t))


def test_a_leading_batch_dimension_is_flattened_as_the_head_reads_it():
    h, w, t = _inputs()
    three_d = linear_cross_entropy(h[:296].reshape(8, 37, HIDDEN), w, t[:296].reshape(8, 37), rows=50)
    torch.testing.assert_close(three_d, _whole(h[:296], w, t[:296]), rtol=1e-6, atol=1e-6)


def test_chunks_hold_logits_about_the_size_of_the_hidden_rows_and_at_most_sixteen():
    assert chunk_rows(32 * 1024, 768, 50304) == 2048  # GPT-2-small: 66 by the size rule, capped at 16
    assert 32 * 1024 // chunk_rows(32 * 1024, 768, 50304) == MAX_CHUNKS
    assert chunk_rows(512, 64, 512) == 64  # 8 chunks: 512 logits a row, 64 hidden
    assert chunk_rows(100, 128, 96) == 100  # the vocabulary no wider than the hidden rows: one chunk
    assert chunk_rows(3, 8, 4096) == 1
    assert chunk_rows(0, 8, 4096) == 1  # an empty batch still steps through its (no) rows


def test_a_second_derivative_is_refused_not_silently_wrong():
    """The backward scales gradients saved as constants: differentiated again it would say h does not
    matter (zero), so it refuses."""
    h, w, t = _inputs()
    scale = torch.ones((), requires_grad=True)  # a graph through the backward, as create_graph builds
    loss = linear_cross_entropy(h, w, t, rows=64)
    (grad_h,) = torch.autograd.grad(loss, h, grad_outputs=scale, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        grad_h.sum().backward()


@pytest.mark.parametrize("bf16", [False, True])
def test_it_compiles_as_one_graph_with_the_eager_loss_and_gradients(bf16):
    h, w, t = _inputs()
    fn = lambda h, w, t: linear_cross_entropy(h, w, t, rows=64)  # noqa: E731
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)  # a graph break would raise
    expected = _loss_and_grads(fn, h, w, t, bf16)
    got = _loss_and_grads(compiled, h, w, t, bf16)
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-6, atol=1e-6)
