"""The child process that compiles and times `tex.tune`'s candidates (`python -m
tex.tune_worker`), so that a candidate that crashes or hangs takes this process with
it and not the tuning. Messages are pickles with an 8-byte length, on stdin (requests)
and on the process's original stdout (replies); stray output goes to stderr.

Requests:
    ("setup", program, fast_math, fuse, arrays, threads, reference)
    ("measure", [(index, stage, size class, plan)], rounds, cutoff)
Replies to "measure": {index: ("ok", median seconds) | ("refused"|"wrong"|"error", why)},
and the auto candidate's output (plan None) when the setup had no reference. A
candidate whose first timed run takes longer than `cutoff` seconds is not run again.

TEX_TUNE_ABORT=<index> makes the candidate of that index abort the process (os.abort)
on its first run, TEX_TUNE_HANG=<index> sleep for ever: injected faults, for tests.
"""
import os
import signal
import sys
import time

import numpy as np

from tex.tuner import receive, send


def close_enough(got, want):
    """The candidate's result is the auto schedule's, up to the reassociation of sums:
    exact for integers, to a tolerance scaled by the result's magnitude for floats."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.shape} {got.dtype}, auto gives {want.shape} {want.dtype}"
    if want.dtype.kind in "fc":
        rtol = {2: 1e-2, 4: 1e-3}.get(want.dtype.itemsize, 1e-9)
        scale = float(np.max(np.abs(want), initial=0.0))
        ok = np.allclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True)
    else:
        ok = np.array_equal(got, want)
    return None if ok else f"result differs from the auto schedule's by up to " \
        f"{float(np.max(np.abs(got.astype(float) - want.astype(float)))):.3g}"


class Worker:
    def __init__(self, program, fast_math, fuse, arrays, threads, reference):
        import tex
        tex.set_num_threads(threads)
        self.program, self.fast_math, self.fuse = program, fast_math, fuse
        self.arrays, self.reference = arrays, reference

    def schedule(self, stage, cls, plan):
        from tex.scheduler.schedule import default_schedule
        from tex.scheduler.tuning import build
        if plan is None:
            return default_schedule(self.program, self.fast_math, self.fuse)
        return build(self.program, [(stage, cls, plan)], self.fast_math, self.fuse)

    def measure(self, batch, rounds, cutoff=None):
        import tex
        results, runs, output = {}, {}, None
        crash, hang = os.environ.get("TEX_TUNE_ABORT"), os.environ.get("TEX_TUNE_HANG")
        for index, stage, cls, plan in batch:
            try:
                f = tex.compile(self.schedule(stage, cls, plan), self.fast_math)
            except tex.ScheduleError as e:
                results[index] = ("refused", str(e))
                continue
            except Exception as e:          # noqa: BLE001 - a candidate's failure, reported
                results[index] = ("error", f"{type(e).__name__}: {e}")
                continue
            if crash == str(index):
                os.abort()
            while hang == str(index):
                time.sleep(1)
            out = f(**self.arrays)
            if self.reference is None and plan is None:
                self.reference = output = out
            why = close_enough(out, self.reference)
            if why is not None:
                results[index] = ("wrong", why)
                continue
            t = time.perf_counter()
            f(**self.arrays)
            t = time.perf_counter() - t
            if cutoff is not None and t > cutoff:      # far behind: one run says enough
                results[index] = ("ok", t)
                continue
            runs[index] = (f, [t])
        for _ in range(rounds):             # interleaved: the machine's drift hits all alike
            for index, (f, times) in runs.items():
                t = time.perf_counter()
                f(**self.arrays)
                times.append(time.perf_counter() - t)
        for index, (_, times) in runs.items():
            results[index] = ("ok", float(np.median(times)))
        return results, output


def _warm_up():
    """Import tex and set LLVM up (a tiny kernel, from the disk cache after the first
    time) before the first request: a standby worker is ready at once."""
    import tex
    n = tex.sizes("n")
    x = tex.tensor("tune_warm_up_x", (n,), "float32")
    i = tex.indices("i")
    tex.compile(tex.compute("tune_warm_up", (i,), x[i] + 1.0))


def main():
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))   # a crashing candidate: no core file
    # a Ctrl-C in a terminal or notebook reaches the whole process group: the tuning
    # (the parent) stops and ends this process; a traceback from here would only add noise
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["TEX_TIERED"] = "0"          # candidates are timed on their optimized code
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                           # print() and C output: to stderr
    requests = sys.stdin.buffer
    _warm_up()
    worker = None
    while True:
        try:
            msg = receive(requests)
        except EOFError:
            return 0
        if msg[0] == "setup":
            worker = Worker(*msg[1:])
            send(replies, ("ready",))
        elif msg[0] == "measure":
            send(replies, worker.measure(*msg[1:]))


if __name__ == "__main__":
    sys.exit(main())
