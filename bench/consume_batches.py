"""consume_batches: the consumer every Python loader benchmark here runs.

consume(loader, epochs) iterates `loader` once per epoch, as a training loop
would, and touches every byte of every batch as torch tensors (a sum of
each field, on this thread), so that each loader is charged for delivering
memory the trainer really reads. touch=False skips the sums (to time a
loader's own cost per batch); step_ms adds a busy step after each batch. Batches are dicts of field name -> torch
tensor (DataLoader's collated dicts, feedclient's batches with as_torch).

The timed window opens when the first batch is done (start-up excluded)
and closes when the last is done; what is counted is the batches after
the first, as feedbench counts them. It returns what bench/ scripts
print as JSON: samples_per_s, us_per_batch, stall_pct (time blocked in
next() over the window), own_p50_us (a batch's time in the loop, from
next() to dropping it, step excluded: feedbench's own_p50_us), touch_us
(the sums, per batch), cpu_us (the process's CPU time over the window,
per batch: feedbench's cpu_s) and a checksum.
"""
import time


def _spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def consume(loader, epochs, step_ms=0.0, touch=True):
    samples = nbytes = batches = checksum = 0
    waits, own = [], []
    touch_s = 0.0
    start = end = cpu0 = None
    for _ in range(epochs):
        it = iter(loader)
        while True:
            t0 = time.perf_counter()
            batch = next(it, None)
            t1 = time.perf_counter()
            if batch is None:
                break
            n = 0
            for v in batch.values():
                if touch:
                    checksum += int(v.sum())  # reads every byte
                n += v.numel() * v.element_size()
            k = len(v)
            del batch, v  # a feedclient batch's slot goes back here
            end = time.perf_counter()
            if start is None:  # the window opens when the first batch is done
                start, cpu0 = end, time.process_time()
            else:
                samples, nbytes, batches = samples + k, nbytes + n, batches + 1
                waits.append(t1 - t0)
                own.append(end - t0)
                touch_s += end - t1
            if step_ms:
                _spin(step_ms / 1000.0)
    wall = end - start
    cpu = time.process_time() - cpu0
    p50 = lambda xs: sorted(xs)[len(xs) // 2] * 1e6
    waits.sort()
    return {
        "epochs": epochs, "samples": samples, "batches": batches,
        "samples_per_s": samples / wall, "mb_per_s": nbytes / wall / 1e6,
        "us_per_batch": wall / batches * 1e6, "stall_pct": 100.0 * sum(waits) / wall,
        "p50_us": p50(waits), "p99_us": waits[min(len(waits) - 1, int(0.99 * len(waits)))] * 1e6,
        "own_p50_us": p50(own), "touch_us": touch_s / batches * 1e6,
        "cpu_us": cpu / batches * 1e6, "checksum": checksum,
    }
