"""Mutation check: does the test suite catch small deliberate bugs?

Each mutation replaces one exact snippet of a source file (it must occur exactly once)
in a temporary copy of the repository; the test files named for it then run against the
copy (every Python process, children included, imports tex from the copy: a
sitecustomize on PYTHONPATH maps the packages there; a fresh kernel cache each time).
A mutation is killed when those tests fail. Run it before closing an issue that touches
the scheduler or the code generator:

    python tools/mutation_check.py            # every mutation
    python tools/mutation_check.py -k split   # those whose name contains "split"
    python tools/mutation_check.py --list

It prints one line per mutation and the kill rate; the exit status is 1 when a mutation
survives, when one crashes pytest itself (a test ran crashing code in-process instead of
in a child), or when the unmutated copy fails its tests.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = {"tex": "tex", "tex.scheduler": "schedule", "tex.backends": "backends"}


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str           # relative to the repository
    old: str
    new: str
    tests: tuple        # test files (relative) that should catch it
    why: str = ""


MUTATIONS = [
    Mutation("register_tile_updates_unguarded", "schedule/stage.py",
             "        if not safe:\n            kept.append(g)",
             "        if not safe:\n            pass",
             ("tests/test_mutants.py", "tests/test_schedule.py"),
             "every guard on a register tile's updates dropped (issue 16)"),
    Mutation("split_constant_extent_divisible", "schedule/primitives.py",
             "divisible = E.is_Integer and int(E) % factor == 0",
             "divisible = E.is_Integer",
             ("tests/test_mutants.py", "tests/test_matmul.py"),
             "split treats every constant extent as divisible: no tail (issue 16)"),
    Mutation("split_peel_without_min", "schedule/primitives.py",
             "        inner_ext = sp.Min(T, E - outer * T)",
             "        inner_ext = T",
             ("tests/test_schedule.py", "tests/test_mutants.py"),
             "a peeled tail runs a whole chunk past the end"),
    Mutation("split_guard_dropped", "schedule/primitives.py",
             "        guards = guards + (sp.StrictLessThan(outer * T + inner, E),)",
             "        guards = guards",
             ("tests/test_schedule.py", "tests/test_mutants.py"),
             "a guarded split without its guard"),
    Mutation("split_k_every_part_reads_the_first_chunk", "schedule/primitives.py",
             "    rebuilt = outer * chunk + inner",
             "    rebuilt = inner",
             ("tests/test_mutants.py",),
             "split-K parts all reduce the first chunk of K (issue 16)"),
    Mutation("split_k_last_chunk_not_shortened", "schedule/primitives.py",
             "new_axes.append(Axis(inner, sp.Min(chunk, E - outer * chunk), True))",
             "new_axes.append(Axis(inner, chunk, True))",
             ("tests/test_mutants.py",),
             "split-K's last part runs past the end of K"),
    Mutation("int_max_identity_off_by_one", "tex/combiners.py",
             "return info.max if big else info.min",
             "return info.max if big else info.min + 1",
             ("tests/test_vector.py",),
             "a wrong integer-max identity (issue 16)"),
    Mutation("int_min_identity_off_by_one", "tex/combiners.py",
             "return info.max if big else info.min",
             "return info.max - 1 if big else info.min",
             ("tests/test_vector.py",),
             "a wrong integer-min identity"),
    Mutation("bool_min_identity_false", "tex/combiners.py",
             "        if dtype.kind == \"b\":\n            return big",
             "        if dtype.kind == \"b\":\n            return False",
             ("tests/test_vector.py",),
             "bool min/prod (all) starts from False"),
    Mutation("sum_identity_one", "tex/combiners.py",
             "            return dtype.type(0).item()",
             "            return dtype.type(1).item()",
             ("tests/test_vector.py",),
             "sums start from 1"),
    # code generation: not aimed at by tests/test_mutants.py (how well the rest holds)
    Mutation("vector_tail_mask_one_lane_too_many", "backends/llvm/vector.py",
             'mask = b.icmp_signed("<", self.iota, self.splat(rem))',
             'mask = b.icmp_signed("<=", self.iota, self.splat(rem))',
             ("tests/test_vector.py",),
             "a masked tail reads and writes one lane past the end"),
    Mutation("vector_constant_extent_needs_no_tail", "backends/llvm/vector.py",
             "no_tail = extent.is_Integer and int(extent) % w == 0 and int(extent) % self.w == 0",
             "no_tail = extent.is_Integer",
             ("tests/test_vector.py", "tests/test_mutants.py"),
             "a vector loop of constant extent drops its tail"),
    Mutation("parallel_last_chunk_overruns", "backends/llvm/parallel.py",
             'body(lo, b.select(b.icmp_signed("<", hi, extent), hi, extent))',
             "body(lo, hi)",
             ("tests/test_mutants.py", "tests/test_runtime.py"),
             "the last chunk of a parallel loop runs past its extent"),
    Mutation("unsigned_max_compares_signed", "backends/llvm/ops.py",
             '"max": _combine_minmax("maximum", "smax", "umax", "or_")',
             '"max": _combine_minmax("maximum", "smax", "smax", "or_")',
             ("tests/test_vector.py",),
             "the max of unsigned integers compares them as signed"),
    Mutation("argmax_ties_go_to_the_later", "backends/llvm/ops.py",
             '    earlier = b.icmp_signed("<", pos, acc_pos)',
             '    earlier = b.icmp_signed(">", pos, acc_pos)',
             ("tests/test_vector.py",),
             "argmax/argmin ties keep the later position"),
]


def _copy_tree(dest):
    def ignore(folder, names):
        return [n for n in names if n in (".git", "__pycache__", ".hypothesis",
                                          ".pytest_cache") or n.endswith(".egg-info")]
    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)


_BOOT = '''"""Import tex's packages from {root!r} (tools/mutation_check.py)."""
import importlib.abc
import importlib.util
import os
import sys

