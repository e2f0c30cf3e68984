"""Progress on stderr (tqdm): one bar per group, notes printed above it, silent when disabled."""

from __future__ import annotations

import sys

import tqdm


class Progress:
    """Progress on stderr through tqdm: one bar per group (trials done, rate, ETA), started after
    the group is compiled, and one-line notes printed above the bars (never into them); silent
    when disabled."""

    def __init__(self, enabled: bool, label: str = ""):
        self.enabled, self.label = enabled, label
        self.bar = None

    def note(self, message: str) -> None:
        if self.enabled:
            tqdm.tqdm.write(f"{self.label}{message}", file=sys.stderr)

    def group(self, description: str, total: int) -> None:
        """Closes the previous group's bar and opens one for ``total`` trials."""
        self.close()
        if self.enabled:
            self.bar = tqdm.tqdm(
                total=total,
                desc=f"{self.label}{description}",
                unit=" point-trials",
                unit_scale=True,
                file=sys.stderr,
                dynamic_ncols=True,
                leave=False,
            )

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(int(n))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
