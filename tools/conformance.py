"""The einsum conformance run: tex.einsum against numpy.einsum on the einsums of numpy's
and opt_einsum's test suites, cold.

Issue 13 (compile latency) asks for "313 distinct einsums from numpy's and opt_einsum's
test suites, cold, in at most 150 s". This tool runs the cases of tools/einsum_cases.txt
(subscripts, operand shapes, dtypes and layouts taken from those suites; the file's
header says how) through tex.einsum with a fresh, empty TEX_CACHE_DIR, checks every
result against numpy.einsum, and reports the cold wall time, the cases that passed, the
wrong results (bugs), the errors grouped by cause and the slowest first calls.

    python tools/conformance.py                    # every case, float64, one process
    python tools/conformance.py --dtype float32    # the cases that don't fix a dtype
    python tools/conformance.py --layout F         # ... or a layout (F, S strided, O misaligned)
    python tools/conformance.py --filter '...' --limit 20 --json out.json
    python tools/conformance.py --isolate          # one child process per case

By default every case runs in this process (the figure the issue asks for): a case's
exception is caught and reported, but a crash of the interpreter ends the run; the last
progress line on stderr then names the case, and --isolate runs each case in a child
process (same cache directory, so still one cold run, but each child pays the imports)
and reports a crash or a hang with its subscripts.

Each case calls tex.einsum twice (the first call compiles; the second goes through the
kernel's guard) and checks both results and that the operands were left unchanged. A case
whose einsum numpy refuses passes when tex refuses it with the same exception type (or a
subclass of it: tex's ShapeError is a ValueError). A float16/float32 result off numpy's
is "less precise" rather than wrong when it is within 100x the tolerance of the einsum
computed in float64 (the order of a long sum), "passed" when it is closer to that than
numpy's. Exit status: 0 when every case passed, 1 otherwise.
"""
import argparse
import ast
import collections
import faulthandler
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from dataclasses import asdict, dataclass

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_CASES = os.path.join(HERE, "einsum_cases.txt")
PROJECT_DIRS = ("tex", "schedule", "backends")

# (rtol, atol as a fraction of the largest |expected| value, at least 1)
TOLERANCES = {"float16": (1e-2, 1e-2), "float32": (1e-4, 1e-5), "float64": (1e-9, 1e-11)}
LOOSE = 100                 # 'imprecise', not wrong: within LOOSE x tolerance of float64
NAIVE_FLOPS_LIMIT = 5e6     # above this, the oracle takes numpy's greedy path (still numpy)


# ---------------------------------------------------------------- cases

@dataclass
class Case:
    line: int                   # line number in the cases file
    subscripts: str
    shapes: list
    dtypes: list                # per operand; '*' = the run's --dtype
    layouts: list               # per operand: C F S O Z P (see the cases file)
    einsum_dtype: str = None
    casting: str = None
    origin: str = ""

    def label(self):
        shapes = " ".join("()" if s == () else "x".join(map(str, s)) for s in self.shapes)
        extras = []
        if set(self.dtypes) != {"*"}:
            extras.append("dtype=" + ",".join(self.dtypes))
        if set(self.layouts) != {"C"}:
            extras.append("layout=" + ",".join(self.layouts))
        if self.einsum_dtype:
            extras.append(f"einsum(dtype={self.einsum_dtype}, casting={self.casting})")
        return f"{self.subscripts!r} {shapes}" + ("  [" + " ".join(extras) + "]" if extras else "")


def parse_shape(text):
    return () if text == "()" else tuple(int(d) for d in text.split("x"))


def per_operand(value, count, default):
    values = value.split(",") if value else [default]
    return values * count if len(values) == 1 else values


def read_cases(path):
    cases = []
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            subscripts, shapes, options, origin = (c.strip() for c in raw.split(" | ", 3))
            if subscripts[:1] in ("'", '"'):
                subscripts = ast.literal_eval(subscripts)
            shapes = [parse_shape(s) for s in shapes.split()]
            opts = dict(o.split("=", 1) for o in options.split())
            cases.append(Case(number, subscripts, shapes,
                              per_operand(opts.get("dtype"), len(shapes), "*"),
                              per_operand(opts.get("layout"), len(shapes), "C"),
                              opts.get("einsum_dtype"), opts.get("casting"), origin))
    return cases


