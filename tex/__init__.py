"""tex: tensor expressions, a tiling scheduler and an llvmlite JIT for NumPy arrays.

The public names are re-exported here only; tex's own modules never import this file's
names (the import graph runs DSL -> scheduler -> backends).

`import tex` loads only what it needs (numpy and a few small modules): the scheduler and
llvmlite come in with the first name that uses them (PEP 562 `__getattr__` below), and
`tex.einsum` runs a kernel compiled by an earlier process without them
(backends/llvm/warm.py). In a notebook or a REPL a thread loads them while the user types
the next cell (tex/warmup.py).
"""
import importlib
import sys
import types

from .errors import ScheduleError, ShapeError
from .dtypes import SUPPORTED as dtypes_supported
from .backends.llvm.warm import einsum
from .backends.llvm.calls import get_num_threads, set_num_threads

for _f in (einsum, get_num_threads, set_num_threads):
    _f.__module__ = __name__        # help(tex.einsum) says "in module tex"
del _f

__version__ = "0.1.0"

# public name -> the module (relative to tex) that defines it, imported on first use
_LAZY = {}
for _module, _names in {
    ".expr": "Index Param abs argmax argmin cast erf exp gelu log max maximum min "
             "minimum param prod relu sigmoid sizes sqrt sum tanh where",
    ".library": "ceil clip cos expm1 floor isfinite isnan log1p logsumexp mean round rsqrt "
                "sign silu sin softmax softplus std var",
    ".tensor": "Definition Tensor compute indices tensor",
    ".program": "Program",
    ".scheduler.schedule": "Schedule schedule",
    ".backends.llvm.runtime": "compile",
    ".einsum": "einsum_program",
    ".tuner": "tune",
}.items():
    _LAZY.update(dict.fromkeys(_names.split(), _module))
del _module, _names


def __getattr__(name):
    """A public name's first use: import its module (and tex.interop, which installs
    numpy's protocols on expressions and must be in place before any expression is
    built), then keep the name here so that later uses are plain attribute reads."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tex' has no attribute {name!r}")
    warmup.start_llvm()     # a first DSL name: a compile is coming (once; no disk touched)
    importlib.import_module(".interop", __name__)
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """Importing a submodule sets it as an attribute of its package: the late import of
    tex/einsum.py or tex/tensor.py would hide the functions `tex.einsum` and `tex.tensor`
    (an eager `from .einsum import einsum` overwrote the module again). Public names
    win here, as they did."""

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and (name in _LAZY or name == "einsum"):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

from . import warmup    # noqa: E402 -- after the package is whole: the thread imports from it
warmup.start()


__all__ = [
    "ScheduleError", "ShapeError", "Index", "Param", "Tensor", "Definition", "Program",
    "Schedule", "abs", "argmax", "argmin", "cast", "ceil", "clip", "compile", "compute",
    "cos", "einsum", "einsum_program", "erf", "exp", "expm1", "floor", "gelu", "indices",
    "isfinite", "isnan", "log", "log1p", "logsumexp", "max", "maximum", "mean", "min",
    "minimum", "param", "prod", "relu", "round", "rsqrt", "schedule", "sigmoid", "sign",
    "silu", "sin", "sizes", "softmax", "softplus", "sqrt", "std", "sum", "tanh", "tensor",
    "tune", "var", "where", "dtypes_supported", "get_num_threads", "set_num_threads",
]