_ROOT = {root!r}
_MAP = {packages!r}


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _MAP:
            return None
        folder = os.path.join(_ROOT, _MAP[name])
        return importlib.util.spec_from_file_location(
            name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])


sys.meta_path.insert(0, _Finder())
'''


def _prepare(workdir):
    """A copy of the repository in `workdir`/repo and a sitecustomize pointing at it."""
    repo = os.path.join(workdir, "repo")
    _copy_tree(repo)
    boot = os.path.join(workdir, "boot")
    os.makedirs(boot)
    with open(os.path.join(boot, "sitecustomize.py"), "w") as fh:
        fh.write(_BOOT.format(root=repo, packages=PACKAGES))
    return repo, boot


def _run_tests(repo, boot, tests, timeout):
    """(passed, seconds, the tail of the output) of pytest on `tests` in the copy."""
    env = dict(os.environ, PYTHONPATH=boot + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory(prefix="tex-mutant-cache-") as cache:
        env["TEX_CACHE_DIR"] = cache
        t0 = time.perf_counter()
        try:
            # -n 0: one process stops at the first failure (-x) at once; two xdist
            # workers finish what they run first (a kill took up to 3x longer)
            proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-rf",
                                   "-n", "0", "-p", "no:cacheprovider", *tests],
                                  cwd=repo, env=env,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False, time.perf_counter() - t0, "timeout"
    out = (proc.stdout + proc.stderr).strip().splitlines()
    if proc.returncode < 0:     # a test ran crashing code in-process (tests/isolate.py)
        return False, time.perf_counter() - t0, f"PYTEST CRASHED (signal {-proc.returncode})"
    worker = [ln for ln in out if "crashed while running" in ln]      # pytest-xdist
    if worker:
        return False, time.perf_counter() - t0, f"PYTEST CRASHED (a worker: {worker[0][:110]})"
    failed = [ln for ln in out if ln.startswith(("FAILED", "ERROR"))]
    return proc.returncode == 0, time.perf_counter() - t0, (failed or out or [""])[-1][:150]


def _apply(repo, m):
    path = os.path.join(repo, m.path)
    with open(path) as fh:
        text = fh.read()
    if text.count(m.old) != 1:
        raise SystemExit(f"{m.name}: the snippet occurs {text.count(m.old)} times in "
                         f"{m.path} (the code moved: update the mutation)")
    with open(path, "w") as fh:
        fh.write(text.replace(m.old, m.new))
    return path, text


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-k", metavar="SUBSTR", help="only mutations whose name contains it")
    p.add_argument("--list", action="store_true", help="list the mutations and exit")
    p.add_argument("--timeout", type=float, default=900, help="seconds per test run")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip running the tests on the unmutated copy first")
    args = p.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.k or args.k in m.name]
    if args.list:
        for m in chosen:
            print(f"{m.name:44} {m.path:26} {' '.join(m.tests)}\n    {m.why}")
        return 0
    with tempfile.TemporaryDirectory(prefix="tex-mutation-") as work:
        repo, boot = _prepare(work)
        if not args.no_baseline:
            tests = sorted({t for m in chosen for t in m.tests})
            ok, secs, tail = _run_tests(repo, boot, tests, args.timeout)
            print(f"{'unmutated':44} {'passes' if ok else 'FAILS':9} {secs:6.1f} s  {tail}",
                  flush=True)
            if not ok:
                print("the tests fail without a mutation: fix them first")
                return 1
        killed = crashed = 0
        for m in chosen:
            path, original = _apply(repo, m)
            try:
                ok, secs, tail = _run_tests(repo, boot, m.tests, args.timeout)
            finally:
                with open(path, "w") as fh:
                    fh.write(original)
            killed += not ok
            crashed += tail.startswith("PYTEST CRASHED")
            print(f"{m.name:44} {'SURVIVED' if ok else 'killed':9} {secs:6.1f} s  {tail}",
                  flush=True)
    print(f"kill rate: {killed}/{len(chosen)} = {killed / max(len(chosen), 1):.0%}")
    if crashed:
        print(f"{crashed} mutation(s) crashed pytest instead of failing a test: a test runs "
              f"generated code in-process (run it in a child: tests/isolate.py)")
    return 0 if killed == len(chosen) and not crashed else 1


if __name__ == "__main__":
    sys.exit(main())
