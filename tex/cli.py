"""`python -m tex`: the showcase (demo), one einsum under the microscope (einsum), and the
benchmark suite (bench). Every timing is a median of interleaved tex/numpy samples taken
in this process, against what a competent numpy user writes (BLAS on tex's thread count),
and every result is checked against numpy before it is timed."""
import argparse
import functools
import os
import subprocess
import sys
import time
from functools import partial

import numpy as np

import tex
from tex import bench
from tex.backends.llvm import jit


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    if getattr(args, "cpu", None) or getattr(args, "caches", None):
        try:
            env = _target_env(args)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if env:
            return subprocess.call([sys.executable, "-m", "tex", *argv],
                                   env=dict(os.environ, **env))
    return args.command(args, argv)


def _positive(kind):
    """An argparse type: a number of `kind` above 0 (a usage error otherwise)."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be above 0: {text}")
        return value
    parse.__name__ = f"positive {kind.__name__}"
    return parse


def _einsum_operands(parser, shapes_help):
    """The arguments the einsum and tune commands share: subscripts, shapes, dtype."""
    parser.add_argument("subscripts", help='numpy.einsum subscripts, e.g. "ik,kj->ij"')
    parser.add_argument("shapes", nargs="+", metavar="SHAPE", type=parse_shape,
                        help=shapes_help)
    parser.add_argument("--dtype", default="float32",
                        choices=[d.name for d in tex.dtypes_supported])


def _target_options(parser):
    """--cpu / --caches: generate code and derive every heuristic for another CPU
    (TEX_CPU / TEX_CACHES), e.g. the AVX2 path on an AVX-512 machine."""
    parser.add_argument("--cpu", metavar="NAME",
                        help="generate code for this CPU (LLVM's name: haswell, znver3, "
                             "skylake-avx512, ...): TEX_CPU; FMA peaks are then that code's")
    parser.add_argument("--caches", metavar="L1,L2,L3",
                        help="cache sizes the blocking assumes, e.g. 32K,512K,32M: TEX_CACHES "
                             "(an L3 counts at most 32M: blocking.L3_SHARED)")


def _target_env(args):
    """The environment variables --cpu / --caches ask for that this process lacks ({}
    when none): the command starts again with them, as --threads does (tex reads the
    target once; numpy's BLAS its threads at import). A CPU tex does not know, or one
    whose code this host cannot run, is refused here with the reason."""
    from .scheduler.target import _parse_caches, missing_here, named
    want = {}
    if args.cpu:
        try:
            missing = missing_here(named(args.cpu))
        except ValueError as err:                       # it names the CPUs tex knows
            raise ValueError(f"--cpu {args.cpu}: {err}") from None
        if missing:
            raise ValueError(f"--cpu {args.cpu}: this host lacks {', '.join(missing)}, "
                             "so its code cannot run here")
        want["TEX_CPU"] = args.cpu
    if args.caches:
        _parse_caches(args.caches)
        want["TEX_CACHES"] = args.caches
    return {k: v for k, v in want.items() if os.environ.get(k) != v}


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m tex",
        description="tex: tensor expressions compiled to machine code with llvmlite.")
    sub = p.add_subparsers(required=True, metavar="COMMAND")

    d = sub.add_parser("demo", help="compile, run, verify and time the showcase")
    d.set_defaults(command=demo_command)

    e = sub.add_parser("einsum", help="show the loop nest (and LLVM IR) of one einsum and "
                                      "time it against numpy (einsum optimize=True, @)")
    _einsum_operands(e, 'one per operand, e.g. 512x256; "" or "scalar" for a 0-d operand')
    e.add_argument("--show", action="store_true", help="also print the LLVM IR")
    e.add_argument("--repeat", type=_positive(int), default=7,
                   help="interleaved rounds (default 7)")
    _target_options(e)
    e.set_defaults(command=einsum_command)

    t = sub.add_parser("tune", help="search the schedule of one einsum (tex.tune) and record "
                                    "it in the tuning database that tex.compile reads")
    _einsum_operands(t, "one per operand, e.g. 2048x16")
    t.add_argument("--budget", type=_positive(float), default=60, help="seconds (default 60)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--retune", action="store_true", help="search even if the database knows it")
    t.set_defaults(command=lambda args, argv: tune_command(args))

    b = sub.add_parser("bench", help="the benchmark suite, ratios against numpy in one run")
    b.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    b.add_argument("--filter", metavar="SUBSTR", help="only workloads whose name contains it")
    b.add_argument("--repeat", type=_positive(int), default=7,
                   help="interleaved rounds or fresh processes per workload (default 7)")
    b.add_argument("--threads", type=int, metavar="N",
                   help="threads for tex and numpy's BLAS (TEX_NUM_THREADS, OPENBLAS_NUM_THREADS)")
    b.add_argument("--list", action="store_true", help="list the workloads and exit")
    b.add_argument("--dask", action="store_true",
                   help="tex over dask arrays on a LocalCluster instead (tex/dask_bench.py)")
    b.add_argument("--big", action="store_true", help="with --dask: issue 15's sizes")
    _target_options(b)
    b.set_defaults(command=bench_command)
    return p


# ---------------------------------------------------------------- demo

def _showcase():
    """(name, make, baselines, numpy_threads): `make()` compiles and returns the tex
    callable, so that compile time is measured; `baselines` maps what a competent numpy
    user writes for the job (a label) to a callable; every callable takes no arguments.
    `numpy_threads` is bench.BLAS for BLAS calls, else 1 (numpy's own loops)."""
    rng = np.random.default_rng(0)
    M, N, K = tex.sizes("M N K")
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    a, b = rng.standard_normal((2, 512, 512), dtype=np.float32)
    yield ("matmul f32 512x512x512", lambda: partial(tex.compile(C), a, b),
           {"a @ b": partial(np.matmul, a, b)}, bench.BLAS)

    X = tex.tensor("X", (M, N), "int8")
    S = tex.compute("S", (i,), tex.sum(X[i, j], over=j, dtype="int32"))
    x = rng.integers(-128, 128, (4096, 4096), dtype=np.int8)
    yield ("rowsum i8->i32 4096x4096", lambda: partial(tex.compile(S), x),
           {"x.sum(axis=1)": partial(x.sum, axis=1, dtype=np.int32)}, 1)

    p, q, r = (rng.standard_normal(s, dtype=np.float32) for s in ((64, 48), (48, 32), (32, 40)))
    yield ('einsum "ij,jk,kl->il"', lambda: partial(tex.einsum, "ij,jk,kl->il", p, q, r),
           {"p @ q @ r": lambda: p @ q @ r,
            "np.einsum optimize=True": partial(np.einsum, "ij,jk,kl->il", p, q, r,
                                               optimize=True),
            "np.einsum (naive loop)": partial(np.einsum, "ij,jk,kl->il", p, q, r)},
           bench.BLAS)


def _time_rows(name, tex_fn, baselines, numpy_threads, rounds, min_sample_s):
    """Rows (name, threads, tex, baseline, numpy, numpy/tex), one per baseline, timed
    interleaved; when numpy runs on fewer threads than tex, tex again on as many."""
    n_tex = tex.get_num_threads()
    n_np = bench.blas_threads() if numpy_threads == bench.BLAS else numpy_threads
    rows = []
    runs = [(n_tex, baselines)]
    if n_np < n_tex:
        runs.append((n_np, baselines))
    for threads, fns in runs:
        with bench.tex_threads(threads):
            times = bench.interleave_all([tex_fn, *fns.values()], rounds, min_sample_s)
        for label, numpy_s in zip(fns, times[1:]):
            rows.append((name, f"{threads}/{n_np}", bench.format_seconds(times[0]), label,
                         bench.format_seconds(numpy_s), f"{numpy_s / times[0]:.2f}x"))
    return rows


def demo_command(args, argv):
    """Each case: compile, check tex and every baseline against numpy, then time. 'compile'
    is the time of tex.compile plus what the first call takes beyond a steady-state call
    (einsum compiles on its first call); 'kernels' says whether they were compiled or
    loaded from the disk cache; 'threads' is tex's / numpy's."""
    bench.match_blas_threads()
    rows, compiles, failed = [], [], False
    print("checking each result against numpy:")
    for name, make, baselines, numpy_threads in _showcase():
        try:
            before = dict(jit.STATS)
            t0 = time.perf_counter()
            tex_fn = make()
            t1 = time.perf_counter()
            got = tex_fn()
            t2 = time.perf_counter()
            kernels = {k: jit.STATS[k] - before.get(k, 0) for k in ("compiled", "disk_hits")}
            want = next(iter(baselines.values()))()
            bench.check_close(got, want)
            for fn in baselines.values():
                bench.check_close(fn(), want)
            # samples of 0.2 s: the first calls after a pause run on sleeping threads
            case_rows = _time_rows(name, tex_fn, baselines, numpy_threads, 5, 0.2)
        except Exception as err:    # noqa: BLE001 - report every case, then fail
            failed = True
            print(f"  FAIL  {name}: {type(err).__name__}: {err}")
            continue
        print(f"  PASS  {name}")
        tex_s = bench.time_per_call(tex_fn, 3)
        compiles.append((name, bench.format_seconds((t1 - t0) + max(t2 - t1 - tex_s, 0.0)),
                         f"{kernels['compiled']} compiled, {kernels['disk_hits']} from disk"))
        rows += case_rows
    _table(("showcase", "compile", "kernels"), compiles)
    _table(("showcase", "threads", "tex", "numpy baseline", "numpy", "numpy/tex"), rows)
    print("numpy/tex above 1 means tex is faster (medians of interleaved runs; threads: "
          "tex's/numpy's, numpy's BLAS set to tex's count when threadpoolctl is installed).")
    return 1 if failed else 0


def _table(header, rows):
    widths = [max(len(str(r[c])) for r in [header, *rows]) for c in range(len(header))]
    print()
    for r in [header, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())


# ---------------------------------------------------------------- einsum

def parse_shape(text):
    """'512x256' -> (512, 256); '' or 'scalar' -> ()."""
    text = text.strip().lower()
    if text in ("", "scalar"):
        return ()
    try:
        dims = tuple(int(d) for d in text.split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r} is not like 512x256") from None
    if any(d < 0 for d in dims):
        raise argparse.ArgumentTypeError(f"shape {text!r} has a negative dimension")
    return dims


def random_array(rng, shape, dtype):
    """Small values, so that integer results stay far from overflow."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -9, 10, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def matmul_chain(subscripts):
    """Whether `subscripts` is a chain of matrix products ("ij,jk,kl->il"), which a numpy
    user writes with @."""
    if "->" not in subscripts or "." in subscripts:
        return False
    lhs, out = subscripts.replace(" ", "").split("->")
    ops = lhs.split(",")
    letters = "".join(ops)
    return (all(len(o) == 2 for o in ops) and
            all(x[1] == y[0] for x, y in zip(ops, ops[1:])) and
            out == ops[0][0] + ops[-1][1] and
            len(set(letters)) == len(ops) + 1 and len(ops) >= 2)


def einsum_baselines(subscripts, arrays):
    """What a numpy user runs for this einsum: np.einsum with optimize=True (BLAS through
    tensordot where it can), and @ for a chain of matrix products."""
    out = {"numpy.einsum(optimize=True)":
           partial(np.einsum, subscripts, *arrays, optimize=True)}
    if matmul_chain(subscripts):
        out[" @ ".join("abcdefgh"[:len(arrays)])] = lambda: functools.reduce(np.matmul, arrays)
    return out


def einsum_command(args, argv):
    rng = np.random.default_rng(0)
    arrays = [random_array(rng, s, args.dtype) for s in args.shapes]
    try:
        program = tex.einsum_program(args.subscripts, *arrays)   # what tex.einsum compiles
    except (ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    f = tex.compile(program)
    print(f.loop_nest)
    if args.show:
        print()
        print(f.llvm_ir)
    bench.match_blas_threads()
    tex_fn = partial(tex.einsum, args.subscripts, *arrays)
    baselines = einsum_baselines(args.subscripts, arrays)
    want = np.einsum(args.subscripts, *arrays)        # numpy's plain loop: the check
    bench.check_close(tex_fn(), want)
    for fn in baselines.values():
        bench.check_close(fn(), want)
    times = bench.interleave_all([tex_fn, *baselines.values()], args.repeat)
    print(f"\ntex.einsum {bench.format_seconds(times[0])} on {tex.get_num_threads()} "
          f"threads; numpy's BLAS on {bench.blas_threads()} (medians of {args.repeat} "
          "interleaved rounds; results match numpy)")
    for label, numpy_s in zip(baselines, times[1:]):
        print(f"  {label:30} {bench.format_seconds(numpy_s):>10}   numpy/tex "
              f"{numpy_s / times[0]:.2f}x")
    return 0


def tune_command(args):
    """tex.tune on the einsum's program and these shapes (recorded in the tuning
    database, which tex.compile and tex.einsum read), then auto, tuned and numpy timed."""
    rng = np.random.default_rng(0)
    arrays = [random_array(rng, s, args.dtype) for s in args.shapes]
    try:
        program = tex.einsum_program(args.subscripts, *arrays)
    except (ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        s = tex.tune(program, *arrays, budget=args.budget, seed=args.seed,
                     retune=args.retune)
    except ValueError as err:           # (a size of 0, a budget not positive)
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(s.tuning)
    print(s)
    tuned, auto = tex.compile(s), tex.compile(tex.schedule(program).auto())
    want = np.einsum(args.subscripts, *arrays)
    bench.check_close(tuned(*arrays), want)     # (each called once before it is timed:
    bench.check_close(auto(*arrays), want)      # a first call builds its nests)
    tuned_s, auto_s = bench.interleave(lambda: tuned(*arrays), lambda: auto(*arrays), 7)
    _, numpy_s = bench.interleave(lambda: tuned(*arrays), partial(
        np.einsum, args.subscripts, *arrays, optimize=True), 7)
    print(f"\ntuned {bench.format_seconds(tuned_s)}   auto {bench.format_seconds(auto_s)}   "
          f"numpy.einsum {bench.format_seconds(numpy_s)}   auto/tuned {auto_s / tuned_s:.2f}x"
          f"   numpy/tuned {numpy_s / tuned_s:.2f}x ({tex.get_num_threads()} threads; "
          f"medians of 7 interleaved rounds)")
    return 0


# ---------------------------------------------------------------- bench

_THREAD_VARS = ("TEX_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def bench_command(args, argv):
    if args.dask:
        from . import dask_bench
        return dask_bench.main(["--big"] * args.big + ["--repeat", str(min(args.repeat, 3))])
    if args.list:
        for name in bench.select(args.filter):
            print(f"{name:32}  {bench.WORKLOADS[name].__doc__.splitlines()[0]}")
        return 0
    if args.threads and any(os.environ.get(v) != str(args.threads) for v in _THREAD_VARS):
        # BLAS reads its thread count when numpy is imported: start again with it set
        env = dict(os.environ, **{v: str(args.threads) for v in _THREAD_VARS})
        return subprocess.call([sys.executable, "-m", "tex", *argv], env=env)
    names = bench.select(args.filter)
    if not names:
        print(f"no workload matches {args.filter!r}; see --list", file=sys.stderr)
        return 2
    opts = bench.Options(repeat=args.repeat)
    if os.environ.get("TEX_CPU") or os.environ.get("TEX_CACHES"):
        from .scheduler.target import host
        t = bench.code_target()
        print(f"code for {t['cpu']} (TEX_CPU), caches "
              f"{', '.join(f'{k} {v >> 10} KiB' for k, v in t['caches'].items())}; "
              f"this host: {host().cpu}")
    results = bench.run(names, opts)
    print("numpy/tex above 1 means tex is faster (medians of interleaved runs).")
    if args.json:
        bench.write_json(args.json, results, opts)
        print(f"wrote {args.json}")
    return 1 if any(r.error for r in results) else 0
