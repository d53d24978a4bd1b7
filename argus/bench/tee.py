"""Tee: a text stream that writes to a console stream and to a log file (progress of the
device scripts, whose printed output and log files both come back)."""

from __future__ import annotations

from pathlib import Path


class Tee:
    def __init__(self, stream, path: Path):
        self.stream, self.file = stream, open(path, "a", buffering=1)  # noqa: SIM115

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.file.write(text)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()
        self.file.flush()
