"""The compose row scan's machine code (NVRTC for sm_90a, no GPU): the default schedule's
kernel (one warp, [2, 128] blocks) moves its rows with 16-byte loads and stores, scans with
shuffles and no barrier or shared memory, and spills nothing. Launch-specialized as a launch
on contiguous rows would be (16-byte aligned row starts)."""

import pytest

from argus import codegen
from argus.runtime import nvrtc_available

pytestmark = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


@pytest.mark.parametrize("fn,reverse,exclusive,segmented", [("sum", False, False, False),
                                                            ("prod", True, True, True)])
def test_default_scan_kernel_sass(fn, reverse, exclusive, segmented):
    from argus.analysis import alignment
    from argus.compose.scan import ScanSchedule, kernel, plan
    from argus.runtime.compile import compile_cuda
    from argus.runtime.sass import disassemble, instruction_histogram

    s = plan(ScanSchedule(), 32768, 32768)
    k, _ = kernel("rows", fn, reverse, exclusive, segmented)
    consts = dict(ROWS=s.rows, BN=s.bn, SEG=32768 // 8 if segmented else 32768)
    if segmented:
        consts["TB"] = 32
    lowered = k.lower(**consts)
    spec = alignment.LaunchSpecialization(("X", "Y"), ("L",))
    src = codegen.render(alignment.specialize(lowered, spec))
    binary = compile_cuda(src.text, [src.name], filename=f"{src.name}.cu", use_cache=False)
    res = binary.resource(src.name)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0, res
    sass = disassemble(binary.cubin)
    if sass is None:
        pytest.skip("no cuobjdump / nvdisasm to read the SASS")
    hist = instruction_histogram(sass)
    assert "LDG.E.128" in sass and "STG.E.128" in sass
    assert hist.get("SHFL", 0) > 0
    assert not hist.get("BAR", 0) and not hist.get("LDS", 0) and not hist.get("STS", 0)
