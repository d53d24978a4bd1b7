"""Progress of long commands (issue 19, items 4 and 7): a rich progress bar with an ETA on a
terminal, whole plain lines with elapsed time and ETA in a log or pipe; `argus optimize`'s lines
are never cut, name the file's baseline once, number steps the way the summary does, and say at
which sizes correctness was checked."""

import io
import re
import subprocess
import sys

from argus.runtime.progress import Progress
from tests.conftest import ROOT


def test_plain_lines_in_a_log_keep_every_word_and_add_an_eta():
    out = io.StringIO()
    long_line = "step " + "word " * 80 + "end"
    with Progress(3, "demo", stream=out) as bar:
        bar.advance(long_line)
        bar.note("  a note")
        bar.advance("second")
        bar.advance("third")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(long_line) and "elapsed" in lines[0] and "eta" in lines[0]
    assert lines[1] == "  a note"
    assert "eta" not in lines[3]                       # nothing left to estimate


def test_a_terminal_gets_a_rich_bar_with_an_eta():
    out = io.StringIO()
    with Progress(4, "tune", stream=out, terminal=True) as bar:
        bar.advance("[1/4] first candidate")
        bar.advance("[2/4] second candidate")
    text = out.getvalue()
    assert "\x1b[" in text                              # drawn with terminal control codes
    assert "ETA" in text and "tune" in text and "[2/4] second candidate" in text
    assert "2/4" in text                                # the bar's own count


def test_optimize_progress_lines(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "argus", "optimize", "examples/elementwise.py", "--out",
         str(tmp_path / "out"), "--iterations", "3", "--device", "cpu", "--check-sets", "1",
         "--db", str(tmp_path / "db.sqlite")], cwd=ROOT, capture_output=True, text=True,
        timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "baseline baseline" not in out and "  baseline: " in out
    steps = re.findall(r"^\[\s*(\d+)/3\] .*\(elapsed \S+(?:, eta \S+)?\)$", out, flags=re.M)
    assert steps == ["1", "2", "3"], out
    assert "correctness checked at example size 'small'" in out
    best = re.search(r"best .* at \[(\d+)/3\]", out)
    assert best and 1 <= int(best.group(1)) <= 3, out


def test_a_failed_candidate_shows_the_exception_not_the_word_traceback():
    from argus.agent.candidate import Outcome

    tb = ('Traceback (most recent call last):\n  File "w.py", line 3, in run\n    go()\n'
          "RuntimeError: CUDA driver: no device " + "detail " * 40 + "end\n")
    line = Outcome("crash", "run", message=tb).failure()
    assert line.startswith("crash at run: RuntimeError: CUDA driver: no device")
    assert line.endswith("end")                         # whole, not cut mid-word
    assert Outcome("wrong", "check", message="rel_l2 0.3\nmore").failure() == \
        "wrong at check: rel_l2 0.3"
