"""Console progress of a run: a live bar on a terminal, plain lines everywhere else.

Every log step prints one progress line (steps done / total, steps/s, ETA, mean return,
policy versions, wait fractions). On a terminal a bar below the lines is redrawn after
every update; in CI, log files and SLURM output (not a terminal) only the lines appear,
so the output stays greppable and free of carriage returns. Process 0 only.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO

CONSOLE_MODES = ("auto", "bar", "lines")
_BAR_WIDTH = 24


def format_duration(seconds: float) -> str:
    """`H:MM:SS` (or `?` when unknown), for ETAs and elapsed times."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def progress_line(line: dict[str, Any], total_steps: int, num_updates: int) -> str:
    """The one-line summary of a metrics line (see `MetricsLogger`)."""
    done, sps = line["global_step"], line["sps"]
    eta_s = (total_steps - done) / sps if sps > 0 else math.inf
    ret = line["episodic_return"]
    return (
        f"update {line['update']}/{num_updates} "
        f"step {done:,}/{total_steps:,} ({100 * done / total_steps:.0f}%) "
        f"{sps:,.0f} sps ETA {format_duration(eta_s)} "
        f"return {'-' if ret is None else f'{ret:.1f}'} "
        f"versions actor={line['actor_policy_version']} "
        f"learner={line['learner_policy_version']} "
        f"waiting learner={100 * line['learner_wait_fraction']:.0f}% "
        f"actors={100 * line['actor_wait_fraction']:.0f}%"
    )


class ConsoleProgress:
    """Writes progress lines, plus a live bar when `mode` asks for one.

    Args:
      total_steps / num_updates: the run's size, for percentages and the ETA.
      mode: "lines" (plain lines), "bar" (lines and a bar redrawn in place) or "auto"
        (a bar only when `stream` is a terminal).
      stream: where to write (default: stdout).
      first_step: env steps already done (a resumed run), so the ETA counts the rest.
    """

    def __init__(
        self,
        total_steps: int,
        num_updates: int,
        mode: str = "auto",
        stream: TextIO | None = None,
        first_step: int = 0,
    ):
        if mode not in CONSOLE_MODES:
            raise ValueError(f"console mode {mode!r} is not one of {CONSOLE_MODES}")
        self.total_steps, self.num_updates = total_steps, num_updates
        self.stream = stream if stream is not None else sys.stdout
        is_terminal = getattr(self.stream, "isatty", lambda: False)()
        self.show_bar = mode == "bar" or (mode == "auto" and is_terminal)
        self._start, self._first_step = time.perf_counter(), first_step
        self._bar_drawn = False

    def write_line(self, text: str) -> None:
        """Prints a permanent line (above the bar, which is redrawn after it)."""
        self._clear_bar()
        print(text, file=self.stream, flush=True)

    def on_update(self, update: int, global_step: int) -> None:
        """Redraws the bar after an update (bar mode only)."""
        if not self.show_bar:
            return
        elapsed = time.perf_counter() - self._start
        sps = (global_step - self._first_step) / elapsed if elapsed > 0 else 0.0
        eta_s = (self.total_steps - global_step) / sps if sps > 0 else math.inf
        fraction = min(global_step / self.total_steps, 1.0)
        filled = int(round(fraction * _BAR_WIDTH))
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        self.stream.write(
            f"\r\x1b[K[{bar}] {100 * fraction:3.0f}% update {update}/{self.num_updates} "
            f"{sps:,.0f} sps ETA {format_duration(eta_s)}"
        )
        self.stream.flush()
        self._bar_drawn = True

    def close(self) -> None:
        """Ends the bar's line so later output starts on a fresh line."""
        if self._bar_drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._bar_drawn = False

    def _clear_bar(self) -> None:
        if self._bar_drawn:
            self.stream.write("\r\x1b[K")
            self._bar_drawn = False
