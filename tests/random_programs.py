"""Random small tile programs, written twice: as an Argus kernel and as numpy.

Job: `generate(seed)` builds one reproducible program — loads with out-of-bounds `other`
values, elementwise math, comparisons and `ag.where`, reductions over any axis with keepdims
broadcasting back, `ag.arange` index tiles and masks, runtime `ag.range` loops with carried
values (running sums and maxima, swaps, counters), `ag.when` blocks, stores — as the Python
source of an `@ag.kernel` and, statement by statement, as the Python source of a numpy function
of the same structure (one `for pid` loop over the grid). Both texts are real source, exec'd,
so a failing program prints as a readable kernel next to its reference.

Invariant: the numpy text never calls the interpreter; it computes in float32 like the
interpreter's semantics (argus/runtime/interp/), so interpreter and reference agree to
rounding. `check_contract` and `check_against_reference` are the two CPU checks of
tests/unit/test_random_programs.py; tests/gpu/test_random_programs_gpu.py reuses `generate`.
"""

from __future__ import annotations

import math
import random
import textwrap
from dataclasses import dataclass, field
from unittest import mock

import numpy as np

import argus as ag
from argus.dsl.values import Tile


@dataclass
class Var:
    name: str
    shape: tuple[int, ...]
    dtype: str = "f32"  # "f32" or "i32"


@dataclass
class Program:
    seed: int
    threads: int
    kernel_source: str
    reference_source: str
    params: list[tuple[str, np.ndarray]]  # signature order: inputs, trip tensor, outputs
    outputs: list[str]
    features: set[str] = field(default_factory=set)

    def kernel(self):
        """A fresh `@ag.kernel` from the source (its own trace and compile caches)."""
        namespace = {"ag": ag}
        exec(compile(self.kernel_source, f"<random program {self.seed}>", "exec"), namespace)
        return namespace["k"]

    def arrays(self) -> list[np.ndarray]:
        return [a.copy() for _, a in self.params]

    def reference(self) -> dict[str, np.ndarray]:
        namespace = {"np": np, "load": _load, "store": _store, "erf": _erf}
        exec(compile(self.reference_source, f"<reference {self.seed}>", "exec"), namespace)
        arrays = dict(zip((n for n, _ in self.params), self.arrays()))
        namespace["reference"](**arrays)
        return {n: arrays[n] for n in self.outputs}

    def describe(self) -> str:
        shapes = ", ".join(f"{n}{tuple(a.shape)}" for n, a in self.params)
        return (f"random program seed={self.seed} (tests/random_programs.py), "
                f"arrays {shapes}\n--- kernel ---\n{self.kernel_source}"
                f"--- numpy reference ---\n{self.reference_source}")


# ----------------------------------------------------------------------------- numpy helpers


def _load(x: np.ndarray, offsets, shape, other: float) -> np.ndarray:
    """The box of `shape` at `offsets`, `other` where it leaves the tensor (float32)."""
    coords = [np.asarray(o) + i for o, i in zip(offsets, np.indices(shape))]
    inside = np.ones(shape, bool)
    for c, n in zip(coords, x.shape):
        inside &= (c >= 0) & (c < n)
    out = np.full(shape, other, dtype=np.float32)
    out[inside] = x[tuple(c[inside] for c in coords)]
    return out


def _store(y: np.ndarray, offsets, tile: np.ndarray) -> None:
    """Write `tile` at `offsets`, dropping what falls outside `y`."""
    coords = [np.asarray(o) + i for o, i in zip(offsets, np.indices(tile.shape))]
    inside = np.ones(tile.shape, bool)
    for c, n in zip(coords, y.shape):
        inside &= (c >= 0) & (c < n)
    y[tuple(c[inside] for c in coords)] = tile[inside]


def _erf(x: np.ndarray) -> np.ndarray:
    return np.asarray([math.erf(float(v)) for v in x.ravel()], np.float32).reshape(x.shape)


# ----------------------------------------------------------------------------- the generator

