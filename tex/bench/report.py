"""Running the workloads and reporting them: a table (every row with the threads of
each side) and a JSON file with the environment the figures depend on."""
import datetime
import json
import os
import platform

import numpy as np

import tex

from .harness import THROUGHPUT_UNITS, WORKLOADS, Result, blas_threads, match_blas_threads


def select(substring=None):
    """Workload names containing `substring` (all when None), in registration order."""
    return [name for name in WORKLOADS if not substring or substring in name]


def run(names, opts, report=print):
    """Run the named workloads with numpy's BLAS on tex's thread count; a failing one is
    recorded with its error, not raised."""
    match_blas_threads()
    results = []
    report(_row(HEADER))
    for name in names:
        try:
            result = WORKLOADS[name](opts)
        except Exception as err:    # noqa: BLE001 - one broken workload must not hide the rest
            result = Result("", error=f"{type(err).__name__}: {err}".strip())
        result.name = name
        results.append(result)
        report(_row(_cells(result)))
    return results


def cpu_description():
    """The CPU the figures come from: /proc/cpuinfo's model name and LLVM's name for it."""
    import llvmlite.binding as llvm
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((ln.split(":", 1)[1].strip() for ln in fh
                          if ln.startswith("model name")), model)
    except OSError:
        pass
    from tex.scheduler import target as targets
    t = targets.host()
    return f"{model} ({llvm.get_host_cpu_name()}, {t.vector_bits}-bit vectors, {t.cores} cores)"


def code_target():
    """The CPU tex generated code for (--cpu / TEX_CPU, else the host's), its vector
    features and the cache sizes its blocking assumed."""
    from tex.scheduler.target import target
    t = target()
    return {"cpu": t.cpu, "features": t.features,
            "caches": {f"L{level}": size for level, size in t.caches}}


def environment(opts):
    """What the figures depend on, stored with them in the JSON file."""
    import llvmlite
    import llvmlite.binding as llvm
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "llvmlite": llvmlite.__version__,
        "tex": tex.__version__,
        "cpu": llvm.get_host_cpu_name(),
        "target": code_target(),
        "cpu_description": cpu_description(),
        "cpus_available": len(os.sched_getaffinity(0)),
        "tex_threads": tex.get_num_threads(),
        "blas_threads": blas_threads(),
        "threads_env": {k: os.environ.get(k) for k in
                        ("TEX_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")},
        "repeat": opts.repeat,
        "min_sample_s": opts.min_sample_s,
    }


def write_json(path, results, opts):
    with open(path, "w") as fh:
        json.dump({"environment": environment(opts),
                   "results": [r.as_dict() for r in results]}, fh, indent=2)
        fh.write("\n")


HEADER = ("workload", "threads", "tex", "baseline", "numpy", "numpy/tex", "tex rate",
          "numpy rate", "notes")
_WIDTHS = (40, 7, 10, 18, 10, 9, 16, 16, 0)


def _row(cells):
    return "  ".join(str(c).ljust(w) for c, w in zip(cells, _WIDTHS)).rstrip()


def threads_cell(r):
    """'2/2': tex's threads / the baseline's ('2/-' without a baseline)."""
    if r.tex_threads is None:
        return ""
    return f"{r.tex_threads}/{r.numpy_threads if r.numpy_threads else '-'}"


def _cells(r):
    if r.error:
        return (r.name, "", "ERROR", "", "", "", "", "", r.error.splitlines()[0])
    rates = ("", "")
    if r.unit in THROUGHPUT_UNITS:
        rates = tuple(f"{r.rate(s):.2f} {r.unit}" if s else "" for s in (r.tex_s, r.numpy_s))
    notes = ", ".join(_note(k, v) for k, v in r.extra.items())
    ratio = f"{r.ratio:.2f}x" if r.ratio else ""
    return (r.name, threads_cell(r), format_seconds(r.tex_s), r.baseline,
            format_seconds(r.numpy_s), ratio, *rates, notes)


def _note(key, value):
    if key.endswith("fraction"):
        return f"{key} {value:.0%}"
    return f"{key} {value:.1f}" if isinstance(value, float) else f"{key} {value}"


def format_seconds(s):
    if s is None:
        return ""
    for scale, unit in ((1e-6, "ns"), (1e-3, "us"), (1.0, "ms")):
        if s < scale:
            return f"{s / scale * 1e3:.3g} {unit}"
    return f"{s:.3g} s"
