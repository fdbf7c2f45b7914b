"""Timing and checking: interleaved medians against numpy baselines, with the thread
count of each side recorded.

The machines are shared and noisy, so every figure is a ratio against numpy measured in
the same process and the same minutes: tex and numpy samples alternate (t, n, t, n, ...)
for several rounds and the medians are compared. A sample runs enough calls to last at
least `min_sample_s`, so that timer resolution and one-off hiccups do not dominate.

A baseline is what a competent numpy user writes for the job (`a @ b`, `np.dot`,
`np.einsum(..., optimize=True)`, a float64 BLAS route for exact integer products); a
naive one may appear only with "naive" in its label. The ratio is taken against the
fastest competent baseline; the others go to the notes.
"""
import contextlib
import gc
import itertools
import os
import statistics
import time
from dataclasses import asdict, dataclass, field

import numpy as np

import tex

THROUGHPUT_UNITS = ("GFLOP/s", "GB/s")      # work / time / 1e9
LATENCY_UNITS = {"ns/call": 1e9, "ms": 1e3}


@dataclass
class Options:
    repeat: int = 7                 # interleaved rounds (or fresh processes) per workload
    min_sample_s: float = 0.002     # each timed sample runs calls for at least this long


@dataclass
class Result:
    """One workload's medians (seconds per call). `numpy_s` is the fastest competent
    baseline (`baseline` names it), None when numpy has no counterpart (compile times);
    `work` is FLOPs or bytes per call for throughput units; `tex_threads` and
    `numpy_threads` are the threads each side ran on."""
    unit: str
    tex_s: float = None
    numpy_s: float = None
    work: float = None
    extra: dict = field(default_factory=dict)
    name: str = ""
    error: str = None
    baseline: str = ""
    tex_threads: int = None
    numpy_threads: int = None

    @property
    def ratio(self):
        """baseline time / tex time: above 1 means tex is faster."""
        if self.tex_s and self.numpy_s:
            return self.numpy_s / self.tex_s
        return None

    def rate(self, seconds):
        """`seconds` expressed in this result's unit."""
        if seconds is None:
            return None
        if self.unit in THROUGHPUT_UNITS:
            return self.work / seconds / 1e9
        return seconds * LATENCY_UNITS[self.unit]

    def as_dict(self):
        d = asdict(self)
        d.update(ratio=self.ratio, tex_rate=self.rate(self.tex_s),
                 numpy_rate=self.rate(self.numpy_s))
        return d


WORKLOADS = {}


def workload(fn):
    """Register `fn(opts) -> Result` under its function name."""
    WORKLOADS[fn.__name__] = fn
    return fn


# ---------------------------------------------------------------- threads

BLAS = "blas"       # a baseline's thread count: numpy's BLAS pool (else 1: numpy's own loops)


