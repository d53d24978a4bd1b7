"""Launch-time store coverage: a launch whose stores provably leave part of an output unwritten
for the launched shapes is refused with a LaunchError, on the GPU and in the interpreter.

Why: the verifier proves store.coverage for every shape (verify/check_stores.py: per output
dim, the number of positions the stores can reach, |domain|, against the dim's extent). Where
that depends on the shapes (a dim covered by one tile: `ag.load(X, (row, 0), (1, BN))` with a
row longer than BN) it is only a warning at compile time, because some launches are fine; but
the launch that is not fine would return an output whose tail keeps whatever the buffer held
(NaNs of torch.empty) and say nothing. Here the same claim is evaluated on the launched shape
symbols. |domain| < extent proves that at most |domain| positions along that dim are written,
so the check is exact for what it refuses: it never refuses a launch that covers the output.

The user's word counts: when the kernel states a launch precondition (ag.tag_assume) that this
launch breaks, the premise excludes the launch and nothing is refused here.

Most kernels have no requirement at all (their stores walk every dim with the grid or a loop:
every GEMM), yet finding that out builds the verifier's model of the kernel and imports z3
(0.2-0.4 s of a first launch on the 2-core CPU, as much as the rest of a prebuilt matmul's first
call). So that finding is remembered on disk (runtime/cache.py, kind "coverage", keyed like the
verifier's verdict by the printed kernel and `argus_fingerprint`), and a launch of such a kernel
in a later process imports neither z3 nor the verifier. Only "no requirement" found by the
analysis is remembered: a kernel with requirements needs z3 at each launch to evaluate them, and
one the verifier cannot model is analysed again (a later Argus may model it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from argus.errors import LaunchError, Loc
from argus.ir.core import Kernel

_CLAIM = "|domain| >= extent"


@dataclass(frozen=True)
class Requirement:
    """Along dim `dim` (named `dim_name`) of output `tensor`, the stores at `loc` reach
    `domain` positions; the dim has `extent`; both are terms over the shape symbols."""

    tensor: str
    dim: int
    dim_name: str
    loc: Loc
    domain: Any
    extent: Any
    fix: str


@dataclass(frozen=True)
class Coverage:
    """A kernel's coverage requirements and its stated launch preconditions."""

    kernel: str
    requirements: tuple[Requirement, ...]
    premises: tuple          # the model's premises: tag_assume and shape facts
    symbols: dict            # shape symbol name -> z3 term

    def check(self, values: dict[str, int], exempt: tuple[str, ...] = ()) -> None:
        """Raise LaunchError when, for these shape-symbol values, a requirement provably
        fails and no stated precondition excludes the launch (outputs in `exempt`, the
        kernel's partial_outputs, are written partly on purpose)."""
        if not self.requirements:
            return
        import z3

        subst = [(self.symbols[k], z3.IntVal(int(v))) for k, v in values.items()
                 if k in self.symbols]
        for req in self.requirements:
            if req.tensor in exempt:
                continue
            domain = _concrete(req.domain, subst)
            extent = _concrete(req.extent, subst)
            if domain is None or extent is None or domain >= extent:
                continue
            if any(z3.is_false(z3.simplify(z3.substitute(p, *subst))) for p in self.premises
                   if subst):
                return                        # the kernel's stated precondition excludes this
            fix = (f"walk dim {req.dim} with the grid or an ag.range loop (as "
                   f"examples/softmax_online.py does), or pass compile-time values whose tile "
                   f"covers {req.dim_name} = {extent}")
            raise LaunchError(
                f"kernel {self.kernel}: its stores leave part of {req.tensor} unwritten for "
                f"this launch: dim {req.dim} of {req.tensor} has {req.dim_name} = {extent} "
                f"elements but the store at {req.loc} reaches at most {domain} of them; "
                f"the other {extent - domain} would keep the buffer's old contents",
                fix=fix + (f"; or, if such launches never happen, {req.fix}" if req.fix else "")
                + f"; a kernel that writes part of {req.tensor} on purpose says so: "
                  f"@ag.kernel(partial_outputs=({req.tensor!r},))")


def _concrete(term, subst) -> int | None:
    import z3

    value = z3.simplify(z3.substitute(term, *subst) if subst else term)
    return value.as_long() if z3.is_int_value(value) else None


def _split(claim):
    """(domain, extent) of the claim `domain >= extent` (z3 may have built `extent <= domain`)."""
    import z3

    kind = claim.decl().kind()
    if kind == z3.Z3_OP_GE:
        return claim.arg(0), claim.arg(1)
    if kind == z3.Z3_OP_LE:
        return claim.arg(1), claim.arg(0)
    return None


