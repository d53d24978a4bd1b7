"""Hash the generated CUDA of every library kernel, example and test corpus kernel, for a
before/after check of a change that must not move generated code (a refactor of the IR,
lowering or codegen).

    .venv/bin/python scripts/cuda_hashes.py > /tmp/before.txt
    ... the change ...
    .venv/bin/python scripts/cuda_hashes.py > /tmp/after.txt
    diff /tmp/before.txt /tmp/after.txt     # empty: byte-identical CUDA

One line per source: `<sha256[:16]> <key>`; a kernel that the front end refuses prints
`refused:<exception type> <key>` (a refusal must not move either). The corpus: the library
GEMM/fp8 replay cases (tests/golden/test_library_cuda_replay.py), the library attention
schedules (default, every epilogue, ping-pong), the MoE kernels (tests/moe/test_moe_verify.py),
every example at its default constexprs (and the looped/online softmax at several BN, where
lower/prefetch.py unrolls), the reductions corpus (tests/unit/reduce_kernels.py, outside and
inside a role) and the random tile programs of tests/random_programs.py. `--only PREFIX`
restricts to keys that start with PREFIX; `--text DIR` also writes each source to
DIR/<hash>.cu (to diff two runs' sources).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import argus as ag  # noqa: E402
from argus import codegen  # noqa: E402
from argus.compiler import lower_only  # noqa: E402


def cases():
    """(key, thunk returning (kernel_fn, constexprs)) in a stable order."""
    from tests.golden.test_library_cuda_replay import _cases

    for key, kernel, schedule in _cases():
        yield f"library {key}", (lambda k=kernel, s=schedule: (k, {"s": s}))

    from argus.kernels.attention import attention_kernel, base_schedule
    from tests.verify.test_attention_schedules import CASES as ATT

    for d, dt, causal, lse, epi in ATT:
        for ordered in (False, True):
            def build(d=d, dt=dt, causal=causal, lse=lse, epi=epi, ordered=ordered):
                s = dataclasses.replace(base_schedule(d), epilogue=epi,
                                        ordered=ordered)
                return attention_kernel(d, dt, causal, lse), {"s": s}
            yield f"attention d{d} {dt.name} causal={causal} lse={lse} {epi} " \
                  f"ordered={ordered}", build

    from tests.moe.test_moe_verify import KERNELS as MOE

    for name, build in MOE:
        yield f"moe {name}", build

    from argus.demo import load_example

    for name in ("elementwise", "softmax", "gemm", "rmsnorm", "softmax_online",
                 "flash_attention"):
        yield f"example {name}", (lambda n=name: (load_example(n).KERNEL, {}))
    for bn in (512, 1024, 2048, 4096):
        yield f"example softmax_online BN={bn}", \
            (lambda bn=bn: (load_example("softmax_online").KERNEL, {"BN": bn}))
    for d, causal in ((64, True), (128, False), (128, True)):
        yield f"example flash_attention d{d} causal={causal}", \
            (lambda d=d, c=causal: (load_example("flash_attention").attention_kernel(d, c), {}))

    from tests.unit import reduce_kernels as K
    from tests.unit.test_reductions_broadcasts import CASES as RED

    for rank, axis, fn in RED:
        for in_role in (False, True):
            yield f"reduce rank={rank} axis={axis} {fn} in_role={in_role}", \
                (lambda r=rank, a=axis, f=fn, i=in_role:
                 (K.reduce_any, dict(rank=r, axis=a, fn=f, in_role=i)))
    for name in ("rmsnorm", "masked", "acc_softmax"):
        yield f"reduce {name}", (lambda n=name: (getattr(K, n), {}))
    from tests.unit.test_reductions_broadcasts import two_warpgroup_rows

    yield "reduce two_warpgroup_rows", (lambda: (two_warpgroup_rows, {}))
    from tests.passes import test_prefetch as P

    for name in ("in_place", "carried_offset", "too_wide", "row_dot"):
        yield f"prefetch {name}", (lambda n=name: (getattr(P, n), {}))

    from tests.random_programs import generate

    for seed in range(300):
        yield f"random seed={seed}", (lambda s=seed: (generate(s).kernel(), {}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--text", type=Path)
    args = ap.parse_args()
    if args.text:
        args.text.mkdir(parents=True, exist_ok=True)
    for key, build in cases():
        if not key.startswith(args.only):
            continue
        try:
            fn, consts = build()
            text = codegen.render(lower_only(fn, **consts)).text
        except (ag.TraceError, ag.CompileError, ValueError, TypeError) as e:
            print(f"refused:{type(e).__name__} {key}", flush=True)
            continue
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        print(f"{digest} {key}", flush=True)
        if args.text:
            (args.text / f"{digest}.cu").write_text(text)


if __name__ == "__main__":
    main()
