"""`tex.tune`: search a program's schedule parameters by measuring them.

    s = tex.tune(C, A=a, B=b, budget=60, seed=0)
    print(s); s.history; s.tuning          # the schedule, its steps, what was measured

1. The sizes are bound from the arrays; if the tuning database (schedule/tunedb.py)
   has this program, size class and CPU, its schedule is returned at once.
2. Candidate 0 is the auto schedule. The others are plans for the stage with the most
   work (schedule/tuning.py: block sizes, register tiles, split-K parts, parallel
   loops, loop order, chunks, reduction strategies, unrolling), ranked by a cost model
   of loads per FMA and bytes moved at each cache level, with exploration picks drawn
   by `seed`: the same seed gives the same list.
3. They run in order in a child process (tex/tune_worker.py) that compiles each one,
   checks its result against the auto schedule's and times it (median of a few runs);
   a crash or a hang ends that candidate (the child is replaced), not the tuning.
4. Before the budget ends, the best few and the auto schedule are timed again,
   interleaved; the fastest of that round wins, so the result is never one the
   measurements found slower than the auto schedule. It is saved in the database,
   where `tex.compile(C)` finds it in any later process.
"""
import math
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from tex.program import as_program

from .scheduler import tunedb
from .scheduler.schedule import default_schedule
from .scheduler.target import target
from .scheduler.tuning import build, kernel_schedule, main_stage, plans, ranked, size_class

FINALISTS = 3            # the best candidates timed again against the auto schedule


@dataclass
class TuneReport:
    """What `tex.tune` measured (`s.tuning`). `candidates[n]` is (plan, status, seconds):
    candidate 0 is the auto schedule (plan None); status "ok", "refused" (a primitive
    refused the plan), "wrong" (its result differed), "crashed", "hung" or "error"."""
    stage: str
    size_class: tuple
    candidates: list = field(default_factory=list)
    final: dict = field(default_factory=dict)      # index -> seconds in the final round
    why: dict = field(default_factory=dict)        # index -> why it was not timed
    best: int = 0
    elapsed: float = 0.0
    from_database: bool = False

    @property
    def auto_time(self):
        return self.final.get(0, self.candidates[0][2] if self.candidates else None)

    @property
    def best_time(self):
        return self.final.get(self.best, self.candidates[self.best][2]
                              if self.candidates else None)

    def __str__(self):
        head = f"tuned {self.stage} ({tunedb.class_name(self.size_class)}): "
        best = "the auto schedule" if self.best == 0 else f"#{self.best}"
        if self.from_database:
            return (head + f"from the tuning database (measured when it was tuned): best "
                    f"{'the auto schedule' if self.best == 0 else 'a tuned plan'} "
                    f"{_ms(self.best_time)} against auto {_ms(self.auto_time)}")
        done = sum(1 for _, st, _ in self.candidates if st == "ok")
        count = len(self.candidates)
        return (head + f"{count} candidate{'s' * (count != 1)} ({done} timed) in "
                f"{self.elapsed:.1f} s; best {best} {_ms(self.best_time)} against auto "
                f"{_ms(self.auto_time)}")


