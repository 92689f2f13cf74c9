"""Console progress of a run: a live bar on a terminal, plain lines everywhere else.

Every log step prints one progress line (steps done / total, steps/s, ETA, mean return,
policy versions, wait fractions). On a terminal a bar below the lines is redrawn after
every update; in CI, log files and SLURM output (not a terminal) only the lines appear,
so the output stays greppable and free of carriage returns. Process 0 only.

An update that takes long (the first compiles; a big learner on a CPU can take minutes)
is never silent: while one runs, a line `update 1/488 running for 0:01:00` is printed
after `stall_notice_s` seconds and again at growing intervals, never more than a minute
apart; where the update's time was estimated before training
(`sebulba.preflight.update_estimate`), the line repeats the estimate.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import Any, TextIO

CONSOLE_MODES = ("auto", "bar", "lines")
_BAR_WIDTH = 24
# The longest a running update goes without a notice once it has printed its first.
_LONGEST_NOTICE_GAP_S = 60.0


def format_duration(seconds: float) -> str:
    """`H:MM:SS` (or `?` when unknown), for ETAs and elapsed times."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


# The shortest time over which the ETA's steady-state rate is measured.
MIN_RATE_WINDOW_S = 1.0


def eta_seconds(
    total_steps: int, global_step: int, steady_from: tuple[float, int] | None, now: float
) -> float:
    """Seconds left at the steady-state rate; `math.inf` while that rate is unknown.

    A run's first update (and a resumed run's) includes compiling and the first rollout,
    so a rate that counts it puts the ETA minutes off (3 minutes shown for a one-minute
    run). The rate counts from the end of that update instead, once at least
    `MIN_RATE_WINDOW_S` have passed since.

    Args:
      total_steps: env steps of the whole run.
      global_step: env steps done now.
      steady_from: (time, global step) at the end of this process's first update; None
        before it has finished.
      now: the current time, on the clock of `steady_from`.
    """
    if global_step >= total_steps:
        return 0.0
    if steady_from is None:
        return math.inf
    start_time, start_step = steady_from
    elapsed, done = now - start_time, global_step - start_step
    # Updates that arrive together (an Anakin call of `pipeline.updates_per_call` updates
    # reports them all at its end) would time many steps in no time: an ETA of 0:00:00.
    if elapsed < MIN_RATE_WINDOW_S or done <= 0:
        return math.inf
    return max(total_steps - global_step, 0) * elapsed / done


def progress_line(
    line: dict[str, Any], total_steps: int, num_updates: int, eta: float | str
) -> str:
    """The one-line summary of a metrics line (see `MetricsLogger`); `eta`: seconds (see
    `eta_seconds`; unknown: `?`) or a text that says why it is not known yet."""
    done, sps = line["global_step"], line["sps"]
    eta_text = eta if isinstance(eta, str) else format_duration(eta)
    ret = line["episodic_return"]
    search = ""
    if "search_simulations_per_s" in line:  # An agent that searches (MuZero).
        search = f" search {line['search_simulations_per_s']:,.0f} sims/s per acting device"
    return (
        f"update {line['update']}/{num_updates} "
        f"step {done:,}/{total_steps:,} ({100 * done / total_steps:.0f}%) "
        f"{sps:,.0f} sps ETA {eta_text} "
        f"return {'-' if ret is None else f'{ret:.1f}'} "
        f"versions actor={line['actor_policy_version']} "
        f"learner={line['learner_policy_version']} "
        f"waiting learner={100 * line['learner_wait_fraction']:.0f}% "
        f"actors={100 * line['actor_wait_fraction']:.0f}%{search}"
    )


