"""argus.ops.conv's per-call host path, on CPU tensors (the interpreter runs the kernel):

* a repeated call with the same tensors replays the prepared launch (`_Repeat`): no checks, no
  operand preparation, one launch, and it reads x's current contents;
* a 16-bit channels-last weight with whole 64-channel taps is read in place (no repack, no
  cache), so every update is seen: `weight.data` writes (no version bump), `copy_`, an
  optimizer step;
* a repacked weight (NCHW) is prepared again after a versioned update (`copy_`, optimizer);
* the bias is read in place too.

Every result is checked against float64 torch."""

import pytest
import torch
import torch.nn.functional as F

from argus.kernels.conv import ConvSchedule
from argus.ops import conv as conv_op

DIRECT = ConvSchedule(bm=128, bn=64, bw=64, stages=2)


def _data(channels_last_weight: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 64, 5, 6, generator=g).bfloat16().to(memory_format=torch.channels_last)
    w = (torch.randn(64, 64, 3, 3, generator=g) / 24).bfloat16()
    if channels_last_weight:
        w = w.to(memory_format=torch.channels_last)
    b = torch.randn(64, generator=g).bfloat16()
    return x, w, b


def _conv(x, w, b):
    return conv_op.conv2d_interpret(x, w, b, 1, 1, schedule=DIRECT)


def _assert_matches(y, x, w, b):
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), 1, 1)
    assert y.shape == ref.shape and y.dtype == x.dtype
    # the result is channels-last memory, as cuDNN returns for a channels-last input
    assert y.is_contiguous(memory_format=torch.channels_last)
    err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < 1e-2, err


@pytest.fixture(autouse=True)
def _fresh_caches():
    conv_op._REPEATS.clear()
    yield
    conv_op._REPEATS.clear()


def test_channels_last_weight_is_read_in_place():
    x, w, b = _data(True)
    X, Wt, out, view, bias, *_ = conv_op.operands(x, w, b, 1, 1, 1, 1, 64, 3)
    assert Wt.untyped_storage().data_ptr() == w.untyped_storage().data_ptr()
    assert bias.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert X.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    # an NCHW weight is repacked ([G, Kg, taps * Cg], tap-major)
    _, Wt2, *_ = conv_op.operands(x, w.contiguous(), b, 1, 1, 1, 1, 64, 3)
    assert Wt2.untyped_storage().data_ptr() != w.untyped_storage().data_ptr()
    assert torch.equal(Wt, Wt2)


def test_repeat_skips_preparation_and_reads_current_x(monkeypatch):
    x, w, b = _data(True)
    _assert_matches(_conv(x, w, b), x, w, b)
    (entry,) = conv_op._REPEATS.values()

    def refuse(*args, **kwargs):
        raise AssertionError("a repeated call prepared its operands again")

    monkeypatch.setattr(conv_op, "check", refuse)
    monkeypatch.setattr(conv_op, "operands", refuse)
    x.copy_(torch.randn(x.shape, generator=torch.Generator().manual_seed(5)).bfloat16())
    y = _conv(x, w, b)
    assert list(conv_op._REPEATS.values()) == [entry]
    _assert_matches(y, x, w, b)
    b.mul_(-1)                               # a new bias version: prepared again
    monkeypatch.undo()
    _assert_matches(_conv(x, w, b), x, w, b)
    (again,) = conv_op._REPEATS.values()
    assert again is not entry


@pytest.mark.parametrize("update", ["data", "copy", "sgd", "data_assign"])
def test_in_place_weight_updates_are_seen(update):
    x, w0, b = _data(True)
    w = torch.nn.Parameter(w0, requires_grad=update == "sgd")
    with torch.no_grad():
        _assert_matches(_conv(x, w, b), x, w, b)
    new = (torch.randn(w.shape, generator=torch.Generator().manual_seed(9)) / 24).bfloat16()
    if update == "data":                     # no version bump: only a read in place sees it
        w.data.mul_(-2)
    elif update == "copy":
        with torch.no_grad():
            w.copy_(new)
    elif update == "data_assign":            # a new buffer behind the same parameter
        w.data = new.to(memory_format=torch.channels_last)
    else:
        w.grad = torch.ones_like(w)
        torch.optim.SGD([w], lr=0.5).step()
    with torch.no_grad():
        _assert_matches(_conv(x, w, b), x, w, b)


@pytest.mark.parametrize("update", ["copy", "sgd"])
def test_repacked_weight_follows_versioned_updates(update):
    x, w0, b = _data(False)
    w = torch.nn.Parameter(w0, requires_grad=update == "sgd")
    with torch.no_grad():
        _assert_matches(_conv(x, w, b), x, w, b)
        _assert_matches(_conv(x, w, b), x, w, b)          # the replay, repack held
    if update == "copy":
        with torch.no_grad():
            w.copy_(-w)
    else:
        w.grad = torch.ones_like(w)
        torch.optim.SGD([w], lr=0.5).step()
    with torch.no_grad():
        _assert_matches(_conv(x, w, b), x, w, b)


