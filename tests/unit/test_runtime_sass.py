"""argus.runtime.sass: opcode histograms and want/forbid checks on SASS text."""

from __future__ import annotations

from argus.runtime import check_sass, disassemble, instruction_histogram
from argus.runtime import sass as sass_mod

SASS = """
        code for sm_90a
                Function : argus_gemm_bf16_tn
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
        /*0020*/              @!P0 BRA `(.L_x_12) ;
        /*0030*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT, gsb0 ;
        /*0040*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR12], R24, gsb0 ;
        /*0050*/               @P1 UTMALDG.2D [UR8], [UR4] ;
        /*0060*/                   SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [UR4+0x8], RZ ;
        /*0070*/              @UP0 WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0080*/                   STG.E [R2.64], R5 ;
        /*0090*/                   EXIT ;
        /*00a0*/                   BRA 0xa0;
"""


def test_histogram_counts_opcodes_without_modifiers():
    hist = instruction_histogram(SASS)
    assert hist["HGMMA"] == 2 and hist["UTMALDG"] == 1 and hist["SYNCS"] == 1
    assert hist["WARPGROUP"] == 1 and hist["BRA"] == 2 and hist["EXIT"] == 1
    assert "R24" not in hist and "gdesc" not in hist


def test_check_sass_want_and_forbid():
    ok = check_sass(SASS, want=("HGMMA", "UTMALDG"), forbid=("HMMA", "LDL", "STL"))
    assert ok.ok and str(ok) == "SASS check passed"
    bad = check_sass(SASS + "        /*00b0*/                   HMMA.16816.F32 R4, R8, R12, R4 ;\n",
                     want=("HGMMA", "QGMMA"), forbid=("HMMA",))
    assert not bad.ok and bad.missing == ("QGMMA",) and bad.forbidden == ("HMMA",)
    assert "HMMA x1" in str(bad) and "QGMMA" in str(bad)


def test_disassemble_without_tools_returns_none(monkeypatch):
    monkeypatch.setattr(sass_mod, "find_tool", lambda name: None)
    assert disassemble(b"\x7fELF...") is None
    assert disassemble(b"") is None


LOOPS = """
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_1:
        /*0010*/                   IMAD R2, R0, 0x4, RZ ;
.L_x_2:
        /*0020*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R2+URZ], R3 ;
        /*0030*/              @!P0 BRA `(.L_x_2) ;
        /*0040*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24, gsb0 ;
        /*0050*/                   FFMA R4, R24, R5, R4 ;
        /*0060*/                   LDG.E.CONSTANT R5, desc[UR4][R6.64] ;
        /*0070*/                   R2UR UR8, R9 ;
        /*0080*/                   UIADD3 UR9, UR9, 0x2, URZ ;
        /*0090*/                   LDC R9, c[0x0][0x210] ;
        /*00a0*/               @P1 BRA `(.L_x_1) ;
        /*00b0*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24, gsb0 ;
        /*00c0*/                   IADD3 R0, R0, 0x1, RZ ;
        /*00d0*/               @P2 BRA `(.L_x_1) ;
        /*00e0*/                   EXIT ;
"""


def test_k_loop_is_the_innermost_loop_holding_the_opcode():
    loop = sass_mod.k_loop(LOOPS)
    # the wait loop (.L_x_2) holds no QGMMA; the outer span to the last branch is longer
    assert loop[0].strip() == ".L_x_1:" and "@P1 BRA" in loop[-1]
    classes = sass_mod.k_loop_classes(loop)
    assert classes == {"QGMMA": 1, "FFMA": 1, "LDG": 1, "integer": 1, "to uniform": 1,
                       "uniform": 1, "LDC": 1, "sync": 1, "branch": 2}
    try:
        sass_mod.k_loop(LOOPS, "HGMMA")
    except ValueError as e:
        assert "HGMMA" in str(e)
    else:
        raise AssertionError("k_loop found a loop around an absent opcode")


def test_sass_text_names_each_tool_and_why(monkeypatch, tmp_path):
    """sass_text raises where disassemble returns None, naming every disassembler tried: the
    SASS scripts' one way to find and run nvdisasm (they each looked it up themselves)."""
    import pytest

    monkeypatch.setattr(sass_mod, "find_tool", lambda name: None)
    with pytest.raises(RuntimeError, match="nvdisasm: not found; cuobjdump: not found") as e:
        sass_mod.sass_text(b"\x7fELF...")
    assert "NVDISASM=" in str(e.value)
    assert not sass_mod.have_disassembler()
    # a tool that fails: its exit status and stderr are in the message
    fake = tmp_path / "nvdisasm"
    fake.write_text("#!/bin/sh\necho 'bad cubin' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sass_mod, "find_tool", lambda name: str(fake) if name == "nvdisasm"
                        else None)
    with pytest.raises(RuntimeError, match="exit 3 bad cubin"):
        sass_mod.sass_text(b"\x7fELF...", prefer=("nvdisasm",))
    assert disassemble(b"\x7fELF...") is None and sass_mod.have_disassembler()


