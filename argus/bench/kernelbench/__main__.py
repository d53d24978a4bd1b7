"""`python -m argus.bench.kernelbench VERB ...`: the `argus kernelbench` command on its own."""

import sys

from argus.bench.kernelbench.cli import entry

sys.exit(entry(["kernelbench", *sys.argv[1:]]))
