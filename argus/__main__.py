"""`python -m argus` is the `argus` command."""

import sys

from argus.cli import main

sys.exit(main())
