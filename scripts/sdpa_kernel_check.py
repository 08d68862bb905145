"""GPT-2-small's causal attention (bf16, batch 32, 12 heads, 1024 x 64) on this GPU, one kernel at a time:
whether each SDPA kernel runs it, and its forward + backward time (CUDA events, median of 20 after 5
warm-ups), then the kernel torch's own order picks (what ``attention: auto`` runs). One line per kernel;
on a CPU says so. The figures behind ``runtime/attention.py``'s ``auto``."""

import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

KERNELS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def time_ms(backend: SDPBackend, q, k, v) -> float:
    grad = torch.randn_like(q)

    def once() -> None:
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)

    for _ in range(5):
        once()
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        once()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


if not torch.cuda.is_available():
    print("sdpa: no CUDA GPU (nothing to check)")
else:
    q, k, v = (
        torch.randn(32, 12, 1024, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    for name, backend in KERNELS.items():
        try:
            ms = time_ms(backend, q, k, v)
            print(f"sdpa {name:9s}: forward + backward {ms:6.3f} ms (bf16, 32 x 12 x 1024 x 64)")
        except RuntimeError as exc:
            print(f"sdpa {name:9s}: refused GPT-2-small's attention: {str(exc).splitlines()[0]}")
    picked = SDPBackend(torch._fused_sdp_choice(q, k, v, is_causal=True)).name  # torch's own dispatch
    print(f"sdpa: torch's order (attention: auto) picks {picked} on {torch.cuda.get_device_name()}")
