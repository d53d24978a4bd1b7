"""Which kernels a composed KernelBench solution spends its GPU time in, beside eager's, on the
GPU: each forward runs under torch.profiler (after warm-up calls), and the per-kernel CUDA
time is printed for ours (ModelNew) and for the task's Model (eager), with the bytes of the
forward's input and output and the bandwidth they imply over the whole forward.

    .venv/bin/python -m argus kernelbench solve --level 1 --ids 67,87 --compose-only \
        --precision tf32 --out /tmp/kbs
    python scripts/gpu_kb_kernel_profile.py /tmp/kbs/solutions/level1/67_*.py ...

A kernel list longer than one conv kernel shows the layout and rounding passes around it; a
forward far below ~4 TB/s over its input + output bytes is not memory bound.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem.replace(".", "_").lstrip("0123456789_")
                                                  or "task", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _profile(fn, torch, reps: int = 3):
    from torch.profiler import ProfilerActivity, profile
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    rows = {}
    for e in prof.events():
        if e.device_type.name != "CUDA":
            continue
        name = e.name[:90]
        t, n = rows.get(name, (0.0, 0))
        rows[name] = (t + e.device_time_total / reps, n + 1)
    return sorted(rows.items(), key=lambda kv: -kv[1][0])


def main() -> int:
    import torch
    for arg in sys.argv[1:]:
        path = Path(arg)
        mod = _load(path)
        torch.manual_seed(0)
        ref = mod.Model(*mod.get_init_inputs()).cuda().eval()
        ours = mod.ModelNew(*mod.get_init_inputs()).cuda().eval()
        ours.load_state_dict(ref.state_dict())
        xs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
        with torch.no_grad():
            out = ref(*xs)
            nbytes = sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))
            nbytes += out.numel() * out.element_size()
            print(f"\n== {path.name}: inputs {[tuple(x.shape) for x in xs if hasattr(x, 'shape')]}"
                  f" -> {tuple(out.shape)}, in + out {nbytes / 1e9:.2f} GB")
            for who, model in (("ours", ours), ("eager", ref)):
                rows = _profile(lambda: model(*xs), torch)
                total = sum(t for _, (t, _) in rows)
                print(f"-- {who}: {total / 1e3:.3f} ms a forward, "
                      f"{nbytes / (total * 1e-6) / 1e12:.2f} TB/s over in + out")
                for name, (t, n) in rows[:8]:
                    print(f"   {t / 1e3:8.3f} ms  x{n // 3:<3d} {name}")
            del out
        del ours, ref, xs
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
