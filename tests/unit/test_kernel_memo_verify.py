"""KernelFunction's in-process memo and the verification level: a kernel compiled under
ARGUS_VERIFY=0 is not handed out to a later compile that asks for verification (found by
review: the memo was keyed by compile-time values only, so a test or a program that built a
kernel unverified made every later verified compile in the process skip the verifier)."""
import argus as ag
from argus import compiler


@ag.kernel(threads=128)
def plus_one(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32], BN: int = 128):
    j, i = ag.grid(ag.cdiv(X.shape[1], BN), X.shape[0])
    ag.store(Y, (i, j * BN), ag.load(X, (i, j * BN), (1, BN)) + 1.0)


def test_a_kernel_built_unverified_is_built_again_when_verification_is_asked(monkeypatch):
    seen = []
    real = compiler.compile_kernel

    def counting(fn, **kw):
        seen.append(compiler.config.verify_level())
        return real(fn, **kw)

    monkeypatch.setattr(compiler, "compile_kernel", counting)
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    first = plus_one.compile(BN=64)
    assert plus_one.compile(BN=64) is first and seen == [0]
    monkeypatch.setenv("ARGUS_VERIFY", "1")
    verified = plus_one.compile(BN=64)
    assert seen == [0, 1] and verified is not first
    monkeypatch.setenv("ARGUS_VERIFY", "0")             # a verified kernel serves either level
    assert plus_one.compile(BN=64) is verified and seen == [0, 1]


def test_built_hands_out_no_unverified_kernel_when_verification_is_asked(monkeypatch):
    """`built` is the memo lookup of compose.launch.run's launches under the GPU gate (a
    judged candidate): it answers as `compile` would, so an unverified build is not launched
    once verification is asked (before, it returned any entry and the launch skipped the
    verifier that `compile` would have run)."""
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    assert plus_one.built(BN=32) is None
    first = plus_one.compile(BN=32)
    assert plus_one.built(BN=32) is first
    monkeypatch.setenv("ARGUS_VERIFY", "1")
    assert plus_one.built(BN=32) is None                # compile would build it again
    verified = plus_one.compile(BN=32)
    assert plus_one.built(BN=32) is verified is not first
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    assert plus_one.built(BN=32) is verified