_UNARY = [  # (kernel expression, numpy expression) of one f32 tile `v`
    ("ag.exp(ag.minimum({v}, 4.0))", "np.exp(np.minimum({v}, np.float32(4.0)))"),
    ("ag.exp2(ag.minimum({v}, 4.0))", "np.exp2(np.minimum({v}, np.float32(4.0)))"),
    ("ag.log(ag.abs_({v}) + 1.0)", "np.log(np.abs({v}) + np.float32(1.0))"),
    ("ag.sqrt(ag.abs_({v}))", "np.sqrt(np.abs({v}))"),
    ("ag.rsqrt(ag.abs_({v}) + 1.0)", "np.float32(1.0) / np.sqrt(np.abs({v}) + np.float32(1.0))"),
    ("ag.tanh({v})", "np.tanh({v})"),
    ("ag.sigmoid({v})", "np.float32(1.0) / (np.float32(1.0) + np.exp(-{v}))"),
    ("ag.relu({v})", "np.maximum({v}, np.float32(0.0))"),
    ("ag.erf({v})", "erf({v})"),
    ("-{v}", "-{v}"),
    ("ag.abs_({v})", "np.abs({v})"),
    ("{v} * 0.5", "{v} * np.float32(0.5)"),
    ("2.0 - {v}", "np.float32(2.0) - {v}"),
    ("{v} + 1.5", "{v} + np.float32(1.5)"),
]

_BINARY = [  # of two f32 tiles `a`, `b`
    ("{a} + {b}", "{a} + {b}"),
    ("{a} - {b}", "{a} - {b}"),
    ("{a} * {b}", "{a} * {b}"),
    ("{a} / (ag.abs_({b}) + 1.0)", "{a} / (np.abs({b}) + np.float32(1.0))"),
    ("ag.maximum({a}, {b})", "np.maximum({a}, {b})"),
    ("ag.minimum({a}, {b})", "np.minimum({a}, {b})"),
    ("ag.where({a} > {b}, {a}, {b} * 0.5)", "np.where({a} > {b}, {a}, {b} * np.float32(0.5))"),
    ("ag.where({a} <= 0.25, {a}, -1.0)", "np.where({a} <= np.float32(0.25), {a}, "
                                          "np.float32(-1.0))"),
    ("ag.where(({a} > 0.0) & ({b} < 0.5), {a}, {b})",
     "np.where(({a} > np.float32(0.0)) & ({b} < np.float32(0.5)), {a}, {b})"),
    ("ag.where(~({a} >= {b}) | ({a} < -1.0), {b}, 0.0)",
     "np.where(~({a} >= {b}) | ({a} < np.float32(-1.0)), {b}, np.float32(0.0))"),
]

_REDUCE = {"sum": "{v}.sum(axis={d}, keepdims=True)", "max": "{v}.max(axis={d}, keepdims=True)",
           "min": "{v}.min(axis={d}, keepdims=True)", "prod": "{v}.prod(axis={d}, keepdims=True)",
           "argmax": "np.expand_dims({v}.argmax(axis={d}), {d}).astype(np.int32)",
           "argmin": "np.expand_dims({v}.argmin(axis={d}), {d}).astype(np.int32)"}

_HAS_ARANGE = hasattr(ag, "arange")
_HAS_ARG = hasattr(Tile, "argmax")


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(max(x, y) for x, y in zip(a, b))


