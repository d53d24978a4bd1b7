"""lower/packed.py's rule on webs the attention kernel does not make (h303's review): a var /
assign web whose values mix bf16 and f16 is not packed. The IR checks do not refuse an f16
value assigned to a bf16 variable, and codegen copies a packed web's words as they are, so
packed, the f16 bits would be read as bf16 by the rs wgmma."""

from __future__ import annotations

import dataclasses
import re

import argus as ag
from argus.compiler import lower_only
from argus.ir import parser, printer
from argus.kernels.attention import attention_kernel, default_schedule
from argus.lower import packed


def _packed_p_text() -> str:
    """The fa3 loop with packed_p, lowered and printed without the packed marks."""
    s = dataclasses.replace(default_schedule(128, False), packed_p=True)
    kernel = lower_only(attention_kernel(128, ag.bf16, False, False), s=s)
    return printer.print_kernel(kernel).replace(", packed>", ">")


def test_a_web_of_two_16_bit_dtypes_stays_in_float_registers():
    text = _packed_p_text()
    assert packed.packed_values(parser.parse_kernel(text))    # one dtype: packed
    # the loop's convert of P_j (the last convert into P's web) made f16 instead of bf16
    converts = re.findall(r"(%\d+):tile<bf16, 64x128, wgmma_acc> = convert\(", text)
    assert converts, "no bf16 convert in the fa3 loop"
    name = re.escape(converts[-1])
    mixed = re.sub(name + r":tile<bf16,", converts[-1] + ":tile<f16,", text, count=1)
    assert mixed != text
    ids = packed.packed_values(parser.parse_kernel(mixed))
    assert not ids, f"a bf16 / f16 web was packed: {sorted(ids)}"
