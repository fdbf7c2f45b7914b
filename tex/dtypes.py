"""Element types tex compiles, and numpy's promotion rules for them.

numpy is the specification: a dtype is a `numpy.dtype`, and promotion is
`numpy.result_type` (NEP 50: Python scalars are weak).
"""
import numpy as np

class Supported(tuple):
    """The dtypes tex's tensors, operands and results may have (numpy dtypes); complex,
    longdouble, datetime and object arrays are refused with this list."""


SUPPORTED = Supported(np.dtype(t) for t in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64"))
BOOL = np.dtype("bool")
INT64 = np.dtype("int64")
FLOAT64 = np.dtype("float64")
FLOAT32 = np.dtype("float32")
FLOAT16 = np.dtype("float16")


def as_dtype(spec, what="dtype"):
    """Convert a user's dtype spelling to a supported `numpy.dtype`, or raise TypeError."""
    try:
        dt = np.dtype(spec)
    except TypeError as err:
        raise TypeError(f"{what}: {spec!r} is not a dtype") from err
    if dt not in SUPPORTED:
        if not dt.isnative and dt.newbyteorder("=") in SUPPORTED:
            raise TypeError(f"{what}: {dt.str!r} is {dt.name} in the other byte order; tex "
                            f"computes in this machine's ({dt.newbyteorder('=').str!r}): "
                            "arrays in either order are read, results are native")
        names = ", ".join(d.name for d in SUPPORTED)
        raise TypeError(f"{what}: tex does not support {dt.name}; supported: {names}")
    return dt


def is_float(dt):
    return dt.kind == "f"


def is_signed(dt):
    return dt.kind == "i"


def is_unsigned(dt):
    return dt.kind == "u"


def accumulator(dt):
    """The type a sum accumulates in by default: the element type, except float16 -> float32
    (numpy's einsum accumulates half precision in single precision)."""
    return FLOAT32 if dt == FLOAT16 else dt