class _Gen:
    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.k_lines: list[str] = []
        self.r_lines: list[str] = []
        self.depth = 0        # nesting of ag.range / ag.when blocks
        self.count = 0
        self.pool: list[Var] = []
        self.inputs: list[tuple[str, np.ndarray, Var]] = []
        self.features: set[str] = set()
        self.loop_vars: list[str] = []
        self.used: set[str] = set()  # values read since their last assignment

    # -- text ------------------------------------------------------------------------------
    def emit(self, kernel: str, reference: str | None = None) -> None:
        self.k_lines.append("    " * (1 + self.depth) + kernel)
        self.r_lines.append("    " * (2 + self.depth) + (kernel if reference is None
                                                         else reference))

    def fresh(self, shape, dtype="f32") -> Var:
        self.count += 1
        return Var(f"t{self.count}", tuple(shape), dtype)

    def bind(self, kernel: str, reference: str, shape, dtype="f32") -> Var:
        v = self.fresh(shape, dtype)
        self.emit(f"{v.name} = {kernel}", f"{v.name} = {reference}")
        if dtype == "f32":
            self.pool.append(v)
        return v

    # -- choices ---------------------------------------------------------------------------
    def pick_shape(self) -> tuple[int, ...]:
        r = self.rng
        rank = r.choice([1, 1, 1, 2, 2, 2, 2, 2, 3, 4])
        if rank == 1:
            return (r.choice([1, 3, 7, 32, 64, 100, 128, 200, 256, 384, 512, 1000, 1024, 2048]),)
        if rank == 2:
            return (r.choice([1, 1, 2, 3, 4, 5, 8, 16, 32]),
                    r.choice([1, 3, 7, 16, 32, 48, 64, 96, 100, 128, 200, 256, 512]))
        lead = tuple(r.choice([1, 2, 3, 4]) for _ in range(rank - 1))
        return lead + (r.choice([1, 5, 8, 32, 64, 100, 128, 256]),)

    def f32(self, shape=None) -> Var:
        cands = [v for v in self.pool if v.dtype == "f32"
                 and (shape is None or _broadcast(v.shape, shape) == tuple(shape))]
        v = self.rng.choice(cands)
        self.used.add(v.name)
        return v

    # -- statements ------------------------------------------------------------------------
    def add_input(self, shape, loop_axis: bool) -> str:
        """A global input tensor for tiles of `shape`; extents that may leave tiles partly
        outside (the `other` value)."""
        r = self.rng
        name = f"X{len(self.inputs)}"
        extents = []
        for d, n in enumerate(shape):
            base = n * (self.grid if d == 0 else 1) * (self.max_trips if loop_axis and
                                                         d == len(shape) - 1 else 1)
            extents.append(max(1, base + r.choice([0, 0, -1, 3, -(n // 2)])))
        data = np.random.default_rng(self.seed * 7 + len(self.inputs)).standard_normal(
            extents).astype(np.float32)
        self.inputs.append((name, data, Var(name, tuple(shape))))
        return name

    def load(self, shape, loop_var: str | None = None) -> Var:
        r = self.rng
        shape = tuple(1 if r.random() < 0.2 and n > 1 else n for n in shape) \
            if r.random() < 0.3 else tuple(shape)
        name = self.add_input(shape, loop_var is not None)
        offsets = []
        for d, n in enumerate(shape):
            terms = []
            if d == 0:
                terms.append(f"pid * {n}")
            if loop_var is not None and d == len(shape) - 1:
                terms.append(f"{loop_var} * {n}")
            o = r.choice([0, 0, 0, 1, -1, n // 2])
            if o or not terms:
                terms.append(str(o))
            offsets.append(" + ".join(terms))
        offs = "(" + ", ".join(offsets) + ("," if len(offsets) == 1 else "") + ")"
        other = r.choice([0.0, 0.0, 1.0, -3.0])
        self.features.add("load")
        kernel = f"ag.load({name}, {offs}, {shape}" + (f", other={other})" if other else ")")
        return self.bind(kernel, f"load({name}, {offs}, {shape}, {other})", shape)

    def unary(self) -> Var:
        v = self.f32()
        k, n = self.rng.choice(_UNARY)
        self.features.add("unary")
        return self.bind(k.format(v=v.name), n.format(v=v.name), v.shape)

    def binary(self, shape=None) -> Var:
        a, b = self.f32(shape), self.f32(shape)
        k, n = self.rng.choice(_BINARY)
        self.features.add("where" if "where" in k else "binary")
        return self.bind(k.format(a=a.name, b=b.name), n.format(a=a.name, b=b.name),
                         _broadcast(a.shape, b.shape))

    def reduce(self) -> Var:
        r = self.rng
        v = self.f32()
        d = r.randrange(len(v.shape))
        fns = ["sum", "max", "min", "sum", "max"] + (["prod", "argmax", "argmin"] if _HAS_ARG
                                                    else [])
        fn = r.choice(fns)
        shape = tuple(1 if i == d else n for i, n in enumerate(v.shape))
        self.features.add(f"reduce-{fn}")
        if fn == "prod":  # factors in [0.9, 1.1]: 1000 of them stay finite
            src = self.bind(f"ag.tanh({v.name}) * 0.1 + 1.0",
                            f"np.tanh({v.name}) * np.float32(0.1) + np.float32(1.0)", v.shape)
            v = src
        if fn in ("argmax", "argmin"):
            idx = self.bind(f"{v.name}.{fn}({d})", _REDUCE[fn].format(v=v.name, d=d), shape,
                            "i32")
            self.ints.append(idx)
            out = self.bind(f"{idx.name}.to(ag.f32)", f"{idx.name}.astype(np.float32)", shape)
        else:
            out = self.bind(f"{v.name}.{fn}({d})", _REDUCE[fn].format(v=v.name, d=d), shape)
        if r.random() < 0.6:  # broadcast back against the source
            k, n = r.choice([("{v} - {s}", "{v} - {s}"),
                             ("{v} / (ag.abs_({s}) + 1.0)",
                              "{v} / (np.abs({s}) + np.float32(1.0))"),
                             ("ag.where({v} >= {s}, 1.0, {v})",
                              "np.where({v} >= {s}, np.float32(1.0), {v})")])
            self.features.add("broadcast-back")
            out = self.bind(k.format(v=v.name, s=out.name), n.format(v=v.name, s=out.name),
                            v.shape)
        return out

    def index_mask(self) -> Var:
        """An ag.arange index tile along one axis, as a mask against the input's extent or as
        values."""
        r = self.rng
        v = self.f32()
        rank = len(v.shape)
        d = r.randrange(rank)
        n = v.shape[d]
        index = ", ".join(":" if i == d else "None" for i in range(rank))
        k_idx = f"ag.arange({n})" + (f"[{index}]" if rank > 1 else "")
        r_idx = f"np.arange({n}, dtype=np.int32)" + (f"[{index}]" if rank > 1 else "")
        idx = self.bind(k_idx, r_idx, tuple(n if i == d else 1 for i in range(rank)), "i32")
        self.ints.append(idx)
        self.features.add("arange")
        choice = r.randrange(3)
        if choice == 0:
            limit = r.randrange(1, n + 1)
            return self.bind(f"ag.where({idx.name} < {limit}, {v.name}, 0.0)",
                             f"np.where({idx.name} < {limit}, {v.name}, np.float32(0.0))",
                             v.shape)
        if choice == 1:
            return self.bind(f"{v.name} + {idx.name}.to(ag.f32) * 0.01",
                             f"{v.name} + {idx.name}.astype(np.float32) * np.float32(0.01)",
                             v.shape)
        start = "pid * 3" if not self.loop_vars else f"{self.loop_vars[-1]} * 2"
        return self.bind(f"ag.where({idx.name} + {start} >= {n // 2}, {v.name}, -{v.name})",
                         f"np.where({idx.name} + {start} >= {n // 2}, {v.name}, -{v.name})",
                         v.shape)

    def fit(self, v: Var, shape) -> Var:
        """Reduce `v` along the dims where `shape` is 1, so that it broadcasts into `shape`."""
        for d, (a, b) in enumerate(zip(v.shape, shape)):
            if b == 1 and a > 1:
                fn = self.rng.choice(["sum", "max", "min"])
                self.features.add(f"reduce-{fn}")
                out_shape = tuple(1 if i == d else n for i, n in enumerate(v.shape))
                v = self.bind(f"{v.name}.{fn}({d})", _REDUCE[fn].format(v=v.name, d=d), out_shape)
        return v

    def statements(self, n: int) -> None:
        r = self.rng
        for _ in range(n):
            kind = r.choice(["unary", "binary", "binary", "reduce", "reduce", "index", "load"])
            if kind == "unary":
                self.unary()
            elif kind == "binary":
                self.binary()
            elif kind == "reduce":
                self.reduce()
            elif kind == "index" and _HAS_ARANGE:
                self.index_mask()
            elif kind == "load":
                self.load(self.shape)

    def loop(self) -> None:
        r = self.rng
        carried = [v for v in self.pool]
        r.shuffle(carried)
        carried = carried[:r.choice([1, 2, 2, 3])]
        counter = r.random() < 0.5
        scale = r.random() < 0.3
        if counter:
            self.emit("cnt = ag.scalar(0)", "cnt = 0")
        if scale:
            self.emit("scale = ag.scalar(1.0)", "scale = np.float32(1.0)")
        var = f"i{len(self.loop_vars)}"
        self.emit(f"for {var} in ag.range(T.shape[0]):", f"for {var} in range(T.shape[0]):")
        self.features.add("loop")
        self.loop_vars.append(var)
        self.depth += 1
        outer_pool, outer_ints = list(self.pool), list(self.ints)
        x = self.load(self.shape, loop_var=var)
        self.statements(r.randrange(0, 3))
        for acc in carried:
            how = r.choice(["sum", "max", "decay", "swap"])
            same = [v for v in carried if v is not acc and v.shape == acc.shape]
            if how == "swap" and same:
                other = same[0]
                self.emit(f"{acc.name}, {other.name} = {other.name}, {acc.name}")
                self.features.add("swap")
                continue
            src = self.fit(self.rng.choice([x] + [v for v in self.pool if v not in outer_pool]),
                           acc.shape)
            if how == "max":
                self.emit(f"{acc.name} = ag.maximum({acc.name}, {src.name})",
                          f"{acc.name} = np.maximum({acc.name}, {src.name})")
                self.features.add("carry-max")
            elif how == "decay":
                self.emit(f"{acc.name} = {acc.name} * 0.5 + {src.name}",
                          f"{acc.name} = {acc.name} * np.float32(0.5) + {src.name}")
                self.features.add("carry-decay")
            else:
                self.emit(f"{acc.name} = {acc.name} + {src.name}")
                self.features.add("carry-sum")
        if counter:
            self.emit("cnt = cnt + 1")
        if scale:
            self.emit("scale = scale * 0.5", "scale = scale * np.float32(0.5)")
        if carried and r.random() < 0.5:
            acc = carried[0]
            cond = r.choice([f"{var} % 2 == 0", f"{var} > 0"] + (["cnt > 1"] if counter else []))
            self.emit(f"with ag.when({cond}):", f"if {cond}:")
            self.depth += 1
            self.emit(f"{acc.name} = {acc.name} - 1.0", f"{acc.name} = {acc.name} - "
                                                        "np.float32(1.0)")
            self.depth -= 1
            self.features.add("when-in-loop")
        self.depth -= 1
        self.loop_vars.pop()
        self.pool, self.ints = outer_pool, outer_ints
        self.used -= {v.name for v in carried}  # their new values are live
        if counter and carried and r.random() < 0.5:
            acc = carried[-1]
            self.bind(f"{acc.name} * cnt", f"{acc.name} * np.float32(cnt)", acc.shape)
            self.features.add("tile-times-int-scalar")
        if scale and carried:
            acc = carried[0]
            self.bind(f"{acc.name} * scale", f"{acc.name} * scale", acc.shape)
            self.features.add("tile-times-f32-scalar")

    def when_block(self) -> None:
        v = self.f32()
        cond = self.rng.choice(["pid == 0", "pid > 0", "T.shape[0] > 1"])
        self.emit(f"with ag.when({cond}):", f"if {cond}:")
        self.depth += 1
        self.emit(f"{v.name} = {v.name} * 2.0 + 1.0",
                  f"{v.name} = {v.name} * np.float32(2.0) + np.float32(1.0)")
        self.depth -= 1
        self.features.add("when")

    def combine_live(self) -> Var:
        """One tile that depends on every value not read yet (nothing is dead code)."""
        live = [v for v in self.pool if v.name not in self.used] or [self.pool[-1]]
        out = max(live, key=lambda v: math.prod(v.shape))
        for v in live:
            if v is out:
                continue
            v = self.fit(v, out.shape)
            k, n = self.rng.choice([("{a} + {b}", "{a} + {b}"),
                                    ("ag.maximum({a}, {b})", "np.maximum({a}, {b})"),
                                    ("{a} - {b} * 0.5", "{a} - {b} * np.float32(0.5)")])
            out = self.bind(k.format(a=out.name, b=v.name), n.format(a=out.name, b=v.name),
                            out.shape)
        return out

    # -- the program -----------------------------------------------------------------------
    def program(self) -> Program:
        r = self.rng
        self.ints: list[Var] = []
        self.shape = self.pick_shape()
        self.threads = r.choice([128, 128, 256, 256, 512])
        self.grid = r.choice([1, 1, 2, 3])
        self.max_trips = r.choice([0, 1, 2, 3])
        self.load(self.shape)
        if r.random() < 0.6:
            self.load(self.shape)
        self.statements(r.randrange(1, 5))
        if r.random() < 0.6:
            self.loop()
        if r.random() < 0.3:
            self.when_block()
        self.statements(r.randrange(0, 3))
        outputs = [self.combine_live()]
        if r.random() < 0.3:
            outputs.append(r.choice(self.pool))
        if self.ints and r.random() < 0.5:
            outputs.append(r.choice(self.ints))
        return self.finish(outputs)

    def finish(self, outputs: list[Var]) -> Program:
        r = self.rng
        out_params = []
        for j, v in enumerate(outputs):
            name = f"Y{j}"
            # fixed extents that the grid x tile covers (the verifier's store.coverage), some
            # clipping the last tile
            extents = [max(1, n * (self.grid if d == 0 else 1) + r.choice([0, 0, 0, -1]))
                       for d, n in enumerate(v.shape)]
            poison = (np.full(extents, np.nan, np.float32) if v.dtype == "f32"
                      else np.full(extents, -7, np.int32))
            offs = ", ".join([f"pid * {v.shape[0]}"] + ["0"] * (len(v.shape) - 1))
            offs = f"({offs}{',' if len(v.shape) == 1 else ''})"
            self.emit(f"ag.store({name}, {offs}, {v.name})", f"store({name}, {offs}, {v.name})")
            out_params.append((name, poison, v))
        trips = self.max_trips
        params = [(n, a) for n, a, _ in self.inputs]
        params.append(("T", np.zeros(trips, np.float32)))
        params += [(n, a) for n, a, _ in out_params]
        sig = []
        for n, a, _ in self.inputs:
            dims = ", ".join(f'"{n}d{d}"' for d in range(a.ndim))
            sig.append(f"{n}: ag.Tensor[{dims}, ag.f32]")
        sig.append('T: ag.Tensor["trips", ag.f32]')
        for n, a, v in out_params:
            dims = ", ".join(str(e) for e in a.shape)
            sig.append(f"{n}: ag.Tensor[{dims}, ag.{v.dtype}]")
        kernel = (f"@ag.kernel(threads={self.threads})\n"
                  f"def k({', '.join(sig)}):\n"
                  f"    (pid,) = ag.grid({self.grid})\n" + "\n".join(self.k_lines) + "\n")
        names = ", ".join(n for n, _ in params)
        reference = (f"def reference({names}):\n"
                     f"    for pid in range({self.grid}):\n" + "\n".join(self.r_lines) + "\n")
        self.features.add(f"rank-{len(self.shape)}")
        return Program(self.seed, self.threads, kernel, reference, params,
                       [n for n, _, _ in out_params], self.features)


def generate(seed: int) -> Program:
    """The random program of `seed` (the same program on every machine and run)."""
    return _Gen(seed).program()


# ----------------------------------------------------------------------------- the checks


def interpret(program: Program):
    """(outputs by name, None) when the interpreter runs the program, else (None, the
    exception)."""
    arrays = program.arrays()
    try:
        program.kernel().interpret(*arrays)
    except ag.ArgusError as e:
        return None, e
    names = [n for n, _ in program.params]
    return {n: arrays[names.index(n)] for n in program.outputs}, None


def compile_front_end(program: Program):
    """What `compile` says about the program short of the verifier and NVRTC: None when it
    would build, else its exception (argus.compiler.compile_kernel with NVRTC stubbed)."""
    from argus import compiler

    with mock.patch.object(compiler, "_compile", lambda source: None):
        try:
            compiler.compile_kernel(program.kernel(), verify=False)
        except ag.ArgusError as e:
            return e
    return None


def check_contract(program: Program, interpreted_error) -> None:
    """(1) interpret and compile's front end accept, or refuse with one type and message."""
    compiled_error = compile_front_end(program)
    same = (interpreted_error is None and compiled_error is None) or (
        interpreted_error is not None and compiled_error is not None
        and type(interpreted_error) is type(compiled_error)
        and str(interpreted_error) == str(compiled_error))
    assert same, (f"interpret and compile disagree:\n  interpret: {interpreted_error!r}\n"
                  f"  compile:   {compiled_error!r}\n{program.describe()}")


def check_against_reference(program: Program, outputs: dict[str, np.ndarray],
                            rtol: float = 1e-5, atol: float = 1e-5, what="interpreter") -> None:
    """(2) the outputs match the numpy reference (NaN = never written, must match too)."""
    compare_outputs(program, outputs, program.reference(), rtol, atol, what, "numpy reference")


def compare_outputs(program: Program, outputs, expected, rtol: float, atol: float, what: str,
                    against: str) -> None:
    for name in program.outputs:
        got, want = np.asarray(outputs[name]), np.asarray(expected[name])
        if want.dtype.kind == "i":
            ok = np.array_equal(got, want)
        else:
            ok = np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        if not ok:
            bad = np.argwhere(~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True))
            first = tuple(int(i) for i in bad[0])
            raise AssertionError(
                f"{what} != {against} for {name}: {len(bad)} of {want.size} elements "
                f"differ, first at {first}: got {got[first]!r}, expected {want[first]!r}\n"
                + textwrap.indent(program.describe(), "  "))