def blas_threads():
    """Threads numpy's BLAS runs on: threadpoolctl's answer when it is installed, else the
    environment variable OpenBLAS reads, else OpenBLAS's default (every CPU we may use)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            if os.environ.get(var, "").isdigit():
                return int(os.environ[var])
        return len(os.sched_getaffinity(0))
    pools = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
    return max(pools, default=1)


_LIMITS = []


def match_blas_threads(n=None):
    """Give numpy's BLAS tex's thread count (`n`, default tex.get_num_threads()) for the
    rest of the process, through threadpoolctl if it is installed; returns the count BLAS
    now uses (without threadpoolctl the rows say how many each side used)."""
    n = n or tex.get_num_threads()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return blas_threads()
    _LIMITS.append(threadpool_limits(limits=n, user_api="blas"))
    return blas_threads()


@contextlib.contextmanager
def tex_threads(n):
    """tex on `n` threads inside the block."""
    before = tex.get_num_threads()
    tex.set_num_threads(n)
    try:
        yield
    finally:
        tex.set_num_threads(before)


# ---------------------------------------------------------------- timing

@contextlib.contextmanager
def _gc_paused():
    # a collection inside one sample would be charged to whichever side it hit
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def time_per_call(fn, calls):
    """Seconds per call of `fn()` over `calls` back-to-back calls."""
    it = itertools.repeat(None, calls)
    t0 = time.perf_counter()
    for _ in it:
        fn()
    return (time.perf_counter() - t0) / calls


def calls_per_sample(fn, min_sample_s):
    """How many calls of `fn` make one sample last at least `min_sample_s`."""
    calls = 1
    while True:
        per_call = time_per_call(fn, calls)
        if per_call * calls >= min_sample_s:
            return calls
        calls = max(2 * calls, int(1.2 * min_sample_s / max(per_call, 1e-9)))


# OpenBLAS's worker threads spin for about 110 ms after each call before they sleep
# (measured here from /proc); on a 2-core machine they take a core from whatever runs
# next (measured: a 2-thread tex matmul at 199 GFLOP/s right after numpy, 314 after a
# pause). tex's threads sleep at once. With more than one thread each sample therefore
# starts after this pause, so neither library runs against the other's leftover threads.
SETTLE_S = 0.25


def interleave_all(fns, rounds, min_sample_s=0.002):
    """Median seconds per call of each of `fns`, sampled alternately (a, b, c, a, b, ...)."""
    calls = [calls_per_sample(fn, min_sample_s) for fn in fns]
    settle = SETTLE_S if max(tex.get_num_threads(), blas_threads()) > 1 else 0.0
    samples = [[] for _ in fns]
    with _gc_paused():
        for _ in range(rounds):
            for fn, n, out in zip(fns, calls, samples):
                time.sleep(settle)
                out.append(time_per_call(fn, n))
    return [statistics.median(s) for s in samples]


def interleave(tex_fn, numpy_fn, rounds, min_sample_s=0.002):
    """Median seconds per call of each, sampled alternately (t, n, t, n, ...)."""
    return tuple(interleave_all([tex_fn, numpy_fn], rounds, min_sample_s))


def check_close(got, want):
    """tex must give numpy's answer (dtype, shape, values) before it is timed: exact for
    integers and bools, to a float tolerance scaled by the result's magnitude otherwise."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype:
        raise AssertionError(f"dtype {got.dtype}, numpy gives {want.dtype}")
    if want.dtype.kind in "fc":
        rtol = {2: 1e-2, 4: 1e-4}.get(want.dtype.itemsize, 1e-9)
        atol = rtol * float(np.max(np.abs(want), initial=0.0))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, want)


def _snapshot(value):
    # a callable may return a buffer it reuses (out=): keep what it held then
    return np.array(value, copy=True)


def compare(tex_fn, baselines, opts, *, unit, work=None, reference=None, threads=BLAS,
            same_threads=True):
    """Check tex_fn() and every baseline against `reference` (an independent numpy
    result; default the first baseline's), then time them interleaved.

    `baselines`: {label: callable} or one callable ("numpy"); the ratio is taken
    against the fastest one whose label does not say "naive", the others are notes.
    `threads`: the baselines' thread count (BLAS: numpy's BLAS pool, else an int). When
    it is below tex's and `same_threads`, tex is timed on that many threads too and the
    note "ratio at N threads" gives the like-for-like ratio."""
    if callable(baselines):
        baselines = {"numpy": baselines}
    labels = list(baselines)
    want = _snapshot(reference() if reference is not None else baselines[labels[0]]())
    check_close(tex_fn(), want)
    for label in labels:
        try:
            check_close(baselines[label](), want)
        except AssertionError as err:
            raise AssertionError(f"baseline {label!r} disagrees with numpy: {err}") from None
    seconds = interleave_all([tex_fn, *baselines.values()], opts.repeat, opts.min_sample_s)
    tex_s, times = seconds[0], dict(zip(labels, seconds[1:]))
    fair = [lb for lb in labels if "naive" not in lb] or labels
    best = min(fair, key=times.get)
    n_tex = tex.get_num_threads()
    n_np = blas_threads() if threads == BLAS else threads
    result = Result(unit, tex_s, times[best], work, baseline=best, tex_threads=n_tex,
                    numpy_threads=n_np)
    for label in labels:
        if label != best:
            result.extra[f"vs {label}"] = f"{times[label] / tex_s:.2f}x"
    if same_threads and n_np < n_tex:
        with tex_threads(n_np):
            t1, n1 = interleave(tex_fn, baselines[best], opts.repeat, opts.min_sample_s)
        result.extra[f"ratio at {n_np} thread{'s' if n_np > 1 else ''}"] = f"{n1 / t1:.2f}x"
    return result
