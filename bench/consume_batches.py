"""consume_batches: the consumer every Python loader benchmark here runs.

consume(loader, epochs) iterates `loader` once per epoch, as a training loop
would, and touches every byte of every batch as torch tensors (a sum of
each field, on this thread), so that each loader is charged for delivering
memory the trainer really reads. touch=False skips the sums (to time a
loader's own cost per batch); step_ms adds a busy step after each batch. Batches are dicts of field name -> torch
tensor (DataLoader's collated dicts, feedclient's batches with as_torch).

Timing starts when the first batch is in hand (start-up excluded) and ends
after the last. It returns what bench/ scripts print as JSON:
samples_per_s, stall_pct (time blocked in next() over the timed window),
touch_us and cpu_us (per batch: the sum, and the process CPU time over
the window), and a checksum.
"""
import time


def _spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def consume(loader, epochs, step_ms=0.0, touch=True):
    samples = nbytes = batches = checksum = 0
    waits = []
    touch_s = 0.0
    start = cpu0 = None
    for _ in range(epochs):
        it = iter(loader)
        while True:
            t0 = time.perf_counter()
            batch = next(it, None)
            t1 = time.perf_counter()
            if batch is None:
                break
            if start is None:
                start, cpu0 = t1, time.process_time()
            else:
                waits.append(t1 - t0)
            for v in batch.values():
                if touch:
                    checksum += int(v.sum())  # reads every byte
                nbytes += v.numel() * v.element_size()
            samples += len(v)
            batches += 1
            touch_s += time.perf_counter() - t1
            del batch, v  # a feedclient batch's slot goes back here
            if step_ms:
                _spin(step_ms / 1000.0)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    waits.sort()
    pct = lambda q: waits[min(len(waits) - 1, int(q * len(waits)))] * 1e6 if waits else 0.0
    return {
        "epochs": epochs, "samples": samples, "batches": batches,
        "samples_per_s": samples / wall, "mb_per_s": nbytes / wall / 1e6,
        "us_per_batch": wall / batches * 1e6, "stall_pct": 100.0 * sum(waits) / wall,
        "p50_us": pct(0.5), "p99_us": pct(0.99), "touch_us": touch_s / batches * 1e6,
        "cpu_us": cpu / batches * 1e6, "checksum": checksum,
    }
