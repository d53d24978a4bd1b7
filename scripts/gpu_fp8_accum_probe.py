"""Probe: how far does the H200's FP8 wgmma accumulation move attention's log-sum-exp?

DeepSeek-V3's report (section 3.3.2) measured the FP8 tensor-core accumulator on Hopper keeping
about 14 bits, not fp32's 24. For attention that moves each score by up to ~2^-14 of the sum of
|q_d k_d|, and the LSE with it. This prints, per case, the LSE error of argus.ops.attention_fp8
against float64 and of a reference whose scores come from cuBLAS's FP8 GEMM (torch._scaled_mm,
fast accumulation: no promotion, the same hardware accumulator) against float64, and the bound
2^-13 * scale * max_j sum_d |q_d k_d| that tests/gpu/test_attention_fp8_gpu.py uses."""

import math

import torch

import argus.ops

E4M3 = torch.float8_e4m3fn


def quant(x):
    s = x.abs().amax().float().item() / 448.0
    return (x.float() / s).to(E4M3), s


def main():
    g = torch.Generator(device="cuda").manual_seed(0)
    for S, D in ((1024, 128), (1024, 64), (1024, 256)):
        q8, qs = quant(torch.randn(1, 4, S, D, device="cuda", generator=g) * 3)
        k8, ks = quant(torch.randn(1, 4, S, D, device="cuda", generator=g))
        v8, vs = quant(torch.randn(1, 4, S, D, device="cuda", generator=g) * 0.5)
        scale = 1 / math.sqrt(D)
        _, lse = argus.ops.attention_fp8(q8, k8, v8, q_scale=qs, k_scale=ks, v_scale=vs,
                                         return_lse=True)
        qd, kd = q8.double() * qs, k8.double() * ks
        s64 = qd @ kd.transpose(-1, -2) * scale
        lse64 = torch.logsumexp(s64, -1)
        bound = 2.0 ** -13 * scale * (qd.abs() @ kd.abs().transpose(-1, -2)).amax(-1)
        row = [f"S={S} D={D}: ours-f64 max {(lse.double() - lse64).abs().max():.2e}",
               f"bound min {bound.min():.2e} max {bound.max():.2e}",
               f"worst err/bound {((lse.double() - lse64).abs() / bound).max():.3f}"]
        one = torch.ones((), device="cuda")
        for fast in (True, False):
            try:
                s = torch.stack([torch._scaled_mm(q8[0, h], k8[0, h].t(), one * qs, one * ks,
                                                  out_dtype=torch.float32,
                                                  use_fast_accum=fast)
                                 for h in range(4)])[None].double() * scale
                lse_c = torch.logsumexp(s, -1)
                row.append(f"cublas fast={fast}: -f64 {(lse_c - lse64).abs().max():.2e}, "
                           f"-ours {(lse_c - lse.double()).abs().max():.2e}")
            except Exception as e:  # noqa: BLE001
                row.append(f"cublas fast={fast}: {type(e).__name__} {str(e)[:80]}")
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