def tune(out, *args, budget=60, seed=0, progress=True, retune=False, max_candidates=None,
         fast_math=True, fuse=True, **arrays):
    """The fastest schedule of `out` found in about `budget` seconds for calls like
    `f(*args, **arrays)`:

        s = tex.tune(C, A=a, B=b, budget=30)    # a Schedule: print(s), s.history
        f = tex.compile(s)

    It searches the block sizes, register tiles, loop orders, split-K parts and parallel
    loops of the program's main stage, from the auto schedule's, each candidate run in a
    child process (a crash or a hang ends that candidate, not the search); `seed` fixes
    the search order. The result is recorded in a tuning database in the kernel cache
    folder, keyed by the program's structure, its dtypes, a size class of these arrays'
    sizes, the thread count and the CPU: tex.compile(C) in a later process uses it.
    `retune=True` searches again even when the database has an answer;
    `max_candidates` stops the search after that many (the auto schedule included);
    `progress=False` hides the progress bar."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float, np.integer,
                                                           np.floating)) or \
            not math.isfinite(budget) or budget <= 0:
        raise ValueError(f"tex.tune: budget must be a positive number of seconds, not "
                         f"{budget!r}")
    program = as_program(out)
    arrays = _bind(program, args, arrays)
    sizes = {str(s): arrays[program.inputs[pos].name].shape[axis]
             for s, (pos, axis) in program.size_bindings().items()}
    empty = [name for name, n in sizes.items() if n == 0]
    if empty:
        raise ValueError(f"tex.tune: size {empty[0]} is 0 here: an empty result has "
                         "nothing to tune; tune with the sizes of real calls")
    cls = size_class(sizes)
    folder = _cache_dir()
    start = time.monotonic()
    threads = _threads()
    if not retune:
        for e in tunedb.lookup(folder, program, fast_math, fuse, cls, threads=threads):
            if not e.get("exhausted") and e.get("budget", budget) < budget:
                break           # a shorter search than this one asks for: search again
            s = _schedule(program, e["stage"], cls, e["plan"], fast_math, fuse)
            s.tuning = TuneReport(e["stage"], cls, [(None, "ok", e.get("auto_time")),
                                                    (e["plan"], "ok", e.get("time"))],
                                  best=1 if e["plan"] is not None else 0, from_database=True)
            return s
    stage, cands = candidates(program, sizes, seed, fast_math, fuse)
    cands = cands[:max_candidates]
    report = TuneReport(stage, cls)
    search = _Search(program, fast_math, fuse, arrays, threads, stage, cls, budget, start,
                     progress)
    try:
        search.run(cands, report)
    finally:
        search.close()
    report.elapsed = time.monotonic() - start
    plan = report.candidates[report.best][0]
    tunedb.save(folder, program, fast_math, fuse, cls, {
        "stage": stage, "plan": plan, "time": report.best_time, "auto_time": report.auto_time,
        "threads": threads, "measured": len(report.candidates), "budget": budget,
        "exhausted": max_candidates is None and len(report.candidates) >= len(cands),
        "seed": seed}, threads)
    s = _schedule(program, stage, cls, plan, fast_math, fuse)
    s.tuning = report
    return s


def candidates(program, sizes, seed=0, fast_math=True, fuse=True, threads=None):
    """(stage name, [None, plan, ...]): the tuner's candidate list, the auto schedule
    (None) first. A function of the program, the sizes, the threads, the target and
    `seed` only."""
    program = as_program(program)
    sched = kernel_schedule(program, fast_math, fuse)
    stage = main_stage(sched, sizes)
    threads = threads or _threads()
    found = plans(sched, stage, sizes, threads, target())
    return stage.name, [None] + ranked(stage.state.definition, found, sizes, threads, seed)


def _schedule(program, stage, cls, plan, fast_math, fuse):
    if plan is None:
        return default_schedule(program, fast_math, fuse)
    return build(program, [(stage, cls, plan)], fast_math, fuse)


class _Search:
    """The measuring loop: one worker process at a time (timings on a shared machine
    need the cores to themselves), replaced when a candidate kills or hangs it."""

    def __init__(self, program, fast_math, fuse, arrays, threads, stage, cls, budget, start,
                 progress):
        self.setup = (program, fast_math, fuse, arrays, threads)
        self.stage, self.cls = stage, cls
        self.deadline = start + budget
        self.budget, self.start = budget, start
        self.reference = None
        self.proc = self.standby = None
        self.bar = _bar(budget) if progress else None
        self.cost = 2.0           # seconds a candidate takes (compile + runs), running mean

    # ------------------------------------------------------------ the worker
    def _spawn(self):
        """Make a worker current: the standby (started with the first worker, so that a
        crash costs no start-up), else a new process."""
        self.proc, self.standby = self.standby or _Process(), None
        send(self.proc.popen.stdin, ("setup", *self.setup, self.reference))
        self._wait(max(60.0, self.budget))

    def _wait(self, timeout):
        try:
            reply = self.proc.replies.get(timeout=max(0.1, timeout))
        except queue.Empty:
            raise _Hung() from None
        if reply is None:
            raise _Crashed(self.proc.popen.wait())
        return reply

    def close(self):
        self.close_worker()
        if self.standby is not None:
            self.standby.kill()
            self.standby = None
        if self.bar is not None:
            self.bar.close()

    def close_worker(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc = None

    def measure(self, batch, rounds, timeout, final=False, cutoff=None):
        """{index: (status, seconds or why)}; a crash or hang fails the whole batch.
        While searching, a plan's nest is compiled on its own (a third of the compile
        time of the nest with the auto schedule's beside it); the final round times the
        schedules tex.tune returns, specialized for the size class."""
        if self.proc is None:
            self._spawn()
        cls = self.cls if final else ()
        try:
            send(self.proc.popen.stdin, ("measure", [(i, self.stage, cls, p)
                                                     for i, p in batch], rounds, cutoff))
            results, output = self._wait(timeout)
        except (_Hung, _Crashed, OSError) as e:     # (OSError: it died between requests)
            status = "hung" if isinstance(e, _Hung) else "crashed"
            self.close_worker()
            return {i: (status, str(e)) for i, _ in batch}
        if output is not None:
            self.reference = output
        return results

    # ------------------------------------------------------------ the search
    def run(self, cands, report):
        self.standby, spare = _Process(), _Process()    # both start up at once
        self._spawn()
        self.standby = spare
        t0 = time.monotonic()
        auto = self.measure([(0, None)], 5, max(120.0, 2 * self.budget))[0]
        if auto[0] != "ok":
            raise RuntimeError(f"tex.tune: the auto schedule itself failed in the worker "
                               f"({auto[0]}: {auto[1]})")
        report.candidates.append((None, "ok", auto[1]))
        # a compile and a few runs (the first compile in a process also sets LLVM up)
        self.cost = min(1.5, max(0.3, time.monotonic() - t0))
        auto_s = auto[1]
        rounds = int(min(15, max(3, 0.3 / max(auto_s, 1e-6))))
        for index, plan in enumerate(cands[1:], start=1):
            # the final round compiles the finalists with the auto schedule's nests beside
            # theirs (about 2.5 times a candidate's compile) and times them with auto's
            finalists = min(FINALISTS, sum(1 for _, st, t in report.candidates[1:]
                                           if st == "ok" and t < 1.1 * auto_s))
            final_reserve = min(0.4 * self.budget, 1.0 + finalists * 2.5 * self.cost +
                                (finalists + 1) * (rounds + 2) * auto_s) if finalists else 0.0
            left = self.deadline - final_reserve - time.monotonic()
            if left < self.cost:
                break
            timeout = min(left + 2.0, 10.0 + 3 * self.cost + 30 * rounds * auto_s)
            t = time.monotonic()
            status, value = self.measure([(index, plan)], rounds, timeout,
                                         cutoff=3 * auto_s)[index]
            self.cost = 0.7 * self.cost + 0.3 * (time.monotonic() - t)
            report.candidates.append((plan, status, value if status == "ok" else None))
            if status != "ok":
                report.why[index] = value
            self._progress(report, len(cands))
        self._final(report, rounds)

    def _final(self, report, rounds):
        timed = sorted((t, i) for i, (_, st, t) in enumerate(report.candidates) if st == "ok")
        auto = report.candidates[0][2]
        best = [i for t, i in timed if i != 0 and t < 1.1 * auto][:FINALISTS]
        report.best = timed[0][1]
        left = self.deadline - time.monotonic()
        if not best or left <= 0:
            return
        batch = [(0, None)] + [(i, report.candidates[i][0]) for i in best]
        results = self.measure(batch, rounds, left + 2.0, final=True)
        final = {i: r[1] for i, r in results.items() if r[0] == "ok"}
        if 0 in final:
            report.final = final
            report.best = min(final, key=lambda i: (final[i], i))
        self._progress(report, None)

    def _progress(self, report, total):
        if self.bar is None:
            return
        timed = [t for _, st, t in report.candidates if st == "ok"]
        self.bar.n = min(self.budget, round(time.monotonic() - self.start, 1))
        self.bar.set_postfix_str(
            f"{len(report.candidates)}/{total or len(report.candidates)} candidates, "
            f"best {_ms(min(timed))} (auto {_ms(report.candidates[0][2])}), "
            f"{max(0.0, self.deadline - time.monotonic()):.0f} s left", refresh=True)


class _Process:
    """A worker process (tex/tune_worker.py) and the queue its replies arrive on."""

    def __init__(self):
        self.popen = subprocess.Popen([sys.executable, "-m", "tex.tune_worker"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.replies = queue.Queue()
        threading.Thread(target=_pump, args=(self.popen.stdout, self.replies),
                         daemon=True).start()

    def kill(self):
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()
        for stream in (self.popen.stdin, self.popen.stdout):
            try:
                stream.close()
            except OSError:
                pass


class _Hung(Exception):
    pass


class _Crashed(Exception):
    def __init__(self, code):
        super().__init__(f"the worker process ended with exit status {code}")


def send(stream, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def receive(stream):
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(stream.read(n))


def _pump(stream, replies):
    """Read the worker's replies into a queue (None when it ends): the parent waits on
    the queue with a timeout, so a hung candidate cannot block it."""
    try:
        while True:
            replies.put(receive(stream))
    except (EOFError, OSError, ValueError):
        replies.put(None)


def _bar_class():
    """tqdm's widget in a notebook kernel that has ipywidgets, else its text bar (tqdm.auto
    warns 'IProgress not found' in a kernel without ipywidgets before falling back); None
    without tqdm."""
    import importlib.util
    try:
        if "ipykernel" in sys.modules and importlib.util.find_spec("ipywidgets"):
            from tqdm.notebook import tqdm
        else:
            from tqdm.std import tqdm
    except ImportError:               # tqdm is a dependency; a broken install still tunes
        return None
    return tqdm


def _bar(budget):
    tqdm = _bar_class()
    return tqdm and tqdm(total=budget, unit="s", desc="tex.tune", leave=False,
                         bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s "
                                    "{postfix}")


def _bind(program, args, arrays):
    """{input name: ndarray of its tensor's dtype}, from positional and named inputs."""
    names = [t.name for t in program.inputs]
    if len(args) > len(names):
        raise TypeError(f"tex.tune: {len(args)} positional inputs, the program has "
                        f"{len(names)} ({', '.join(names)})")
    bound = dict(zip(names, args))
    for k, v in arrays.items():
        if k not in names:
            raise TypeError(f"tex.tune: unknown input {k!r} (inputs: {', '.join(names)})")
        if k in bound:
            raise TypeError(f"tex.tune: input {k!r} given twice")
        bound[k] = v
    missing = [n for n in names if n not in bound]
    if missing:
        raise TypeError(f"tex.tune: missing inputs {', '.join(missing)} (arrays of the "
                        "sizes to tune for)")
    bound = {t.name: np.asarray(bound[t.name], dtype=t.dtype) for t in program.inputs}
    _check_shapes(program, bound)
    return bound


def _check_shapes(program, arrays):
    """The arrays' ranks and sizes agree with the program (checked here, where the
    message reaches the user, not in the worker process)."""
    from tex.symbolic import sympify

    from .errors import ShapeError
    from .indices import format_size
    for t in program.inputs:
        if arrays[t.name].ndim != t.ndim:
            raise ShapeError(f"tex.tune: tensor {t.name} has rank {t.ndim}, got an array "
                             f"of shape {arrays[t.name].shape}")
    values = {s: arrays[program.inputs[pos].name].shape[axis]
              for s, (pos, axis) in program.size_bindings().items()}
    for t in program.inputs:
        for axis, d in enumerate(t.shape):
            want, got = sympify(d.xreplace(values)), arrays[t.name].shape[axis]
            if want.is_Integer and int(want) != got:
                raise ShapeError(f"tex.tune: tensor {t.name}, dimension {axis}: expected "
                                 f"{format_size(d)} = {int(want)}, got {got}")


def _threads():
    import tex
    return tex.get_num_threads()


def _cache_dir():
    from .backends.llvm.jit import cache_dir
    return cache_dir()


def _ms(seconds):
    return "-" if seconds is None else f"{seconds * 1e3:.3g} ms"

