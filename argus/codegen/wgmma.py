"""Generate the C++ wrappers of `wgmma.mma_async` (PTX ISA §9.7.15.5.2 "wgmma.mma_async").

One job: for a given (N, A/B/accumulator dtypes, A source, transposes) emit one
`__device__ __forceinline__` function that issues exactly one warpgroup MMA. The fixed parts
(wgmma.fence / commit_group / wait_group, descriptors) live in `device/argus_sm90.cuh`; these
wrappers cannot, because PTX needs one asm operand per accumulator register (128 for m64n256 f32).

Invariants the generated text keeps:
  * the shape is m64nNk16 for f16/bf16, m64nNk8 for tf32 and m64nNk32 for e4m3/e5m2, N a
    multiple of 8 in [8, 256] (32 bytes of K per instruction in every case);
  * `scale_d` is a runtime int turned into the predicate operand (`setp.ne.b32 p, scale_d, 0`), so
    scale_d == 0 computes D = A*B (overwrites) and scale_d != 0 computes D = A*B + D;
  * a `write_only` variant (name suffix `_wo`) takes no scale_d: it always overwrites
    (scale-d = 0) and binds the accumulator registers as outputs only ("=f" / "=r"), so the
    compiler is not asked to keep (or zero) values the instruction never reads; codegen uses
    it where lowering marked the instruction so (ir.ops.Wgmma.acc_write_only);
  * transposes follow PTX: imm-trans-a/b = 0 means K-major (K innermost in smem), 1 means MN-major;
    only f16/bf16 may be transposed (tf32 and fp8 operands are K-major, and their
    instructions take no transpose immediates at all); the register-A form ("rs") has no
    imm-trans-a;
  * the functions are meant to be placed inside `namespace ag` after the header (they use its
    `uint32_t` / `uint64_t`); `wgmma_prelude` does that for a set of shapes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from argus.dtypes import DType

_F16_INPUTS = ("f16", "bf16")
_F8_INPUTS = ("e4m3", "e5m2")
# fp32 data read by the tensor core with a 10-bit mantissa (PTX type .tf32: 32-bit elements,
# the low 13 mantissa bits not used); accumulates in f32 only
_TF32_INPUTS = ("tf32",)
_ACCUMULATORS = ("f32", "f16")


def _dtype_name(dtype: DType | str) -> str:
    return dtype.name if isinstance(dtype, DType) else str(dtype)


@dataclass(frozen=True)
class WgmmaSpec:
    """One wgmma.mma_async variant. Legal when `validate()` passes (checked on construction).

    a_source: "smem" (A via a matrix descriptor, form "ss") or "regs" (A as four 32-bit
    registers holding the m64k16 / m64k32 A fragment, form "rs").
    trans_a / trans_b: the operand is MN-major in smem (x @ W with W row-major [K, N] is
    trans_b=True); f16/bf16 only.
    """

    n: int
    a_dtype: str
    b_dtype: str
    acc_dtype: str = "f32"
    a_source: str = "smem"
    trans_a: bool = False
    trans_b: bool = False
    write_only: bool = False   # always scale-d = 0, accumulator registers output-only

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        a, b, acc = self.a_dtype, self.b_dtype, self.acc_dtype
        where = f"wgmma m64n{self.n} {acc}.{a}.{b}"
        if a in _F16_INPUTS:
            if b != a:
                raise ValueError(f"{where}: f16/bf16 wgmma needs A and B of the same type; "
                                 f"fix: convert B to {a}")
        elif a in _F8_INPUTS:
            if b not in _F8_INPUTS:
                raise ValueError(f"{where}: an fp8 A needs an fp8 B (e4m3 or e5m2)")
        elif a in _TF32_INPUTS:
            if b != a:
                raise ValueError(f"{where}: a tf32 A needs a tf32 B (fp32 data in shared "
                                 f"memory); fix: keep B in fp32")
            if acc != "f32":
                raise ValueError(f"{where}: tf32 inputs accumulate in f32 only (PTX wgmma .tf32)")
        else:
            raise ValueError(f"{where}: unsupported input type {a!r}; supported: "
                             f"{', '.join(_F16_INPUTS + _TF32_INPUTS + _F8_INPUTS)}")
        if acc not in _ACCUMULATORS:
            raise ValueError(f"{where}: unsupported accumulator {acc!r}; supported: f32, f16")
        if a == "bf16" and acc != "f32":
            raise ValueError(f"{where}: bf16 inputs accumulate in f32 only (PTX wgmma .bf16)")
        if not (8 <= self.n <= 256 and self.n % 8 == 0):
            raise ValueError(f"{where}: N must be a multiple of 8 in [8, 256], got {self.n}")
        if self.a_source not in ("smem", "regs"):
            raise ValueError(f"{where}: a_source must be 'smem' or 'regs', got {self.a_source!r}")
        if (self.trans_a or self.trans_b) and a in _F8_INPUTS:
            raise ValueError(f"{where}: fp8 operands must be K-major (PTX has no transpose for "
                             "8-bit wgmma); fix: transpose the tensor in memory")
        if (self.trans_a or self.trans_b) and a in _TF32_INPUTS:
            raise ValueError(f"{where}: tf32 operands must be K-major (PTX has no transpose "
                             "for tf32 wgmma); fix: transpose the tensor in memory")
        if self.trans_a and self.a_source == "regs":
            raise ValueError(f"{where}: A from registers has no transpose (imm-trans-a exists "
                             "only for A in shared memory)")

    @property
    def k(self) -> int:
        """K per instruction: 32 bytes of K per row, i.e. 16 f16/bf16, 8 tf32 or 32 fp8
        elements."""
        if self.a_dtype in _F8_INPUTS:
            return 32
        return 8 if self.a_dtype in _TF32_INPUTS else 16

    @property
    def num_acc_regs(self) -> int:
        """32-bit accumulator registers per thread: N/2 for f32, N/4 (packed f16x2) for f16."""
        return self.n // 2 if self.acc_dtype == "f32" else self.n // 4

    @property
    def name(self) -> str:
        types = self.a_dtype if self.a_dtype == self.b_dtype else f"{self.a_dtype}_{self.b_dtype}"
        form = "ss" if self.a_source == "smem" else "rs"
        suffix = ("_ta" if self.trans_a else "") + ("_tb" if self.trans_b else "") + \
            ("_wo" if self.write_only else "")
        return f"wgmma_m64n{self.n}k{self.k}_{self.acc_dtype}_{types}_{form}{suffix}"

    @property
    def ptx_opcode(self) -> str:
        return (f"wgmma.mma_async.sync.aligned.m64n{self.n}k{self.k}."
                f"{self.acc_dtype}.{self.a_dtype}.{self.b_dtype}")

    def source(self) -> str:
        return _render(self)


def _operand_list(first: int, count: int, per_line: int = 8) -> list[str]:
    """`%first, ..., %(first+count-1)` split into lines of asm string text."""
    names = [f"%{i}" for i in range(first, first + count)]
    return [", ".join(names[i:i + per_line]) for i in range(0, count, per_line)]


def _render(spec: WgmmaSpec) -> str:
    acc_c = "float" if spec.acc_dtype == "f32" else "uint32_t"
    acc_constraint = ("=" if spec.write_only else "+") + ("f" if spec.acc_dtype == "f32" else "r")
    nacc = spec.num_acc_regs
    regs_a = spec.a_source == "regs"

    if regs_a:
        a_param = "const uint32_t (&a)[4]"
        a_text = "{" + ", ".join(f"%{nacc + i}" for i in range(4)) + "}"
        next_index = nacc + 4
    else:
        a_param = "uint64_t desc_a"
        a_text = f"%{nacc}"
        next_index = nacc + 1
    b_index, scale_index = next_index, next_index + 1

    # Immediates after the predicate: imm-scale-a, imm-scale-b (1 = no negation), then the
    # transpose flags, which PTX only has for f16/bf16 (and imm-trans-a only for A in smem).
    immediates = ["1", "1"]
    if spec.a_dtype in _F16_INPUTS:
        if not regs_a:
            immediates.append("1" if spec.trans_a else "0")
        immediates.append("1" if spec.trans_b else "0")

    acc_lines = _operand_list(0, nacc)
    asm = ['"{\\n"', '".reg .pred p;\\n"', f'"setp.ne.b32 p, %{scale_index}, 0;\\n"',
           f'"{spec.ptx_opcode} "', '"{"']
    asm += [f'"{line}{"," if i + 1 < len(acc_lines) else ""} "' for i, line in enumerate(acc_lines)]
    asm += [f'"}}, {a_text}, %{b_index}, p, {", ".join(immediates)};\\n"', '"}\\n"']

    outputs = [f'"{acc_constraint}"(d[{i}])' for i in range(nacc)]
    inputs = [f'"r"(a[{i}])' for i in range(4)] if regs_a else ['"l"(desc_a)']
    inputs += ['"l"(desc_b)', '"r"(0)' if spec.write_only else '"r"(scale_d)']

    def wrap(items: list[str], per_line: int) -> str:
        rows = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
        return (",\n" + " " * 10).join(rows)

    a_kind = "A fragment in registers" if regs_a else ("A MN-major in smem" if spec.trans_a
                                                       else "A K-major in smem")
    b_kind = "B MN-major" if spec.trans_b else "B K-major"
    what = "D = A * B, D's registers written only (scale-d = 0)" if spec.write_only else \
        "scale_d == 0 overwrites D (no zero-fill needed), else accumulates"
    scale_param = "" if spec.write_only else ", int scale_d"
    return (
        f"// PTX ISA §9.7.15.5.2 \"wgmma.mma_async\": {spec.ptx_opcode}\n"
        f"// D[64x{spec.n}] {{=, +=}} A[64x{spec.k}] * B[{spec.k}x{spec.n}]; {a_kind}, {b_kind}.\n"
        f"// {what}.\n"
        f"__device__ __forceinline__ void {spec.name}({acc_c} (&d)[{nacc}], {a_param},\n"
        f"    uint64_t desc_b{scale_param}) {{\n"
        f"    asm volatile(\n"
        + "".join(f"        {line}\n" for line in asm)
        + f"        : {wrap(outputs, 6)}\n"
        f"        : {wrap(inputs, 6)}\n"
        f"        : \"memory\");\n"
        f"}}\n"
    )


def _spec(n: int, a_dtype: DType | str, b_dtype: DType | str, acc_dtype: DType | str,
          a_source: str, trans_b: bool, trans_a: bool) -> WgmmaSpec:
    return WgmmaSpec(n=n, a_dtype=_dtype_name(a_dtype), b_dtype=_dtype_name(b_dtype),
                     acc_dtype=_dtype_name(acc_dtype), a_source=a_source, trans_a=trans_a,
                     trans_b=trans_b)


def wgmma_function_name(n: int, a_dtype: DType | str, b_dtype: DType | str,
                        acc_dtype: DType | str = "f32", a_source: str = "smem",
                        trans_b: bool = False, *, trans_a: bool = False) -> str:
    """The C++ name of the wrapper, e.g. `wgmma_m64n256k16_f32_bf16_ss`."""
    return _spec(n, a_dtype, b_dtype, acc_dtype, a_source, trans_b, trans_a).name


def wgmma_function_source(n: int, a_dtype: DType | str, b_dtype: DType | str,
                          acc_dtype: DType | str = "f32", a_source: str = "smem",
                          trans_b: bool = False, *, trans_a: bool = False) -> str:
    """The C++ definition of the wrapper (to be placed inside `namespace ag`)."""
    return _spec(n, a_dtype, b_dtype, acc_dtype, a_source, trans_b, trans_a).source()


def wgmma_prelude(specs: Iterable[WgmmaSpec]) -> str:
    """`namespace ag { ... }` holding each distinct wrapper once, in first-seen order."""
    seen: dict[str, WgmmaSpec] = {}
    for spec in specs:
        seen.setdefault(spec.name, spec)
    body = "\n".join(spec.source() for spec in seen.values())
    return f"namespace ag {{\n\n{body}\n}}  // namespace ag\n"
