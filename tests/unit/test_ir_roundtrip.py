"""The printer and parser round-trip every traced and lowered example kernel exactly."""

import pytest

from argus import analysis, lower
from argus.errors import IRError
from argus.ir import check_kernel, parse_kernel, print_kernel

EXAMPLES = ["elementwise", "softmax", "gemm"]


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("with_locs", [True, False])
def test_round_trip_traced_and_lowered(examples, name, with_locs):
    kernel = examples(name).KERNEL.trace()
    for k in (kernel, lower.run(analysis.infer_layouts(kernel))):
        text = print_kernel(k, with_locs=with_locs)
        again = parse_kernel(text)
        assert again == k
        assert print_kernel(again, with_locs=with_locs) == text
        check_kernel(again)


def test_locations_survive_round_trip(examples):
    kernel = examples("gemm").KERNEL.trace()
    again = parse_kernel(print_kernel(kernel))
    locs = [op.loc for op in again.walk()]
    assert all(loc.line > 0 for loc in locs)
    assert any(loc.file.endswith("gemm.py") for loc in locs)


def test_parser_rejects_undefined_value():
    text = ("kernel @k(%X.0: tensor<f32, MxN>, %M.1: i32, %N.2: i32) {threads=128} {\n"
            "  %3:i32 = arith(lhs=%M.1, rhs=%9) {fn=\"add\"}\n}\n")
    with pytest.raises(IRError, match="undefined value"):
        parse_kernel(text)


def test_parser_rejects_unknown_op():
    text = "kernel @k() {threads=128} {\n  frobnicate()\n}\n"
    with pytest.raises(IRError, match="unknown op 'frobnicate'"):
        parse_kernel(text)


def test_check_kernel_rejects_use_outside_scope():
    # %5 is defined inside the loop body and used after it: not in scope.
    text = ("kernel @k(%M.0: i32) {threads=128} {\n"
            "  %1:i32 = const() {value=0}\n"
            "  %2:i32 = const() {value=1}\n"
            "  %i.3:i32 = for(start=%1, stop=%M.0, step=%2) body {\n"
            "    %5:i32 = arith(lhs=%i.3, rhs=%2) {fn=\"add\"}\n"
            "  }\n"
            "  %6:i32 = arith(lhs=%5, rhs=%2) {fn=\"add\"}\n"
            "}\n")
    with pytest.raises(IRError, match="not defined before it"):
        check_kernel(parse_kernel(text))


def test_parser_reads_names_that_start_with_inf_or_nan():
    text = ("kernel @inference_add(%nanos.0: i32) {threads=128} {\n"
            "  %1:f32 = const() {value=inf}\n}\n")
    k = parse_kernel(text)
    assert k.name == "inference_add" and k.params[0].name == "nanos"
