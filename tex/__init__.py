"""tex: tensor expressions, a tiling scheduler and an llvmlite JIT for NumPy arrays.

The public names are re-exported here only; tex's own modules never import this file's
names (the import graph runs DSL -> scheduler -> backends).
"""
from .errors import ScheduleError, ShapeError
from .dtypes import SUPPORTED as dtypes_supported
from .expr import (Index, Param, abs, argmax, argmin, cast, erf, exp, gelu, indices, log,
                   max, maximum, min, minimum, param, prod, relu, sigmoid, sizes, sqrt, sum,
                   tanh, where)
from .tensor import Definition, Tensor, compute, tensor
from .program import Program

from .scheduler.schedule import Schedule, schedule
from .backends.llvm.runtime import compile, get_num_threads, set_num_threads
from .einsum import einsum, einsum_program

__version__ = "0.1.0"

__all__ = [
    "ScheduleError", "ShapeError", "Index", "Param", "Tensor", "Definition", "Program",
    "Schedule", "abs", "argmax", "argmin", "cast", "compile", "compute", "einsum",
    "einsum_program", "erf", "exp", "gelu", "indices", "log", "max", "maximum", "min",
    "minimum", "param", "prod", "relu", "schedule", "sigmoid", "sizes", "sqrt", "sum",
    "tanh", "tensor", "where", "dtypes_supported", "get_num_threads", "set_num_threads",
]
