"""Argus IR: frozen-dataclass ops in nested regions, with a builder, printer, parser,
well-formedness checks and a rewrite-rule engine."""

from argus.ir import ops, tag_ops
from argus.ir.builder import Builder
from argus.ir.checks import check_kernel
from argus.ir.core import Kernel, Op, Param, Region, Value
from argus.ir.parser import parse_kernel
from argus.ir.printer import print_kernel
from argus.ir.rewrite import Rule, Rules
from argus.ir.types import (PipeType, ScalarType, SmemType, SmemViewType, TensorType, TileType,
                            parse_type)

tag_ops.register(ops.ALL_OPS)  # tag ops print and parse like any op; they generate no code

__all__ = ["ops", "tag_ops", "Builder", "check_kernel", "Kernel", "Op", "Param", "Region", "Value",
           "parse_kernel", "print_kernel", "Rule", "Rules", "PipeType", "ScalarType", "SmemType",
           "SmemViewType", "TensorType", "TileType", "parse_type"]