def of_kernel(kernel: Kernel) -> Coverage:
    """The coverage requirements of a traced or lowered kernel. A kernel the verifier cannot
    model has none: this check refuses only what it can prove."""
    return _analyse(kernel)[0]


def _analyse(kernel: Kernel) -> tuple[Coverage, bool]:
    """(`of_kernel(kernel)`, whether the verifier modelled the kernel)."""
    from argus.verify import check_stores
    from argus.verify.model import Model

    try:
        model = Model(kernel)
        obligations = check_stores.coverage_obligations(model)
    except Exception:  # noqa: BLE001 - unmodelled: nothing is proven, nothing is refused
        return Coverage(kernel.name, (), (), {}), False
    reqs = []
    for store, ob in obligations:
        claim = dict(ob.claims).get(_CLAIM)
        parts = _split(claim) if claim is not None else None
        if parts is None:
            continue
        found = re.match(r"dim (\d+) ", ob.subject)      # "dim 1 of Y stored at ..."
        dim = int(found.group(1)) if found else -1
        if not _counted(model, store, dim):
            continue
        dims = store.tensor.dims
        reqs.append(Requirement(store.tensor.name, dim,
                                str(dims[dim]) if 0 <= dim < len(dims) else "its size",
                                ob.loc, parts[0], parts[1], ob.fix))
    return Coverage(kernel.name, tuple(reqs), tuple(model.premises), dict(model.params)), True


def _counted(model, store, dim: int) -> bool:
    """Whether |domain| bounds the positions the store reaches along `dim`: the destination
    coordinate is a function of the counted variables (program ids, loop and warpgroup
    indices, the tile axis) and launch constants (scalar parameters) only. A coordinate that
    also moves with a value the count does not see (a loop-carried offset `off = off + BN`,
    an opaque or loaded scalar) reaches more positions than |domain|: nothing is proven."""
    from argus.verify import check_stores
    from argus.verify.tagdomain import free_consts, fresh_int

    idx = [fresh_int(f"e{d}") for d in range(len(store.shape))]
    dest = check_stores._dest(store, idx)
    if not 0 <= dim < len(dest):
        return False
    known = {str(v) for v in idx} | set(check_stores._var_ranges(model, store)) | \
        {str(v) for v in model.params.values()}
    return free_consts(dest[dim]) <= known


_CACHE: dict[int, tuple[Kernel, Coverage]] = {}
_CACHE_SIZE = 256


def check_launch(kernel: Kernel, values: dict[str, int], exempt: tuple[str, ...] = ()) -> None:
    """`of_kernel(kernel).check(values, exempt)`, the analysis cached per kernel object and,
    when it finds no requirement, on disk (`remembered`)."""
    hit = _CACHE.get(id(kernel))
    if hit is None or hit[0] is not kernel:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        hit = _CACHE[id(kernel)] = (kernel, remembered(kernel))
    hit[1].check(values, exempt)


def remembered(kernel: Kernel) -> Coverage:
    """`of_kernel(kernel)`, except that a kernel this Argus found to have no requirement
    before (in any process) is not analysed again: no verifier model, no z3. `argus prebuild`
    calls it, so that a prebuilt kernel's first launch finds the record."""
    from argus.runtime import cache

    key = _record_key(kernel)
    record = cache.load(key, kind="coverage")
    if record is not None and record.get("requirements") == 0:
        return Coverage(kernel.name, (), (), {})
    found, modelled = _analyse(kernel)
    if modelled and not found.requirements:
        cache.store(key, {"requirements": 0}, kind="coverage")
    return found


def _record_key(kernel: Kernel) -> str:
    """What the coverage finding depends on: the kernel as printed (ops, layouts, attrs) and
    this Argus (its sources, z3's version)."""
    import hashlib

    from argus.ir.printer import print_kernel
    from argus.runtime.cache import argus_fingerprint

    digest = hashlib.sha256()
    for part in ("coverage v1", argus_fingerprint(), print_kernel(kernel)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def shape_values(kernel: Kernel, tensors) -> dict[str, int]:
    """Shape symbol -> size from the tensors given for the kernel's tensor parameters (in
    order; anything with a .shape). Inconsistent sizes are the launcher's to report."""
    from argus.ir.types import TensorType

    params = [p for p in kernel.params if isinstance(p.value.type, TensorType)]
    values: dict[str, int] = {}
    for p, t in zip(params, tensors):
        for dim, size in zip(p.value.type.shape, getattr(t, "shape", ())):
            if isinstance(dim, str):
                values.setdefault(dim, int(size))
    return values
