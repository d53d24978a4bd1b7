"""A lower bound on a task's run time from peak bandwidth and peak FLOP rate (suspect speedups).

bound = max(bytes moved at least once / HBM bandwidth, matmul+conv FLOPs / peak rate), where
bytes = inputs + parameters + outputs (fp32) and the peak rate is that of the precision the
candidate was measured to use (fp32 allows 3xTF32 emulation, i.e. a third of the TF32 peak, when
that beats the fp32 SIMT peak). A measured time below 90% of the bound is physically impossible
for honest work and is flagged "beyond_roofline".

Peaks are dense (no sparsity), SXM parts, from NVIDIA's datasheets. Unknown GPUs: no bound.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peaks:
    hbm_bytes_per_s: float
    fp32_flops: float
    tf32_flops: float
    bf16_flops: float


PEAKS: dict[str, Peaks] = {
    "H200": Peaks(4.8e12, 67e12, 494.7e12, 989.4e12),
    "H100": Peaks(3.35e12, 67e12, 494.7e12, 989.4e12),
}
SLACK = 0.9


def peaks_for(gpu_name: str) -> Peaks | None:
    for key, peaks in PEAKS.items():
        if key in gpu_name.upper():
            return peaks
    return None


def bound_ms(gpu_name: str, flops: float | None, elements: int | None,
             precision: str = "fp32", bytes_per_element: int = 4) -> float | None:
    """Lower bound in milliseconds, or None when the GPU or the task's cost is unknown."""
    peaks = peaks_for(gpu_name)
    if peaks is None or flops is None or elements is None:
        return None
    rate = {"fp32": max(peaks.fp32_flops, peaks.tf32_flops / 3), "tf32": peaks.tf32_flops,
            "bf16": peaks.bf16_flops}.get(precision, peaks.bf16_flops)
    seconds = max(elements * bytes_per_element / peaks.hbm_bytes_per_s, flops / rate)
    return seconds * 1e3


def beyond_roofline(measured_ms: float, bound: float | None) -> bool:
    return bound is not None and measured_ms < SLACK * bound
