"""scripts/gpu_conv_bench.py --unet's layer tables, without a GPU: every UNet row builds the
operands torch's own convolution accepts (meta tensors), and the rows are the layers the
table says they are (a 3x3 "same" convolution keeps the image; a 2x2/2 up-convolution doubles
it, and its output channels are the next decoder 3x3's skip half). The --dry run itself
(routes, schedules, NVRTC builds) is exercised by `python scripts/gpu_conv_bench.py --unet
--dry` and on the GPU by the timed table (docs/perf/conv.md)."""

import importlib.util
from pathlib import Path

import torch
import torch.nn.functional as F

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_conv_bench.py"


def _bench():
    spec = importlib.util.spec_from_file_location("gpu_conv_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_unet_rows_are_the_layers_they_name():
    bench = _bench()
    assert len(bench.UNET) == 14 and len(bench.UNET_UP) == 4
    for seed, row in enumerate(bench.UNET + bench.UNET_UP):
        name, x, w, args, theirs, ours, flops = bench._unet_operands(row, "meta", seed)
        assert x.is_contiguous(memory_format=torch.channels_last), name
        y = theirs(x, w, *args)                       # torch accepts the operands
        N, C, H, W = x.shape
        if row in bench.UNET:
            assert theirs is F.conv2d and y.shape == (N, row[5], H, W), name
            assert flops == 2 * y.numel() * C * 9, name
        else:
            assert theirs is F.conv_transpose2d and y.shape == (N, row[5], 2 * H, 2 * W), name
            assert flops == 2 * x.numel() * row[5] * 4, name
            # the up-convolution's output is the skip half of the next decoder 3x3's input
            dec = next(r for r in bench.UNET if r[0].startswith("dec")
                       and r[3] == 2 * H and r[2] == 2 * row[5])
            assert dec[5] == row[5], name
    assert sum(1 for r in bench.UNET if r[0].startswith("dec")) == 4