def random_values(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "i":
        return rng.integers(-3, 4, shape).astype(dtype)
    if dtype.kind == "u":
        return rng.integers(0, 4, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def with_layout(values, layout):
    """The same values in the memory layout the case names."""
    if layout == "C":
        return values
    if layout == "F":                       # (np.asfortranarray makes a 0-d array 1-d)
        return np.asfortranarray(values) if values.ndim else values
    if layout == "S":                       # every other element on each axis
        big = np.zeros(tuple(2 * d for d in values.shape), values.dtype)
        every_other = tuple(slice(None, None, 2) for _ in values.shape)
        big[every_other] = values
        return big[every_other]
    if layout == "O":                       # one element off the start of its buffer
        buffer = np.zeros(values.size + 1, values.dtype)
        buffer[1:] = values.ravel()
        return buffer[1:].reshape(values.shape)
    if layout == "Z":                       # all strides 0
        return np.broadcast_to(values.ravel()[:1].reshape(()), values.shape)
    if layout == "P":                       # a Python scalar
        if values.shape != ():
            raise ValueError("layout P (a Python scalar) needs shape ()")
        return values.item()
    raise ValueError(f"unknown layout {layout!r}")


def make_operands(case, default_dtype, default_layout, seed):
    """The case's operands, the same for a case whatever else runs (seeded by its text);
    `default_dtype` and `default_layout` for the operands whose case fixes neither."""
    rng = np.random.default_rng([seed, zlib.crc32(case.label().encode())])
    return [with_layout(random_values(rng, shape, default_dtype if dt == "*" else dt),
                        default_layout if layout == "C" else layout)
            for shape, dt, layout in zip(case.shapes, case.dtypes, case.layouts)]


# ---------------------------------------------------------------- one case

def einsum_keywords(case):
    if case.einsum_dtype is None:
        return {}
    return {"dtype": case.einsum_dtype, "casting": case.casting or "safe"}


def oracle(case, operands):
    """numpy.einsum without its optimizer, except where the plain loop nest would be slow
    (many operands over many labels): then numpy's greedy path."""
    kw = einsum_keywords(case)
    optimize = False
    if len(operands) > 2:
        try:
            info = np.einsum_path(case.subscripts, *operands, optimize="greedy")[1]
            naive = float(re.search(r"Naive FLOP count:\s*([0-9.e+]+)", info).group(1))
            optimize = "greedy" if naive > NAIVE_FLOPS_LIMIT else False
        except Exception:
            pass                            # numpy.einsum says why below
    return np.einsum(case.subscripts, *operands, optimize=optimize, **kw)


def where_raised(tb):
    """The innermost frame of tex's own code in a traceback: 'tex/einsum.py:123 _build'."""
    spot = None
    for frame in traceback.extract_tb(tb):
        parts = frame.filename.replace(os.sep, "/").split("/")
        for k, part in enumerate(parts[:-1]):
            if part in PROJECT_DIRS:
                spot = f"{'/'.join(parts[k:])}:{frame.lineno} {frame.name}"
                break
    return spot or "-"


def describe_error(err):
    first_line = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {first_line[:300]}"


def _numpy_views(want, operands):
    """Is numpy's result a view of an operand (then tex's may be one too)?"""
    return isinstance(want, np.ndarray) and any(
        isinstance(op, np.ndarray) and np.shares_memory(want, op) for op in operands)


def mismatch(got, want):
    """None when `got` matches numpy's `want`, else what differs."""
    got_array, want_array = np.asarray(got), np.asarray(want)
    if got_array.shape != want_array.shape:
        return f"shape {got_array.shape}, numpy {want_array.shape}"
    if want_array.dtype.kind in "biu":
        same = np.array_equal(got_array, want_array)
    else:
        part = np.empty(0, want_array.dtype).real.dtype     # (complex: its parts' type)
        rtol, atol = TOLERANCES.get(part.name, TOLERANCES["float64"])
        scale = max(1.0, float(np.max(np.abs(want_array), initial=0.0)))
        same = np.allclose(got_array.astype(want_array.dtype), want_array, rtol=rtol,
                           atol=atol * scale, equal_nan=True)
    if not same:
        diff = np.abs(got_array.astype(np.complex128) - want_array.astype(np.complex128))
        at = np.unravel_index(np.argmax(diff), diff.shape) if diff.ndim else ()
        return (f"values differ: max |tex - numpy| {np.max(diff):.3g} at {tuple(map(int, at))} "
                f"(tex {got_array[at]!r}, numpy {want_array[at]!r}); "
                f"{int(np.count_nonzero(diff > 0))} of {diff.size} elements differ")
    if got_array.dtype != want_array.dtype:
        return f"dtype {got_array.dtype}, numpy {want_array.dtype} (values agree)"
    return None


@dataclass
class Result:
    line: int
    label: str
    origin: str
    status: str = "passed"      # passed | wrong | imprecise | raised | crashed
    detail: str = ""            # what differed, or the exception
    where: str = ""             # the innermost frame of tex's code that raised
    first_call_s: float = 0.0   # compile + run (the cold figure)
    second_call_s: float = 0.0
    new_cache_files: int = 0


def count_cache_files(cache_dir):
    return sum(len(files) for _, _, files in os.walk(cache_dir))


def run_case(tex, case, args, cache_dir):
    result = Result(case.line, case.label(), case.origin)
    try:
        operands = make_operands(case, args.dtype, args.layout, args.seed)
    except Exception as err:
        result.status, result.detail = "raised", f"bad case: {describe_error(err)}"
        return result
    originals = [np.copy(a) for a in operands]
    try:
        want, numpy_error = oracle(case, operands), None
    except Exception as err:
        want, numpy_error = None, err
    files_before = count_cache_files(cache_dir)
    kw = einsum_keywords(case)
    call = "first call"
    start = time.perf_counter()
    try:
        got = tex.einsum(case.subscripts, *operands, **kw)
        result.first_call_s = time.perf_counter() - start
        call = "second call"
        start = time.perf_counter()
        again = tex.einsum(case.subscripts, *operands, **kw)
        result.second_call_s = time.perf_counter() - start
    except Exception as err:
        result.first_call_s = result.first_call_s or time.perf_counter() - start
        result.new_cache_files = count_cache_files(cache_dir) - files_before
        if numpy_error is not None and isinstance(err, type(numpy_error)):
            result.detail = f"both refuse: {describe_error(err)}"
            return result
        result.status = "raised"
        result.detail = describe_error(err) + (" (on the second call)" if call == "second call"
                                               else "")
        if numpy_error is not None:
            result.detail += f"  (numpy raises {describe_error(numpy_error)})"
        result.where = where_raised(err.__traceback__)
        return result
    result.new_cache_files = count_cache_files(cache_dir) - files_before
    if numpy_error is not None:
        result.status = "wrong"
        result.detail = f"tex returns a result where numpy raises {describe_error(numpy_error)}"
        return result
    problems = []
    first = mismatch(got, want)
    if first:
        problems.append(first)
    second = mismatch(again, want)
    if second and second != first:
        problems.append(f"second call: {second}")
    changed = [k for k, (a, b) in enumerate(zip(operands, originals))
               if not np.array_equal(np.asarray(a), b, equal_nan=True)]
    if changed:
        problems.append(f"operand(s) {changed} modified")
    if isinstance(got, np.ndarray) and isinstance(again, np.ndarray) and \
            np.shares_memory(got, again) and not _numpy_views(want, operands):
        # (numpy's einsum returns a view of the operand when it sums nothing: ii->i)
        problems.append("the second call's result is the first's memory")
    if problems == [first] and first.startswith("values differ"):
        verdict, detail = compare_with_float64(case, operands, got, want)
        if verdict:
            result.status, result.detail = verdict, f"{first}; {detail}"
            return result
    if problems:
        result.status, result.detail = "wrong", "; ".join(problems)
    return result


def compare_with_float64(case, operands, got, want):
    """A float16/float32 result that misses numpy's, judged against the same einsum in
    float64: ('imprecise', how far each is) when tex is further from it than numpy but
    within LOOSE times the tolerance (rounding: the order of a long sum), ('passed', ...)
    when tex is the closer one, (None, '') otherwise (wrong)."""
    want = np.asarray(want)
    if want.dtype.name not in ("float16", "float32") or case.einsum_dtype:
        return None, ""
    wide = [np.asarray(a, np.float64) if isinstance(a, np.ndarray) else a for a in operands]
    exact = np.asarray(np.einsum(case.subscripts, *wide, optimize="greedy"))
    rtol, atol = TOLERANCES[want.dtype.name]
    scale = max(1.0, float(np.max(np.abs(exact), initial=0.0)))
    tex_error = np.abs(np.asarray(got, np.float64) - exact)
    numpy_error = np.abs(want.astype(np.float64) - exact)
    detail = (f"against float64: tex off by {tex_error.max():.3g}, numpy by "
              f"{numpy_error.max():.3g} (largest |result| {scale:.3g})")
    if tex_error.max() <= numpy_error.max():
        return "passed", detail
    if np.all(tex_error <= LOOSE * (atol * scale + rtol * np.abs(exact))):
        return "imprecise", detail
    return None, ""


# ---------------------------------------------------------------- runners

def run_in_process(cases, args, cache_dir):
    start = time.perf_counter()
    import tex
    import_s = time.perf_counter() - start
    results = []
    for k, case in enumerate(cases, 1):
        if not args.quiet:
            print(f"[{k:4}/{len(cases)}] {case.label()}", file=sys.stderr, flush=True)
        results.append(run_case(tex, case, args, cache_dir))
    return results, import_s


def run_isolated(cases, args, cache_dir):
    results = []
    env = dict(os.environ, TEX_CACHE_DIR=cache_dir)
    for k, case in enumerate(cases, 1):
        if not args.quiet:
            print(f"[{k:4}/{len(cases)}] {case.label()}", file=sys.stderr, flush=True)
        command = [sys.executable, os.path.abspath(__file__), "--child", str(case.line),
                   "--cases", args.cases, "--dtype", args.dtype, "--layout", args.layout,
                   "--seed", str(args.seed)]
        crashed = Result(case.line, case.label(), case.origin, status="crashed")
        try:
            proc = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=args.timeout)
        except subprocess.TimeoutExpired:
            crashed.detail = f"no result after {args.timeout} s (killed)"
            results.append(crashed)
            continue
        if proc.returncode == 0 and proc.stdout.strip():
            results.append(Result(**json.loads(proc.stdout.strip().splitlines()[-1])))
            continue
        if proc.returncode < 0:
            crashed.detail = f"killed by {signal.Signals(-proc.returncode).name}"
        else:
            crashed.detail = f"exit status {proc.returncode}"
        tail = proc.stderr.strip().splitlines()[-3:]
        crashed.detail += ("; stderr: " + " / ".join(tail)) if tail else ""
        results.append(crashed)
    return results, None


def run_child(line, args):
    """--child: one case, its Result as a JSON line on stdout."""
    case = next(c for c in read_cases(args.cases) if c.line == line)
    import tex
    result = run_case(tex, case, args, os.environ["TEX_CACHE_DIR"])
    print(json.dumps(asdict(result)))


# ---------------------------------------------------------------- report

def error_cause(result):
    """The grouping key of a raised case: exception type, message with names and numbers
    blanked, where in tex it was raised."""
    message = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", result.detail)
    message = re.sub(r"\b\d+\b", "N", message)
    return f"{message}\n      raised at {result.where}" if result.where else message


def report(results, args, mode, wall_s, import_s):
    by_status = collections.defaultdict(list)
    for r in results:
        by_status[r.status].append(r)
    tex_s = sum(r.first_call_s + r.second_call_s for r in results)
    refused = sum(1 for r in by_status["passed"] if r.detail.startswith("both refuse"))
    lines = [
        f"einsum conformance: {len(results)} cases from {os.path.relpath(args.cases, ROOT)}, "
        f"--dtype {args.dtype} --layout {args.layout}, mode: {mode}",
        f"  wall time (cold, fresh TEX_CACHE_DIR, everything incl. numpy): {wall_s:.1f} s",
    ]
    if import_s is not None:
        lines.append(f"  import tex {import_s:.2f} s (it defers most imports to the first call) "
                     f"+ tex.einsum calls {tex_s:.1f} s = {import_s + tex_s:.1f} s of tex")
    else:
        lines.append(f"  tex.einsum calls {tex_s:.1f} s (each child also paid its imports)")
    compiled = sum(1 for r in results if r.new_cache_files > 0)
    lines.append(f"  {compiled} cases compiled new code (wrote files to the kernel cache); "
                 f"tex.einsum time per case {tex_s / max(1, len(results)):.3f} s on average")
    lines.append(f"  passed {len(by_status['passed'])} (of which {refused} refused by both), "
                 f"WRONG {len(by_status['wrong'])}, less precise than numpy "
                 f"{len(by_status['imprecise'])}, raised {len(by_status['raised'])}, "
                 f"crashed {len(by_status['crashed'])}")
    if by_status["crashed"]:
        lines.append(f"\nCRASHED ({len(by_status['crashed'])}):")
        lines += [f"  line {r.line}: {r.label}\n      {r.detail}" for r in by_status["crashed"]]
    if by_status["wrong"]:
        lines.append(f"\nWRONG RESULTS ({len(by_status['wrong'])}) -- bugs:")
        lines += [f"  line {r.line}: {r.label}   ({r.origin})\n      {r.detail}"
                  for r in by_status["wrong"]]
    if by_status["imprecise"]:
        lines.append(f"\nLESS PRECISE THAN NUMPY ({len(by_status['imprecise'])}): off numpy's "
                     f"result, further than numpy from the float64 one, within {LOOSE}x the "
                     "tolerance of it")
        lines += [f"  line {r.line}: {r.label}   ({r.origin})\n      {r.detail}"
                  for r in by_status["imprecise"]]
    if by_status["raised"]:
        groups = collections.defaultdict(list)
        for r in by_status["raised"]:
            groups[error_cause(r)].append(r)
        lines.append(f"\nRAISED ({len(by_status['raised'])} cases, {len(groups)} causes):")
        for cause, members in sorted(groups.items(), key=lambda g: -len(g[1])):
            lines.append(f"  [{len(members)}] {cause}")
            lines += [f"      line {r.line}: {r.label}" for r in members]
    slowest = sorted(results, key=lambda r: -r.first_call_s)[:10]
    lines.append("\nslowest first calls (compile + run):")
    lines += [f"  {r.first_call_s:7.2f} s  {r.label}  ({r.new_cache_files} new cache files)"
              for r in slowest]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=DEFAULT_CASES, help="cases file (default: %(default)s)")
    parser.add_argument("--filter", help="only cases whose subscripts, shapes or origin contain this")
    parser.add_argument("--limit", type=int, help="only the first N cases (after --filter)")
    parser.add_argument("--dtype", default="float64",
                        help="dtype of the operands of cases that don't fix one (default float64)")
    parser.add_argument("--layout", default="C", choices=("C", "F", "S", "O"),
                        help="layout of the operands of cases that don't fix one (default C; "
                        "F Fortran order, S every other element, O misaligned by one element)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--isolate", action="store_true",
                        help="run each case in a child process (reports crashes and hangs)")
    parser.add_argument("--timeout", type=float, default=600,
                        help="--isolate: seconds a case may take (default %(default)s)")
    parser.add_argument("--json", metavar="OUT", help="write every case's result to this file")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--child", type=int, metavar="LINE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.cases = os.path.abspath(args.cases)
    if args.child is not None:
        return run_child(args.child, args)
    if "tex" in sys.modules:
        raise SystemExit("tex is already imported: the run would not be cold")

    cases = read_cases(args.cases)
    if args.filter:
        cases = [c for c in cases if args.filter in c.label() or args.filter in c.origin]
    cases = cases[:args.limit] if args.limit else cases
    cache_dir = tempfile.mkdtemp(prefix="tex-conformance-")
    os.environ["TEX_CACHE_DIR"] = cache_dir     # before tex is imported: a cold run
    faulthandler.enable()
    mode = ("isolated: one child process per case" if args.isolate
            else "in-process: every case in this one interpreter")
    print(f"einsum conformance: {len(cases)} cases, {mode}, empty cache {cache_dir}",
          file=sys.stderr, flush=True)
    try:
        start = time.perf_counter()
        runner = run_isolated if args.isolate else run_in_process
        results, import_s = runner(cases, args, cache_dir)
        wall_s = time.perf_counter() - start
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    print(report(results, args, mode, wall_s, import_s))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mode": mode, "dtype": args.dtype, "layout": args.layout,
                       "cases_file": args.cases,
                       "wall_s": wall_s, "import_tex_s": import_s,
                       "results": [asdict(r) for r in results]}, f, indent=1)
    return 0 if all(r.status == "passed" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
