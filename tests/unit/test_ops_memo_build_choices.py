"""argus.ops's memos of built kernels key on the environment's build choices too
(argus/build_memo.py, argus.config.build_choices: ARGUS_WGMMA_A_FENCE). They were keyed by
schedule only, so a process that changed the variable got the kernel built before the change
from every op but the bench, which emptied attention's memos by hand (h314 follow-up)."""
from __future__ import annotations

import importlib
import os
import types

import pytest

from argus import config, dtypes
from argus.build_memo import BuildMemo


def test_build_memo_keys_on_the_fence_choice(monkeypatch):
    monkeypatch.delenv("ARGUS_WGMMA_A_FENCE", raising=False)
    memo = BuildMemo()
    memo["k"] = "pinned"
    monkeypatch.setenv("ARGUS_WGMMA_A_FENCE", "copy")
    assert "k" not in memo and memo.get("k") is None
    memo["k"] = "copied"
    assert memo["k"] == "copied" and len(memo) == 2
    monkeypatch.delenv("ARGUS_WGMMA_A_FENCE")
    assert memo["k"] == "pinned"
    memo.move_to_end("k")
    # the ops' eviction: the oldest entry, the copy's now (the key holds the raw value)
    assert memo.popitem(last=False) == (((b"copy",), "k"), "copied")
    assert memo.pop("k") == "pinned" and not memo


def test_every_kernel_memo_of_the_ops_is_a_build_memo():
    """The module-level memos that hold built kernels or what holds them (launches, call
    entries, chosen (schedule, kernel) pairs): a plain dict here would hand out stale kernels."""
    # the modules (argus.ops's attribute `attention` is the op function)
    attention, attention_decode, attention_fp8, conv, matmul, moe, scaled_matmul = (
        importlib.import_module(f"argus.ops.{m}") for m in (
            "attention", "attention_decode", "attention_fp8", "conv", "matmul", "moe",
            "scaled_matmul"))
    memos = {attention: ("_COMPILED", "_LAUNCHES", "_ENTRIES"),
             attention_decode: ("_COMPILED", "_ENTRIES"),
             attention_fp8: ("_LAUNCHES", "_ENTRIES", "_VT_COMPILED", "_VT_LAUNCHES"),
             conv: ("_COMPILED", "_DEPTHWISE", "_POINTWISE", "_IM2COL", "_REPEATS"),
             matmul: ("_CHOSEN", "_LAUNCHES", "_SPLIT_LAUNCHES", "_TF32_LAUNCHES"),
             scaled_matmul: ("_CHOSEN", "_LAUNCHES", "_SPLIT_LAUNCHES"),
             moe: ("_COMPILED",),
             importlib.import_module("argus.compose.launch"): ("_COMPILED",)}
    plain = [f"{m.__name__}.{n}" for m, names in memos.items() for n in names
             if not isinstance(getattr(m, n), BuildMemo)]
    assert plain == []


def test_attention_op_builds_again_when_the_fence_choice_changes(monkeypatch):
    """argus.ops.attention's kernel lookup under auto, then copy, then auto again: a second
    kernel for the copy (before: the auto kernel again, from the memo keyed by schedule), the
    first one back after (both kept). The build is stubbed (a kernel function whose compile
    records the fence in force): the op's memo is what is tested."""
    from argus.kernels.attention import default_schedule

    op = importlib.import_module("argus.ops.attention")
    built = []

    def compile_(**constexprs):
        built.append(types.SimpleNamespace(fence=config.wgmma_a_fence()))
        return built[-1]

    monkeypatch.setattr(op, "attention_kernel",
                        lambda *args: types.SimpleNamespace(compile=compile_))
    monkeypatch.setattr(op, "_COMPILED", BuildMemo())
    device = types.SimpleNamespace(index=0)
    s = default_schedule(128, False)
    monkeypatch.delenv("ARGUS_WGMMA_A_FENCE", raising=False)
    first = op._compiled(128, dtypes.bf16, False, True, s, device)
    monkeypatch.setenv("ARGUS_WGMMA_A_FENCE", "copy")
    copied = op._compiled(128, dtypes.bf16, False, True, s, device)
    assert copied is not first and (first.fence, copied.fence) == ("auto", "copy")
    monkeypatch.delenv("ARGUS_WGMMA_A_FENCE")
    assert op._compiled(128, dtypes.bf16, False, True, s, device) is first
    assert len(built) == 2


def test_an_unknown_fence_choice_is_refused_where_lowering_reads_it(monkeypatch):
    monkeypatch.setenv("ARGUS_WGMMA_A_FENCE", "pin")
    assert BuildMemo().get("k") is None          # the memo keys on the raw value
    with pytest.raises(ValueError, match="expected 'auto' or 'copy'"):
        config.wgmma_a_fence()


@pytest.mark.parametrize("value", [None, "copy", "auto", "pin"])
def test_build_choices_read_what_os_environ_holds(monkeypatch, value):
    """build_choices reads os.environ's encoded table (the fast path on the ops' call path):
    it must see every write made through os.environ, and unset as None."""
    if value is None:
        monkeypatch.delenv("ARGUS_WGMMA_A_FENCE", raising=False)
    else:
        monkeypatch.setenv("ARGUS_WGMMA_A_FENCE", value)
    raw = config.build_choices()
    assert raw == (None if value is None else value.encode(),)
    assert raw == tuple(None if v is None else v.encode()
                        for v in map(os.environ.get, config._BUILD_CHOICE_NAMES))
