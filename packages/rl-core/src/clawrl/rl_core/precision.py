"""Which precision the updates run in: ``"fp32"``, ``"bf16"`` or ``"auto"``.

bf16 autocast is fast only where the device has native bf16 matmul kernels: a CUDA device
that supports bf16, or a CPU with AVX-512 BF16 or AMX (oneDNN). On an AVX2-only CPU (most
laptops and many servers) torch runs bf16 matmuls on reference kernels, over 100 times
slower than fp32 (1.1 against 183 GFLOP/s on a 2-core Zen 3; ``tools/perf/roofline.py``).
``"auto"`` picks bf16 where it is native and fp32 elsewhere.
"""

from __future__ import annotations

import logging
from typing import Literal

import torch

__all__ = ["bf16_is_native", "resolve_precision"]

log = logging.getLogger("clawrl.rl_core")


def bf16_is_native(device: torch.device | str = "cpu") -> bool:
    """Whether bf16 matmuls run on native kernels on ``device`` (see the module doc)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if dev.type != "cpu":
        return True
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def resolve_precision(
    precision: str, device: torch.device | str = "cpu"
) -> Literal["fp32", "bf16"]:
    """``"auto"`` → ``"bf16"`` where :func:`bf16_is_native` on ``device``, else ``"fp32"``;
    ``"fp32"`` and ``"bf16"`` are kept (an explicit bf16 without native kernels is logged as
    a warning: it is far slower than fp32 there)."""
    if precision == "auto":
        return "bf16" if bf16_is_native(device) else "fp32"
    if precision == "bf16" and not bf16_is_native(device):
        log.warning(
            "precision bf16 on %s without native bf16 kernels (no AVX-512 BF16 or AMX): "
            "matmuls run over 100 times slower than fp32 here; use 'auto' or 'fp32'",
            device,
        )
    return "bf16" if precision == "bf16" else "fp32"
