"""A user's mistakes get one line (what, where) and a fix, never a traceback (issue 19, items 3-4).

Every verb of the `argus` command is run the way a newcomer gets it wrong: a missing file, a
file that is not Python, a syntax error, no such kernel, a GPU-only request without a GPU. The
exit status is the documented one (`argus --help`: 0 done, 1 the answer is no, 2 cannot run as
asked, 3 internal error), stderr has no "Traceback", and `--debug` brings the traceback back.
"""

import subprocess
import sys

import pytest

from tests.conftest import ROOT


def argus(*args, timeout=120, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "argus", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def assert_one_line_error(proc, status, *phrases):
    text = proc.stdout + proc.stderr
    assert proc.returncode == status, text
    assert "Traceback" not in text, text
    for phrase in phrases:
        assert phrase in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 3 and lines[0].startswith("argus"), proc.stderr


@pytest.fixture
def syntax_error_file(tmp_path):
    bad = tmp_path / "19_Broken.py"
    bad.write_text("import torch\n\nclass Model(torch.nn.Module)\n    pass\n\n"
                   "def get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n")
    return bad


@pytest.mark.parametrize("verb", [["compile"], ["run", "--interpret"], ["bench", "--interpret"],
                                  ["verify"], ["optimize", "--out", "OUT"]])
def test_missing_file_is_one_line_and_status_2(verb, tmp_path):
    args = [a.replace("OUT", str(tmp_path / "o")) for a in verb]
    proc = argus(args[0], "nope.py", *args[1:])
    assert_one_line_error(proc, 2, "nope.py")


@pytest.mark.parametrize("verb", ["compile", "run", "verify", "optimize"])
def test_a_file_that_is_not_python(verb, tmp_path):
    extra = ["--out", str(tmp_path / "o")] if verb == "optimize" else []
    extra += ["--interpret"] if verb == "run" else []
    proc = argus(verb, str(ROOT / "README.md"), *extra)
    assert_one_line_error(proc, 2, "README.md", "not a Python file")


@pytest.mark.parametrize("verb", ["compile", "verify", "optimize"])
def test_syntax_error_names_file_and_line(verb, syntax_error_file, tmp_path):
    extra = ["--out", str(tmp_path / "o"), "--device", "cpu"] if verb == "optimize" else []
    proc = argus(verb, str(syntax_error_file), *extra)
    assert_one_line_error(proc, 2, f"{syntax_error_file}:3", "syntax error")


def test_debug_shows_the_traceback_anywhere_on_the_line(syntax_error_file):
    for args in (["--debug", "compile", str(syntax_error_file)],
                 ["compile", str(syntax_error_file), "--debug"]):
        proc = argus(*args)
        assert proc.returncode != 0 and "Traceback" in proc.stderr, proc.stderr


def test_optimize_on_cuda_without_a_gpu_says_so_once(tmp_path):
    from argus.demo import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present")
    proc = argus("optimize", str(ROOT / "examples" / "elementwise.py"), "--out",
                 str(tmp_path / "o"), "--device", "cuda")
    assert_one_line_error(proc, 2, "no Hopper GPU", "--device cpu")
    assert not (tmp_path / "o").exists()


def test_no_such_kernel_lists_the_kernels():
    proc = argus("compile", "examples/gemm.py::nope")
    assert_one_line_error(proc, 2, "has no kernel 'nope'", "gemm")


def test_compile_an_example_without_naming_the_kernel(tmp_path):
    # `KERNEL = gemm` is an alias of `gemm`, not a second kernel
    from argus.cli import main

    assert main(["compile", str(ROOT / "examples" / "softmax.py"), "--no-verify"]) == 0


def test_version_and_help_document_the_exit_status():
    from argus import __version__

    proc = argus("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"argus {__version__}"
    proc = argus("--help")
    assert proc.returncode == 0
    for line in ("exit status", "0 ", "1 ", "2 ", "3 ", "--debug"):
        assert line in proc.stdout


def test_closed_pipe_is_quiet():
    # `argus kernelbench list | head -1`: the reader leaves early, the writer says nothing
    cmd = f"{sys.executable} -m argus optimize --list-cards | head -1"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.count("\n") == 1


def test_internal_errors_are_status_3_and_say_report_it(capsys):
    from argus import cli, demo

    def broken(args):                  # an error raised inside Argus's own code
        return demo.relative_error(None, None)

    status = cli.run_command(broken, None, verb="compile")
    err = capsys.readouterr().err
    assert status == 3 and "internal error: AttributeError" in err and "--debug" in err
    assert "argus/demo.py" in err      # where it was raised

    def users_bug(args):               # the same kind of error in the user's own code
        return None.shape

    assert cli.run_command(users_bug, None, verb="run") == 2
    assert "test_cli_errors.py" in capsys.readouterr().err
    with pytest.raises(AttributeError):
        cli.run_command(broken, None, verb="compile", debug=True)


def test_bench_in_the_interpreter_says_it_timed_nothing():
    proc = argus("bench", "elementwise", "--interpret", "--size", "small", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "no timing" in proc.stdout


# -- the same mistakes at the Python prompt ----------------------------------------------------

def test_torch_tensor_annotation_says_how_to_annotate():
    import torch

    import argus as ag

    with pytest.raises(ag.TraceError) as info:
        @ag.kernel(threads=128)
        def copy(X: torch.Tensor, Y: ag.Tensor["N", ag.f32], BN: int = 128):
            ag.store(Y, (0,), ag.load(X, (0,), (BN,)))
    assert "parameter X is annotated torch.Tensor" in str(info.value)
    assert 'ag.Tensor["M", "N", ag.f32]' in info.value.fix


def test_cpu_tensors_at_a_gpu_launch_mention_interpret():
    import torch

    from argus import dtypes
    from argus.errors import LaunchError
    from argus.runtime.args import check_tensor_arg

    with pytest.raises(LaunchError) as info:
        check_tensor_arg(torch.zeros(8), kernel="copy", param="X", dtype=dtypes.f32, ndim=1)
    assert "copy.interpret(...)" in str(info.value)


def test_kernelbench_verbs_say_one_line_too(tmp_path):
    proc = argus("kernelbench", "judge", "nope.py", "nope.py")
    assert_one_line_error(proc, 2, "argus kernelbench judge", "nope.py")
    proc = argus("kernelbench", "report", str(tmp_path))
    assert_one_line_error(proc, 2, "argus kernelbench report", "results.jsonl")
    if not (ROOT.parent / "shared" / "kernelbench" / "level1").is_dir():
        return                          # no KernelBench tasks beside the checkout to list
    cmd = f"{sys.executable} -m argus kernelbench list --level 1 | head -1"
    piped = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    assert piped.returncode == 0 and "Error" not in piped.stderr, piped.stderr