def test_find_tool_takes_the_environment_override(monkeypatch, tmp_path):
    from argus.runtime.toolkit import find_tool

    fake = tmp_path / "my-nvdisasm"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("NVDISASM", str(fake))
    assert find_tool("nvdisasm") == str(fake)
    monkeypatch.setenv("NVDISASM", str(tmp_path / "missing"))   # not a file: the usual search
    assert find_tool("nvdisasm") != str(tmp_path / "missing")


def test_find_tool_looks_in_nvidias_pip_wheels(monkeypatch, tmp_path):
    """`pip install nvidia-cuda-nvdisasm` puts nvdisasm in site-packages/nvidia/cu13/bin, on
    no PATH: find_tool finds it there after NVDISASM=, PATH and the CUDA roots, the newest
    wheel folder first."""
    import sys

    from argus.runtime import toolkit

    for folder in ("cu12", "cu13"):
        tool = tmp_path / "nvidia" / folder / "bin" / "nvdisasm"
        tool.parent.mkdir(parents=True)
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    (tmp_path / "nvidia" / "cu13" / "include").mkdir()   # a wheel folder without bin/ too
    monkeypatch.delenv("NVDISASM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(toolkit, "cuda_roots", lambda: [])
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert toolkit.find_tool("nvdisasm") == str(tmp_path / "nvidia" / "cu13" / "bin" / "nvdisasm")
    assert toolkit.find_tool("cuobjdump") is None
    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere")])
    assert toolkit.find_tool("nvdisasm") is None


def test_register_a_hazards_sees_ldsm_and_shfl_writes():
    """An A register written while its group is in flight by an instruction whose first
    operand is not that register: LDSM.x4 into R150..R153 (only R150 was counted) and SHFL,
    whose first operand is its predicate (no write was counted)."""
    from argus.runtime.sass import register_a_hazards

    def sass(body):
        return "\n".join(f"        /*{16 * i:04x}*/                   {x} ;" if not x.endswith(":")
                         else x for i, x in enumerate(body))
    issue = "HGMMA.64x128x16.F32.BF16 R88, R152, gdesc[UR8].tnspB, R88, gsb0"
    for write, reg in (("LDSM.16.M88.4 R150, [R2+UR4]", 152),
                       ("LDSM.16.MT88.2 R151, [R2]", 152),
                       ("SHFL.IDX PT, R153, R25, 0x1, 0x1f", 153)):
        found = register_a_hazards(sass([".L_x_1:", "WARPGROUP.ARRIVE", issue, write,
                                         "WARPGROUP.DEPBAR.LE gsb0, 0x0",
                                         "F2FP.BF16.F32.PACK_AB R152, R25, R24",
                                         "F2FP.BF16.F32.PACK_AB R153, R25, R24",
                                         "F2FP.BF16.F32.PACK_AB R154, R25, R24",
                                         "F2FP.BF16.F32.PACK_AB R155, R25, R24",
                                         "@P0 BRA `(.L_x_1)", "EXIT"]))
        assert found == [f"line 3 (HGMMA A R152): R{reg} written at line 4 while in flight"], \
            (write, found)
    # an x1 LDSM below the fragment and a predicate-only SETP write nothing of it
    quiet = register_a_hazards(sass([".L_x_1:", "WARPGROUP.ARRIVE", issue,
                                     "LDSM.16.M88 R151, [R2]", "ISETP.GE.AND P1, PT, R152, R3, PT",
                                     "WARPGROUP.DEPBAR.LE gsb0, 0x0",
                                     "F2FP.BF16.F32.PACK_AB R152, R25, R24",
                                     "F2FP.BF16.F32.PACK_AB R153, R25, R24",
                                     "F2FP.BF16.F32.PACK_AB R154, R25, R24",
                                     "F2FP.BF16.F32.PACK_AB R155, R25, R24",
                                     "@P0 BRA `(.L_x_1)", "EXIT"]))
    assert quiet == [], quiet