class ConsoleProgress:
    """Writes progress lines, plus a live bar when `mode` asks for one.

    Args:
      total_steps / num_updates: the run's size, for percentages and the ETA.
      mode: "lines" (plain lines), "bar" (lines and a bar redrawn in place) or "auto"
        (a bar only when `stream` is a terminal).
      stream: where to write (default: stdout).
      stall_notice_s: while an update has been running this long, say so every this
        many seconds (0: never).
      first_update: the update this process starts with (a resumed run's is later).
      update_estimate_s: a floor on one update's time, estimated before training (the
        stall notices repeat it); None where there is none.
      updates_per_call: updates one program call runs (an Anakin run's
        `pipeline.updates_per_call`): a stall notice names the call's first update and how
        many more it may hold (a call can end earlier, at a checkpoint).
      learning_starts: env steps before an off-policy agent's first gradient step
        (`agent.learning_starts`). Until then its updates only act and store, many
        times faster than the learning ones, so the ETA's rate is measured from the
        end of the first update that reaches this step (0: from the first update).
    """

    def __init__(
        self,
        total_steps: int,
        num_updates: int,
        mode: str = "auto",
        stream: TextIO | None = None,
        stall_notice_s: float = 0.0,
        first_update: int = 1,
        learning_starts: int = 0,
        update_estimate_s: float | None = None,
        updates_per_call: int = 1,
    ):
        if mode not in CONSOLE_MODES:
            raise ValueError(f"console mode {mode!r} is not one of {CONSOLE_MODES}")
        self.total_steps, self.num_updates = total_steps, num_updates
        self.stream = stream if stream is not None else sys.stdout
        is_terminal = getattr(self.stream, "isatty", lambda: False)()
        self.show_bar = mode == "bar" or (mode == "auto" and is_terminal)
        self._steady_from: tuple[float, int] | None = None
        self.learning_starts = learning_starts
        self.update_estimate_s = update_estimate_s
        self.updates_per_call = updates_per_call
        self._bar_drawn = False
        # The stall notices come from a thread of their own: the learner thread that
        # calls on_update is the one blocked in the long update.
        self._lock = threading.RLock()
        self._running_update = first_update
        self._running_since = self._last_notice = time.perf_counter()
        self._closed = threading.Event()
        self._notices = None
        if stall_notice_s > 0:
            self._notices = threading.Thread(
                target=self._notice_stalls,
                args=(stall_notice_s,),
                name="sebulba-progress",
                daemon=True,
            )
            self._notices.start()

    def _notice_stalls(self, every_s: float) -> None:
        while not self._closed.wait(min(1.0, every_s / 4)):
            with self._lock:
                now = time.perf_counter()
                running_s = now - self._running_since
                # Every `every_s` at first, then less often as the update goes on (an
                # 11-minute update on a CPU would fill the screen), but at least once a
                # minute: never silent for long.
                interval = max(every_s, min(_LONGEST_NOTICE_GAP_S, running_s / 2))
                if running_s >= every_s and now - self._last_notice >= interval:
                    self._last_notice = now
                    more = min(self.updates_per_call, self.num_updates - self._running_update + 1)
                    more_text = f" and up to {more - 1} more in one call" if more > 1 else ""
                    line = (
                        f"update {self._running_update}/{self.num_updates}{more_text} running "
                        f"for {format_duration(running_s)}"
                    )
                    if self.update_estimate_s is not None:
                        line += (
                            f" (estimated before training: at least "
                            f"{format_duration(self.update_estimate_s)} per update on this CPU)"
                        )
                    self.write_line(line)

    def eta_s(self, global_step: int) -> float:
        """Seconds left at the rate since this process's first update (`eta_seconds`)."""
        return eta_seconds(self.total_steps, global_step, self._steady_from, time.perf_counter())

    def eta_text(self, global_step: int) -> str:
        """The ETA as a progress line shows it; before learning starts, says so."""
        if self._steady_from is None and global_step < self.learning_starts:
            return f"? (measured once learning starts at step {self.learning_starts:,})"
        return format_duration(self.eta_s(global_step))

    def write_line(self, text: str) -> None:
        """Prints a permanent line (above the bar, which is redrawn after it)."""
        with self._lock:
            self._clear_bar()
            print(text, file=self.stream, flush=True)

    def on_update(self, update: int, global_step: int) -> None:
        """Notes an update (the first starts the steady-state clock); redraws the bar."""
        with self._lock:
            self._on_update(update, global_step)

    def _on_update(self, update: int, global_step: int) -> None:
        now = time.perf_counter()
        self._running_update, self._running_since, self._last_notice = update + 1, now, now
        if self._steady_from is None and global_step >= self.learning_starts:
            self._steady_from = (now, global_step)
        if not self.show_bar:
            return
        eta = self.eta_text(global_step)
        sps = 0.0
        if self._steady_from is not None:
            start_time, start_step = self._steady_from
            sps = (global_step - start_step) / (now - start_time) if now > start_time else 0.0
        fraction = min(global_step / self.total_steps, 1.0)
        filled = int(round(fraction * _BAR_WIDTH))
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        self.stream.write(
            f"\r\x1b[K[{bar}] {100 * fraction:3.0f}% update {update}/{self.num_updates} "
            f"{sps:,.0f} sps ETA {eta}"
        )
        self.stream.flush()
        self._bar_drawn = True

    def close(self) -> None:
        """Stops the stall notices; ends the bar's line so later output starts afresh."""
        self._closed.set()
        if self._notices is not None:
            self._notices.join()
        if self._bar_drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._bar_drawn = False

    def _clear_bar(self) -> None:
        if self._bar_drawn:
            self.stream.write("\r\x1b[K")
            self._bar_drawn = False
