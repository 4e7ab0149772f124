"""feedclient.pack._progress: the one progress line every Python packer
draws on stderr (items, MB, MB/s, and the ETA when the total is known),
only when stderr is a terminal and not quiet, at most 10 times a second,
cleared at the end; and the summary line, printed always."""

import sys
import time


class Progress:
    def __init__(self, what="packing", unit="samples", total=None, quiet=False):
        self.on = not quiet and sys.stderr.isatty()
        self.what, self.unit, self.total = what, unit, total
        self.start = self.last = time.monotonic()
        self.drawn = False

    def tick(self, count, nbytes):
        """Cheap unless a redraw is due."""
        if not self.on:
            return
        now = time.monotonic()
        if now - self.last < 0.1:
            return
        self.last = now
        sys.stderr.write("\r" + self.line(count, nbytes, now) + "\033[K")
        sys.stderr.flush()
        self.drawn = True

    def line(self, count, nbytes, now):
        secs = max(now - self.start, 1e-9)
        text = (f"{self.what} {count} {self.unit} {nbytes / 1e6:.1f} MB "
                f"{nbytes / 1e6 / secs:.1f} MB/s")
        if self.total:
            rate = count / secs
            eta = (self.total - count) / rate if rate > 0 else 0
            text += f" {100 * count / self.total:3.0f}% ETA {int(eta) // 60}:{int(eta) % 60:02d}"
        return text

    def end(self):
        if self.drawn:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
        self.drawn = False

    def elapsed(self):
        return time.monotonic() - self.start
