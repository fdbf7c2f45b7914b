"""`python -m tex`: the showcase (demo), one einsum under the microscope (einsum), and the
benchmark suite (bench). Every timing is a median of interleaved tex/numpy samples taken
in this process, and every result is checked against numpy before it is timed."""
import argparse
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
    return args.command(args, argv)


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m tex",
        description="tex: tensor expressions compiled to machine code with llvmlite.")
    sub = p.add_subparsers(required=True, metavar="COMMAND")

    d = sub.add_parser("demo", help="compile, run, verify and time the showcase")
    d.set_defaults(command=demo_command)

    e = sub.add_parser("einsum", help="show the loop nest (and LLVM IR) of one einsum and "
                                      "time it against numpy.einsum")
    e.add_argument("subscripts", help='numpy.einsum subscripts, e.g. "ik,kj->ij"')
    e.add_argument("shapes", nargs="+", metavar="SHAPE", type=parse_shape,
                   help='one per operand, e.g. 512x256; "" or "scalar" for a 0-d operand')
    e.add_argument("--dtype", default="float32", choices=[d.name for d in tex.dtypes_supported])
    e.add_argument("--show", action="store_true", help="also print the LLVM IR")
    e.add_argument("--repeat", type=int, default=7, help="interleaved rounds (default 7)")
    e.set_defaults(command=einsum_command)

    t = sub.add_parser("tune", help="search the schedule of one einsum (tex.tune) and record "
                                    "it in the tuning database that tex.compile reads")
    t.add_argument("subscripts", help='numpy.einsum subscripts, e.g. "ik,kj->ij"')
    t.add_argument("shapes", nargs="+", metavar="SHAPE", type=parse_shape,
                   help="one per operand, e.g. 2048x16")
    t.add_argument("--dtype", default="float32", choices=[d.name for d in tex.dtypes_supported])
    t.add_argument("--budget", type=float, default=60, help="seconds (default 60)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--retune", action="store_true", help="search even if the database knows it")
    t.set_defaults(command=lambda args, argv: tune_command(args))

    b = sub.add_parser("bench", help="the benchmark suite, ratios against numpy in one run")
    b.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    b.add_argument("--filter", metavar="SUBSTR", help="only workloads whose name contains it")
    b.add_argument("--repeat", type=int, default=7,
                   help="interleaved rounds or fresh processes per workload (default 7)")
    b.add_argument("--threads", type=int, metavar="N",
                   help="threads for tex and numpy's BLAS (TEX_NUM_THREADS, OPENBLAS_NUM_THREADS)")
    b.add_argument("--list", action="store_true", help="list the workloads and exit")
    b.set_defaults(command=bench_command)
    return p


# ---------------------------------------------------------------- demo

def _showcase():
    """(name, make, numpy_fn): `make()` compiles and returns the tex callable, so that
    compile time is measured; both callables take no arguments."""
    rng = np.random.default_rng(0)
    M, N, K = tex.sizes("M N K")
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    a, b = rng.standard_normal((2, 512, 512), dtype=np.float32)
    yield ("matmul f32 512x512x512", lambda: partial(tex.compile(C), a, b),
           partial(np.matmul, a, b))

    X = tex.tensor("X", (M, N), "int8")
    S = tex.compute("S", (i,), tex.sum(X[i, j], over=j, dtype="int32"))
    x = rng.integers(-128, 128, (4096, 4096), dtype=np.int8)
    yield ("rowsum i8->i32 4096x4096", lambda: partial(tex.compile(S), x),
           partial(x.sum, axis=1, dtype=np.int32))

    ops = [rng.standard_normal(s, dtype=np.float32) for s in ((64, 48), (48, 32), (32, 40))]
    yield ('einsum "ij,jk,kl->il"', lambda: partial(tex.einsum, "ij,jk,kl->il", *ops),
           partial(np.einsum, "ij,jk,kl->il", *ops))


def demo_command(args, argv):
    """Each case: compile, check against numpy, then time. 'compile' is the time of
    tex.compile plus what the first call takes beyond a steady-state call (einsum
    compiles on its first call); 'kernels' says whether they were compiled or loaded
    from the disk cache."""
    rows, failed = [], False
    print("checking each result against numpy:")
    for name, make, numpy_fn in _showcase():
        try:
            before = dict(jit.STATS)
            t0 = time.perf_counter()
            tex_fn = make()
            t1 = time.perf_counter()
            got = tex_fn()
            t2 = time.perf_counter()
            kernels = {k: jit.STATS[k] - before.get(k, 0) for k in ("compiled", "disk_hits")}
            bench.check_close(got, numpy_fn())
            # samples of 0.2 s: the first calls after a pause run on sleeping threads
            tex_s, numpy_s = bench.interleave(tex_fn, numpy_fn, rounds=5, min_sample_s=0.2)
        except Exception as err:    # noqa: BLE001 - report every case, then fail
            failed = True
            print(f"  FAIL  {name}: {type(err).__name__}: {err}")
            continue
        print(f"  PASS  {name}")
        compile_s = (t1 - t0) + max(t2 - t1 - tex_s, 0.0)
        rows.append((name, bench.format_seconds(compile_s),
                     f"{kernels['compiled']} compiled, {kernels['disk_hits']} from disk",
                     bench.format_seconds(tex_s), bench.format_seconds(numpy_s),
                     f"{numpy_s / tex_s:.2f}x"))
    _table(("showcase", "compile", "kernels", "tex", "numpy", "numpy/tex"), rows)
    print("numpy/tex above 1 means tex is faster (medians of interleaved runs).")
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
    tex_fn = partial(tex.einsum, args.subscripts, *arrays)
    numpy_fn = partial(np.einsum, args.subscripts, *arrays)
    bench.check_close(tex_fn(), numpy_fn())
    tex_s, numpy_s = bench.interleave(tex_fn, numpy_fn, args.repeat)
    print(f"\ntex.einsum {bench.format_seconds(tex_s)}   numpy.einsum "
          f"{bench.format_seconds(numpy_s)}   numpy/tex {numpy_s / tex_s:.2f}x "
          f"(medians of {args.repeat} interleaved rounds; results match numpy)")
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
    s = tex.tune(program, *arrays, budget=args.budget, seed=args.seed, retune=args.retune)
    print(s.tuning)
    print(s)
    tuned, auto = tex.compile(s), tex.compile(tex.schedule(program).auto())
    bench.check_close(tuned(*arrays), np.einsum(args.subscripts, *arrays))
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
    results = bench.run(names, opts)
    print("numpy/tex above 1 means tex is faster (medians of interleaved runs).")
    if args.json:
        bench.write_json(args.json, results, opts)
        print(f"wrote {args.json}")
    return 1 if any(r.error for r in results) else 0
