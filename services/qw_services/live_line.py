"""One status line that `qw dev` keeps current: redrawn in place on a terminal, printed when it changes otherwise."""

from __future__ import annotations

import sys
from typing import TextIO


class LiveLine:
    """A summary line that replaces itself, so progress costs one line of the screen, not one per tick.

    Other output goes through `say`, which first ends the live line so the two never share a line.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.in_place = self.stream.isatty()  # a pipe or a file gets whole lines, each change once
        self.shown = ""
        self.open = False

    def show(self, text: str) -> None:
        if text == self.shown:
            return
        self.shown = text
        if self.in_place:
            self.stream.write(f"\r\x1b[K{text}")
            self.open = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def say(self, text: str) -> None:
        self.end()
        self.stream.write(text + "\n")
        self.stream.flush()

    def end(self) -> None:
        """Leave the last summary on screen and move below it."""
        if self.open:
            self.stream.write("\n")
            self.stream.flush()
            self.open = False
