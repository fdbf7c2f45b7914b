"""The combiners of reductions: one record each, read by every layer (the DSL's types,
the scheduler's legality rules and accumulators, the code generator, the numpy
reference and the call path's checks)."""

import numpy as np

from tex.records import record


@record
class Combiner:
    """How a reduction combines its values.

    `exact`: combining partial results in any order gives the same bits for every
    dtype (max and min, and argmax/argmin, whose ties go to the first position);
    `positional`: the result is a position (argmax, argmin: int64);
    `numpy`: numpy's name for the operation, as its messages spell it;
    `has_identity`: an empty range gives the identity; otherwise numpy refuses one."""
    name: str
    numpy: str
    exact: bool
    positional: bool
    has_identity: bool

    def identity(self, dtype):
        """The value a reduction into `dtype` starts from (for argmax/argmin: of the values
        compared): 0, 1, -inf/+inf, or the integer type's extremes."""
        dtype = np.dtype(dtype)
        if self.name == "sum":
            return dtype.type(0).item()
        if self.name == "prod":
            return dtype.type(1).item()
        big = self.name in ("min", "argmin")
        if dtype.kind == "f":
            return np.inf if big else -np.inf
        if dtype.kind == "b":
            return big
        info = np.iinfo(dtype)
        return info.max if big else info.min

    def may_reassociate(self, accumulator, fast_math):
        """May partial results be combined in another order than the sequential one?
        Always when that is exact (max/min, or integer and bool accumulators), and for
        float sums and products only under fast_math."""
        return self.exact or np.dtype(accumulator).kind != "f" or fast_math


COMBINERS = {c.name: c for c in (
    Combiner("sum", "add", False, False, True),
    Combiner("prod", "multiply", False, False, True),
    Combiner("max", "maximum", True, False, False),
    Combiner("min", "minimum", True, False, False),
    Combiner("argmax", "argmax", True, True, False),
    Combiner("argmin", "argmin", True, True, False),
)}