def test_repeat_keys_on_arguments():
    """A different padding or a new x object is prepared again, not a wrong replay."""
    x, w, b = _data(True)
    _conv(x, w, b)
    y = conv_op.conv2d_interpret(x, w, b, 1, 0, schedule=DIRECT)
    ref = F.conv2d(x.double(), w.double(), b.double(), 1, 0)
    assert y.shape == ref.shape and ((y.double() - ref).abs().max() / ref.abs().max()) < 1e-2
    x2 = x.clone()
    _assert_matches(_conv(x2, w, b), x2, w, b)
    assert len(conv_op._REPEATS) == 2         # (x, w, b) and (x2, w, b)


@pytest.mark.parametrize("stride, padding, groups", [
    (1.0, 1, 1), ((1.0, 1.0), 1, 1), (1, 1.0, 1), (1, (True, 1), 1), (1, 1, True)])
def test_a_repeat_never_admits_what_the_first_call_refuses(stride, padding, groups):
    """2.0 == 2, (1.0, 1.0) == (1, 1) and True == 1: a repeated call with equal values of
    another type must run the checks (which refuse them), not replay the int call."""
    x, w, b = _data(True)
    _conv(x, w, b)
    assert len(conv_op._REPEATS) == 1
    with pytest.raises(conv_op.LaunchError, match="must be an int"):   # by name, as at first
        conv_op.conv2d_interpret(x, w, b, stride, padding, groups=groups, schedule=DIRECT)


def test_a_repeat_never_admits_a_list_of_floats_after_a_list_of_ints():
    """A list is a stride as a tuple is (`_pair`): [1.0, 1.0] == [1, 1], so after a call with
    [1, 1] the list's element types must be compared too, or the float list is replayed where
    a first call refuses it."""
    x, w, b = _data(True)
    conv_op.conv2d_interpret(x, w, b, [1, 1], [1, 1], schedule=DIRECT)
    assert len(conv_op._REPEATS) == 1
    with pytest.raises(conv_op.LaunchError, match=r"stride=\[1.0, 1.0\] must be an int"):
        conv_op.conv2d_interpret(x, w, b, [1.0, 1.0], [1, 1], schedule=DIRECT)


def test_a_repeat_refuses_a_numpy_stride_by_name():
    """A numpy array against the kept tuple compares elementwise (its truth value raises a
    ValueError): the repeat lookup compares the types first, so the checks name it as on a
    first call."""
    np = pytest.importorskip("numpy")
    x, w, b = _data(True)
    _conv(x, w, b)
    with pytest.raises(conv_op.LaunchError, match="stride=array"):
        conv_op.conv2d_interpret(x, w, b, np.array([1, 1]), 1, schedule=DIRECT)


def test_a_list_changed_in_place_after_a_call_is_not_replayed():
    """The repeat entry keeps a list argument's values, not the caller's list: a stride list
    changed in place after a call ([1, 1] -> [2, 2]) is a new stride (before: the entry held
    the same list, compared equal to itself, and the stride-1 launch was replayed)."""
    x, w, b = _data(True)
    stride = [1, 1]
    conv_op.conv2d_interpret(x, w, b, stride, 1, schedule=DIRECT)
    stride[:] = [2, 2]
    y = conv_op.conv2d_interpret(x, w, b, stride, 1, schedule=DIRECT)
    ref = F.conv2d(x.double(), w.double(), b.double(), 2, 1)
    assert y.shape == ref.shape
    assert ((y.double() - ref).abs().max() / ref.abs().max()).item() < 1e-2


def test_a_list_is_no_replay_of_a_tuple():
    """A list argument is kept as a tuple of its values, its types marked as a list's: after a
    call with a tuple, the equal list (which a tuple-only argument, convolve's shuffle=,
    refuses) is checked as on a first call."""
    x = torch.randn(1, 16, 3, 4).bfloat16().to(memory_format=torch.channels_last)
    w = torch.randn(16, 16, 1, 1).bfloat16()
    conv_op.convolve(x, w, None, shuffle=(2, 2))
    assert len(conv_op._REPEATS) == 1
    with pytest.raises(conv_op.LaunchError):
        conv_op.convolve(x, w, None, shuffle=[2, 2])


@pytest.mark.parametrize("terms", [3.0, True])
def test_terms_of_another_type_are_refused(terms):
    """terms=3.0 and True hash and compare as 3 and 1 (SPLIT_SLOTS' keys): refused by name, as
    any terms that is not one of the split's slot counts."""
    x, w, b = _data(True)
    with pytest.raises(conv_op.LaunchError, match="terms="):
        conv_op.conv2d_interpret(x.float(), w.float(), b.float(), 1, 1, terms=terms)
