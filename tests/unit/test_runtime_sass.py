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
