"""Leaf library: CuTe-style shape:stride algebra, F2 linear layouts, swizzles, z3 encodings.

Public names (one concept per module):
  inttuple      IntTuple helpers (flatten, product, idx2crd, crd2idx, prefix_products,
                inner_product, shape_div)
  shape_stride  Layout, make_layout, flatten, coalesce, filter (CuTe's; also filter_layout),
                filter_zeros, make_layout_like, make_ordered_layout
  algebra       composition, complement, logical/zipped/tiled/flat_divide,
                logical/zipped/tiled/flat_product, blocked_product, raked_product (CuTe's)
  inverse       right_inverse, left_inverse
  swizzle       Swizzle, ComposedLayout, SWIZZLE_NONE/32B/64B/128B
  f2            F2Layout
  arith         int/numpy/z3 polymorphic integer ops (div, mod, shr, band, bxor, ...)
  z3enc         z3 encodings (imported lazily: `from argus.layout import z3enc`)
"""

from argus.layout import arith, inttuple
from argus.layout.algebra import (
    blocked_product,
    complement,
    composition,
    flat_divide,
    flat_product,
    logical_divide,
    logical_product,
    raked_product,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)
from argus.layout.f2 import F2Layout
from argus.layout.inttuple import IntTuple, crd2idx, idx2crd
from argus.layout.inverse import left_inverse, right_inverse
from argus.layout.shape_stride import (
    Layout,
    coalesce,
    filter_layout,
    filter_zeros,
    flatten,
    make_layout,
    make_layout_like,
    make_ordered_layout,
)
from argus.layout.swizzle import (
    SWIZZLE_32B,
    SWIZZLE_64B,
    SWIZZLE_128B,
    SWIZZLE_NONE,
    ComposedLayout,
    Swizzle,
)

filter = filter_layout  # noqa: A001 - CuTe's name; argus.layout.filter, not the builtin

__all__ = [
    "SWIZZLE_32B",
    "SWIZZLE_64B",
    "SWIZZLE_128B",
    "SWIZZLE_NONE",
    "ComposedLayout",
    "F2Layout",
    "IntTuple",
    "Layout",
    "Swizzle",
    "arith",
    "blocked_product",
    "coalesce",
    "complement",
    "composition",
    "crd2idx",
    "flat_divide",
    "filter",
    "filter_layout",
    "filter_zeros",
    "flat_product",
    "flatten",
    "idx2crd",
    "inttuple",
    "left_inverse",
    "logical_divide",
    "logical_product",
    "make_layout",
    "make_layout_like",
    "make_ordered_layout",
    "raked_product",
    "right_inverse",
    "tiled_divide",
    "tiled_product",
    "zipped_divide",
    "zipped_product",
]
