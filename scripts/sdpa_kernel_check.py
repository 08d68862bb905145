"""Which SDPA kernel GPT-2-small's attention gets on this GPU: the flash kernel alone, forced, must run
(a RuntimeError means torch would fall back to a slower one). Prints one line; on a CPU says so."""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

if not torch.cuda.is_available():
    print("sdpa: no CUDA GPU (nothing to check)")
else:
    q, k, v = (
        torch.randn(32, 12, 1024, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        torch.cuda.synchronize()
        print("sdpa: the flash kernel runs GPT-2-small's causal attention (bf16, 32 x 12 x 1024 x 64)")
    except RuntimeError as exc:
        print(f"sdpa: the flash kernel refused GPT-2-small's attention: {str(exc).splitlines()[0]}")
