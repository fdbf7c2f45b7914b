"""tex: tensor expressions, a tiling scheduler and an llvmlite JIT for NumPy arrays.

The public names are re-exported here only; tex's own modules never import this file's
names (the import graph runs DSL -> scheduler -> backends).
"""
from .errors import ScheduleError, ShapeError
from .dtypes import SUPPORTED as dtypes_supported
from .expr import (Index, Param, abs, argmax, argmin, cast, erf, exp, gelu, indices, log,
                   max, maximum, min, minimum, param, prod, relu, sigmoid, sizes, sqrt, sum,
                   tanh, where)
from .library import (ceil, clip, cos, expm1, floor, isfinite, isnan, log1p, logsumexp, mean,
                      round, rsqrt, sign, silu, sin, softmax, softplus, std, var)
from .tensor import Definition, Tensor, compute, tensor
from .program import Program

from .scheduler.schedule import Schedule, schedule
from .backends.llvm.runtime import compile, get_num_threads, set_num_threads
from .einsum import einsum, einsum_program
from .tuner import tune
from . import interop  # noqa: F401  (numpy's protocols on expressions: np.exp(expr), ...)

__version__ = "0.1.0"

__all__ = [
    "ScheduleError", "ShapeError", "Index", "Param", "Tensor", "Definition", "Program",
    "Schedule", "abs", "argmax", "argmin", "cast", "ceil", "clip", "compile", "compute",
    "cos", "einsum", "einsum_program", "erf", "exp", "expm1", "floor", "gelu", "indices",
    "isfinite", "isnan", "log", "log1p", "logsumexp", "max", "maximum", "mean", "min",
    "minimum", "param", "prod", "relu", "round", "rsqrt", "schedule", "sigmoid", "sign",
    "silu", "sin", "sizes", "softmax", "softplus", "sqrt", "std", "sum", "tanh", "tensor",
    "tune", "var", "where", "dtypes_supported", "get_num_threads", "set_num_threads",
]
