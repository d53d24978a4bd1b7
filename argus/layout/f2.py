"""Linear layouts over F2 (Triton `LinearLayout` style) for register fragments and swizzles.

Job: represent a layout whose every dimension is a power of two and whose map is XOR-linear
in the index bits, as the images of the basis vectors. Named input dims (e.g. "register",
"lane", "warp", "offset") map to named output dims (e.g. "row", "col", "offset"):

    L(x) = XOR over every set bit b of every input dim d of bases[d][b]

Composition, inversion, products and equality are then bit-matrix operations, and two such
layouts are equal iff their bases are (INVARIANTS.md §3.6: the 20–100 µs fast path).

Invariant kept: an `F2Layout` is exactly its function. Conversions from shape:stride and
swizzled layouts (`from_layout`) and from Python formulas (`from_function`) check that the map
really is F2-linear (power-of-two sizes, no carries between basis images) and raise ValueError
otherwise; they never return a linear layout that differs from the source at some point.

Packing convention (used by `apply_packed`, `table`, `reshape_ins`/`reshape_outs`): the input
dims are concatenated into one integer with the first dim in the lowest bits, likewise the
output dims.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from argus.layout import arith
from argus.layout import inttuple as it
from argus.layout.shape_stride import Layout
from argus.layout.swizzle import ComposedLayout, Swizzle

Dims = tuple[tuple[str, int], ...]          # ((name, size), ...), sizes are powers of two
Bases = tuple[tuple[tuple[int, ...], ...], ...]   # bases[in_dim][bit][out_dim]


def _bits(size: int, what: str) -> int:
    if not arith.is_pow2(size):
        raise ValueError(f"F2Layout: size {size} of {what} is not a power of two; F2 linear "
                         "layouts need power-of-two dims (use a shape:stride Layout instead)")
    return int(size).bit_length() - 1


def _norm_dims(dims: Sequence[tuple[str, int]] | Mapping[str, int], what: str) -> Dims:
    items = list(dims.items()) if isinstance(dims, Mapping) else list(dims)
    out = []
    for name, size in items:
        if not isinstance(name, str):
            raise TypeError(f"F2Layout: {what} names must be strings, got {name!r}")
        _bits(int(size), f"{what} {name!r}")
        out.append((name, int(size)))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"F2Layout: duplicate {what} names in {names}")
    return tuple(out)


@dataclass(frozen=True)
class F2Layout:
    """A linear map over F2 from named input dims to named output dims, stored as bases."""

    in_dims: Dims
    out_dims: Dims
    bases: Bases

    def __post_init__(self) -> None:
        in_dims = _norm_dims(self.in_dims, "input dim")
        out_dims = _norm_dims(self.out_dims, "output dim")
        if len(self.bases) != len(in_dims):
            raise ValueError(f"F2Layout: {len(self.bases)} basis lists for {len(in_dims)} inputs")
        bases = []
        for (name, size), imgs in zip(in_dims, self.bases):
            imgs = tuple(tuple(int(v) for v in img) for img in imgs)
            if len(imgs) != _bits(size, name):
                raise ValueError(f"F2Layout: input {name!r} of size {size} needs "
                                 f"{_bits(size, name)} basis images, got {len(imgs)}")
            for b, img in enumerate(imgs):
                if len(img) != len(out_dims):
                    raise ValueError(f"F2Layout: image of {name}[bit {b}] has {len(img)} "
                                     f"components for {len(out_dims)} output dims")
                for (oname, osize), v in zip(out_dims, img):
                    if not 0 <= v < osize:
                        raise ValueError(f"F2Layout: image of {name}[bit {b}] has {oname}={v}, "
                                         f"outside [0, {osize})")
            bases.append(imgs)
        object.__setattr__(self, "in_dims", in_dims)
        object.__setattr__(self, "out_dims", out_dims)
        object.__setattr__(self, "bases", tuple(bases))

    # ---- constructors ----------------------------------------------------------------------
    @staticmethod
    def from_bases(bases: Mapping[str, Sequence[Sequence[int]]],
                   out_dims: Sequence[tuple[str, int]] | Mapping[str, int]) -> F2Layout:
        """Triton style: {"lane": [(0, 1), (0, 2), ...], ...}; input sizes = 2**len(images)."""
        in_dims = tuple((name, 1 << len(imgs)) for name, imgs in bases.items())
        return F2Layout(in_dims, tuple(_norm_dims(out_dims, "output dim")),
                        tuple(tuple(tuple(img) for img in imgs) for imgs in bases.values()))

    @staticmethod
    def identity(name: str, size: int, out_name: str | None = None) -> F2Layout:
        nb = _bits(size, name)
        return F2Layout(((name, size),), ((out_name or name, size),),
                        (tuple((1 << b,) for b in range(nb)),))

    @staticmethod
    def zeros(in_dims: Sequence[tuple[str, int]], out_dims: Sequence[tuple[str, int]]) -> F2Layout:
        ins, outs = _norm_dims(in_dims, "input dim"), _norm_dims(out_dims, "output dim")
        return F2Layout(ins, outs, tuple(tuple((0,) * len(outs) for _ in range(_bits(s, n)))
                                         for n, s in ins))

    @staticmethod
    def from_packed_columns(columns: Sequence[int], in_dims: Sequence[tuple[str, int]],
                            out_dims: Sequence[tuple[str, int]]) -> F2Layout:
        """Build from the packed image of every packed input bit (see the module docstring)."""
        ins, outs = _norm_dims(in_dims, "input dim"), _norm_dims(out_dims, "output dim")
        if len(columns) != sum(_bits(s, n) for n, s in ins):
            raise ValueError(f"F2Layout: {len(columns)} columns for inputs {ins}")
        total_out = sum(_bits(s, n) for n, s in outs)
        for c in columns:
            if c >> total_out:
                raise ValueError(f"F2Layout: image {c:#x} does not fit in outputs {outs}")
        bases, k = [], 0
        for name, size in ins:
            imgs = []
            for _ in range(_bits(size, name)):
                imgs.append(_unpack(columns[k], outs))
                k += 1
            bases.append(tuple(imgs))
        return F2Layout(ins, outs, tuple(bases))

    @staticmethod
    def from_function(fn: Callable[..., Any], in_dims: Sequence[tuple[str, int]],
                      out_dims: Sequence[tuple[str, int]], check: bool = True) -> F2Layout:
        """The linear layout of `fn(**inputs) -> tuple of outputs` (one per out dim).

        Bases are fn's values at the unit inputs. With `check` (default) fn is evaluated on the
        whole domain as numpy arrays and ValueError is raised at the first input where it is
        not the XOR of its bases (carries, a constant offset, or a non-linear formula).
        """
        ins, outs = _norm_dims(in_dims, "input dim"), _norm_dims(out_dims, "output dim")

        def call(**kw: Any) -> tuple:
            res = fn(**kw)
            res = tuple(res.values()) if isinstance(res, Mapping) else tuple(res)
            if len(res) != len(outs):
                raise ValueError(f"from_function: fn returned {len(res)} values for "
                                 f"{len(outs)} output dims")
            return res

        zero = {n: 0 for n, _ in ins}
        if any(int(v) != 0 for v in call(**zero)):
            raise ValueError("from_function: fn(0, ..., 0) != 0, so the map is affine, not "
                             "linear; fix: subtract the constant offset first")
        bases = []
        for name, size in ins:
            imgs = []
            for b in range(_bits(size, name)):
                imgs.append(tuple(int(v) for v in call(**{**zero, name: 1 << b})))
            bases.append(tuple(imgs))
        lay = F2Layout(ins, outs, tuple(bases))
        if check:
            grids = np.meshgrid(*[np.arange(s, dtype=np.int64) for _, s in ins], indexing="ij")
            kw = {n: g.ravel() for (n, _), g in zip(ins, grids)}
            want = [np.broadcast_to(np.asarray(v, dtype=np.int64), grids[0].size)
                    for v in call(**kw)]
            got = lay.apply(kw)
            for (oname, _), w in zip(outs, want):
                bad = np.nonzero(np.asarray(got[oname]) != w)[0]
                if bad.size:
                    i = int(bad[0])
                    point = {n: int(v[i]) for n, v in kw.items()}
                    raise ValueError(f"from_function: not F2-linear at {point}: fn gives "
                                     f"{oname}={int(w[i])}, the XOR of its bases gives "
                                     f"{int(np.asarray(got[oname])[i])}")
        return lay

    @staticmethod
    def from_layout(layout: Layout | ComposedLayout | Swizzle,
                    in_dims: Sequence[tuple[str, int]] | None = None,
                    out_dims: Sequence[tuple[str, int]] | None = None,
                    size: int | None = None) -> F2Layout:
        """Convert a shape:stride layout, a swizzled `ComposedLayout` or a bare `Swizzle`.

        The layout's 1-D index becomes the packed input (default one dim "index", or the given
        `in_dims` low bits first); its offset becomes the packed output (default one dim
        "offset" just wide enough, or the given `out_dims`, e.g. (("row", 64), ("col", 8)) to
        read offset = row + 64*col). A bare Swizzle needs `size` (offsets [0, size)).
        Raises ValueError when a size is not a power of two, two index bits carry into each
        other (e.g. (2,2):(3,1)), or a ComposedLayout has a non-zero offset (affine, not linear).
        """
        if isinstance(layout, Swizzle):
            if size is None:
                raise ValueError("from_layout(Swizzle): pass size= (the offset range)")
            layout = ComposedLayout(layout, 0, Layout(size, 1))
        swz: Swizzle | None = None
        if isinstance(layout, ComposedLayout):
            if layout.offset != 0:
                raise ValueError(
                    f"from_layout: {layout} has offset {layout.offset}; an F2 layout is linear "
                    "and cannot add a constant. fix: convert the layout at offset 0 (for a "
                    "base that is a multiple of the swizzle period, swz(base + x) == base + "
                    "swz(x))")
            swz, layout = layout.swizzle, layout.layout
        if not isinstance(layout, Layout):
            raise TypeError(f"from_layout: expected Layout/ComposedLayout/Swizzle, got {layout!r}")
        for s in it.flatten(layout.shape):
            _bits(s, f"layout {layout} mode")
        nbits = _bits(layout.size, "layout size")
        cols = [int(layout(1 << b)) for b in range(nbits)]
        seen = 0
        for b, c in enumerate(cols):
            if seen & c:
                other = next(k for k in range(b) if cols[k] & c)
                raise ValueError(
                    f"from_layout: {layout} is not F2-linear: index bits {other} and {b} map to "
                    f"{cols[other]} and {c}, which share bits, so their sum carries. fix: use "
                    "the shape:stride layout (or the z3 Int encoding) for this map")
            seen |= c
        if swz is not None:
            cols = [int(swz(c)) for c in cols]
        width = max((c.bit_length() for c in cols), default=0)
        ins = in_dims if in_dims is not None else (("index", layout.size),)
        outs = out_dims if out_dims is not None else (("offset", 1 << width),)
        return F2Layout.from_packed_columns(cols, ins, outs)

    # ---- structure -------------------------------------------------------------------------
    @property
    def in_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.in_dims)

    @property
    def out_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.out_dims)

    def in_size(self, name: str) -> int:
        return dict(self.in_dims)[name]

    def out_size(self, name: str) -> int:
        return dict(self.out_dims)[name]

    @property
    def in_bits(self) -> int:
        return sum(_bits(s, n) for n, s in self.in_dims)

    @property
    def out_bits(self) -> int:
        return sum(_bits(s, n) for n, s in self.out_dims)

    def columns(self) -> list[int]:
        """Packed image of every packed input bit (first input dim's bits first)."""
        return [_pack(img, self.out_dims) for imgs in self.bases for img in imgs]

    def rank(self) -> int:
        """Rank of the bit matrix over F2."""
        return len(_echelon(self.columns())[0])

    def is_injective(self) -> bool:
        return self.rank() == self.in_bits

    def is_surjective(self) -> bool:
        return self.rank() == self.out_bits

    # ---- evaluation ------------------------------------------------------------------------
    def apply(self, inputs: Mapping[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        """Output dims for the given input dims (ints, numpy arrays or z3 bit-vectors).

        Every input dim must be given; only its low log2(size) bits are read.
        """
        vals = {**(inputs or {}), **kw}
        missing = [n for n in self.in_names if n not in vals]
        extra = [n for n in vals if n not in self.in_names]
        if missing or extra:
            raise KeyError(f"F2Layout.apply: missing inputs {missing}, unknown inputs {extra}; "
                           f"expected {list(self.in_names)}")
        out: list[Any] = [0] * len(self.out_dims)
        for (name, _), imgs in zip(self.in_dims, self.bases):
            x = vals[name]
            for b, img in enumerate(imgs):
                if not any(img):
                    continue
                bit = arith.band(arith.shr(x, b), 1)
                for o, v in enumerate(img):
                    if v:
                        out[o] = arith.bxor(out[o], bit * v)
        return {n: v for (n, _), v in zip(self.out_dims, out)}

    __call__ = apply

    def apply_packed(self, x: Any) -> Any:
        """Packed output for a packed input (ints or numpy arrays)."""
        out: Any = 0
        for b, c in enumerate(self.columns()):
            if c:
                out = out ^ (((x >> b) & 1) * c)
        return out

    def table(self) -> np.ndarray:
        """Packed outputs of all packed inputs 0 .. 2**in_bits - 1 (int64)."""
        x = np.arange(1 << self.in_bits, dtype=np.int64)
        out = np.zeros_like(x)
        for b, c in enumerate(self.columns()):
            if c:
                out ^= ((x >> b) & 1) * c
        return out

    def to_function(self) -> Callable[..., dict[str, Any]]:
        """A plain function `f(**inputs) -> {out_dim: value}`."""
        return lambda **kw: self.apply(kw)

    # ---- algebra ---------------------------------------------------------------------------
    def compose(self, inner: F2Layout) -> F2Layout:
        """self ∘ inner (Triton `inner.compose(outer)`): x -> self(inner(x)).

        inner's output dims must be self's input dims (same names; matched by name), and each
        must fit: inner's output size <= self's input size. A larger output would be cut to
        its low bits, since self reads only log2(input size) bits, and the composition would
        silently drop information; that is refused.
        """
        if set(inner.out_names) != set(self.in_names) or len(inner.out_names) != len(
                self.in_names):
            raise ValueError(
                f"F2Layout.compose: inner outputs {list(inner.out_names)} != outer inputs "
                f"{list(self.in_names)}. fix: rename or reshape (reshape_outs/reshape_ins) so "
                "inner's output dims are exactly outer's input dims")
        outer_in = dict(self.in_dims)
        for name, inner_out in inner.out_dims:
            if inner_out > outer_in[name]:
                raise ValueError(
                    f"F2Layout.compose: inner output {name!r} has size {inner_out} but the outer "
                    f"layout's input {name!r} has size {outer_in[name]}; the outer layout reads "
                    f"only the low {_bits(outer_in[name], name)} bits, so the high bits of "
                    f"inner's output would be dropped. fix: widen the outer input {name!r} to "
                    f"{inner_out} (e.g. a product with a layout on the extra bits) or narrow "
                    "the inner output")
        bases = tuple(tuple(tuple(self.apply(dict(zip(inner.out_names, img))).values())
                            for img in imgs) for imgs in inner.bases)
        return F2Layout(inner.in_dims, self.out_dims, bases)

    def invert(self) -> F2Layout:
        """The inverse map (outputs -> inputs); needs in_bits == out_bits and full rank."""
        n_in, n_out = self.in_bits, self.out_bits
        if n_in != n_out:
            raise ValueError(f"F2Layout.invert: {n_in} input bits vs {n_out} output bits; only "
                             "square layouts are invertible")
        pivots, dependent = _echelon(self.columns())
        if dependent is not None:
            raise ValueError(f"F2Layout.invert: not invertible: input bit {dependent} (packed) is "
                             "a XOR of earlier ones, so two inputs share an output")
        cols = [_solve(pivots, 1 << j) for j in range(n_out)]
        return F2Layout.from_packed_columns(cols, self.out_dims, self.in_dims)

    def product(self, other: F2Layout) -> F2Layout:
        """Direct product (Triton `a * b`): dims only in one factor are concatenated; a shared
        dim gets size size_a*size_b with `other`'s bits above `self`'s (inputs and outputs)."""
        ins = dict(self.in_dims)
        for n, s in other.in_dims:
            ins[n] = ins.get(n, 1) * s
        outs = dict(self.out_dims)
        for n, s in other.out_dims:
            outs[n] = outs.get(n, 1) * s
        out_names = list(outs)
        shift = {n: _bits(dict(self.out_dims).get(n, 1), n) for n in out_names}
        bases: dict[str, list[tuple[int, ...]]] = {n: [] for n in ins}

        def widen(img: tuple[int, ...], dims: Dims, shifted: bool) -> tuple[int, ...]:
            vals = dict(zip((n for n, _ in dims), img))
            return tuple(vals.get(n, 0) << (shift[n] if shifted else 0) for n in out_names)

        for (n, _), imgs in zip(self.in_dims, self.bases):
            bases[n] += [widen(img, self.out_dims, False) for img in imgs]
        for (n, _), imgs in zip(other.in_dims, other.bases):
            bases[n] += [widen(img, other.out_dims, True) for img in imgs]
        return F2Layout(tuple(ins.items()), tuple(outs.items()),
                        tuple(tuple(bases[n]) for n in ins))

    __mul__ = product

    def reshape_ins(self, in_dims: Sequence[tuple[str, int]]) -> F2Layout:
        """Same packed map, input bits regrouped into new named dims (same total bits)."""
        return F2Layout.from_packed_columns(self.columns(), in_dims, self.out_dims)

    def reshape_outs(self, out_dims: Sequence[tuple[str, int]]) -> F2Layout:
        """Same packed map, output bits regrouped into new named dims (total may grow)."""
        outs = _norm_dims(out_dims, "output dim")
        return F2Layout.from_packed_columns(self.columns(), self.in_dims, outs)

    def __str__(self) -> str:
        lines = [f"F2Layout {dict(self.in_dims)} -> {dict(self.out_dims)}"]
        for (n, _), imgs in zip(self.in_dims, self.bases):
            lines.append(f"  {n}: {[dict(zip(self.out_names, img)) for img in imgs]}")
        return "\n".join(lines)


# ---- bit-matrix helpers --------------------------------------------------------------------
def _pack(img: Sequence[int], dims: Dims) -> int:
    out, shift = 0, 0
    for v, (n, s) in zip(img, dims):
        out |= int(v) << shift
        shift += _bits(s, n)
    return out


def _unpack(packed: int, dims: Dims) -> tuple[int, ...]:
    vals = []
    for n, s in dims:
        nb = _bits(s, n)
        vals.append(packed & ((1 << nb) - 1))
        packed >>= nb
    return tuple(vals)


def _echelon(cols: Sequence[int]) -> tuple[dict[int, tuple[int, int]], int | None]:
    """Gaussian elimination: pivot bit -> (vector, combination of input bits producing it),
    and the first input bit that is dependent on earlier ones (None if all independent)."""
    pivots: dict[int, tuple[int, int]] = {}
    dependent = None
    for k, c in enumerate(cols):
        vec, combo = c, 1 << k
        while vec:
            top = vec.bit_length() - 1
            if top not in pivots:
                pivots[top] = (vec, combo)
                break
            vec ^= pivots[top][0]
            combo ^= pivots[top][1]
        if vec == 0 and dependent is None:
            dependent = k
    return pivots, dependent


def _solve(pivots: dict[int, tuple[int, int]], target: int) -> int:
    combo = 0
    while target:
        top = target.bit_length() - 1
        if top not in pivots:
            raise ValueError(f"F2Layout: output {target:#x} is not in the image")
        target ^= pivots[top][0]
        combo ^= pivots[top][1]
    return combo
