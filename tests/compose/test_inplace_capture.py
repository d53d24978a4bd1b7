"""In-place ops in a captured forward (argus/compose/capture.py `_rebind_written`): torch.fx
keeps a tensor's own node for its uses after an in-place write (`b.add_(1); return b * 2` reads
node `b`), so the capture makes that node stand for the written value; a view read after the
write is refused (the compose graph has no aliasing). Against torch in float64 on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from argus.compose.capture import CaptureError, capture
from tests.compose.test_templates import check, fn_model


def _masked_fill_temp(a):
    b = a * 1.5
    b.masked_fill_(b > 0, 0.25)
    return b * 2


def _add_temp(a):
    b = a * 1.5
    b.add_(1.0)
    b.mul_(3.0)
    return b - a


def _alias_sees_the_write(a):
    b = a * 1.5
    c = b.contiguous()        # c is b itself: it sees the write too
    b.add_(1.0)
    return c * 2


def _relu_inplace_kept_name(a):
    b = a - 0.5
    F.relu(b, inplace=True)
    return b + a


def _relu_inplace_after_view(a):
    b = (a * 2).view(a.shape[0], -1)
    b = F.relu(b, inplace=True)      # a view of a * 2, which nothing reads again: fine
    return b + 1


@pytest.mark.parametrize("fn", [_masked_fill_temp, _add_temp, _alias_sees_the_write,
                                _relu_inplace_kept_name, _relu_inplace_after_view])
def test_uses_after_an_inplace_write_read_the_written_value(fn):
    check(fn_model(fn, 1), (torch.randn(4, 8),))


def test_a_view_read_after_an_inplace_write_is_refused():
    def view_read_after(a):
        b = a * 1.5
        row = b[0]
        b.add_(1.0)             # row sees it in torch
        return row * 2

    with pytest.raises(CaptureError, match="read afterwards"):
        capture(fn_model(view_read_after, 1)(), [torch.randn(4, 8)])
