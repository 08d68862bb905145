"""GPT-2-small's causal attention (bf16, batch 32, 12 heads, 1024 x 64) on this GPU, one kernel at a time:
whether each SDPA kernel runs it, and its forward + backward time (median of 20 after 5 warm-ups), then the
kernel torch's own order picks (what ``attention: auto`` runs). One line per kernel. Without a GPU the same
lines for a tiny fp32 attention on the CPU (``tests/test_gpu_measure.py`` runs it so), where the kernels a
CPU lacks say they refused. The figures behind ``runtime/attention.py``'s ``auto``."""

import statistics
import time

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
        if q.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        once()
        if q.is_cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


gpu = torch.cuda.is_available()
device, dtype, shape = (
    ("cuda", torch.bfloat16, (32, 12, 1024, 64)) if gpu else ("cpu", torch.float32, (2, 2, 64, 16))
)
what = f"{'bf16' if gpu else 'fp32 on the CPU, no GPU'}, {' x '.join(map(str, shape))}"
q, k, v = (torch.randn(*shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
for name, backend in KERNELS.items():
    try:
        print(f"sdpa {name:9s}: forward + backward {time_ms(backend, q, k, v):7.3f} ms ({what})")
    except RuntimeError as exc:
        print(f"sdpa {name:9s}: refused ({what}): {str(exc).splitlines()[0]}")
picked = SDPBackend(torch._fused_sdp_choice(q, k, v, is_causal=True)).name  # torch's own dispatch
where = torch.cuda.get_device_name() if gpu else "this CPU"
print(f"sdpa: torch's order (attention: auto) picks {picked} on {where}")
