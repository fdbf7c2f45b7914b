"""numpy.einsum over complex operands, computed as real einsums of their parts.

tex's kernels compute real and integer dtypes. An einsum is linear in each operand, so
with every complex operand written as its real part plus i times its imaginary part,
the result is a sum of real einsums: one for each choice of part in each complex
operand, the choices with an even number m of imaginary parts adding (-1)**(m/2) times
their einsum to the real part of the result, the odd ones (-1)**((m-1)/2) times theirs
to the imaginary part. `a.real` and `a.imag` are strided views of `a` (no copy), which
tex's kernels read in place; every term has the same subscripts and dtypes, so all of
them run one compiled kernel (a chain's kernels, for three or more operands).

A product of two complex operands costs four real einsums (numpy's complex loop does
the same four products per term); n complex operands cost 2**n. The sums of a term
round as real sums do: against numpy's complex accumulation the two differ in the last
bits, as any two summation orders do.
"""
import itertools
import warnings

import numpy as np

from .errors import ShapeError


def is_complex(arrays, dtype, out):
    """Whether an einsum of these operands (`dtype=`, `out=`) computes complex values."""
    if dtype is not None and np.dtype(dtype).kind == "c":
        return True
    return any(a.dtype.kind == "c" for a in arrays) or \
        dtype is None and isinstance(out, np.ndarray) and out.dtype.kind == "c"


def einsum(real_einsum, subscripts, arrays, dtype, out, optimize, casting, order):
    """numpy.einsum(subscripts, *arrays, dtype=, out=, optimize=, casting=, order=) for
    complex operands (is_complex), through `real_einsum` (tex.einsum) on their parts."""
    complex_type = np.result_type(*(a.dtype for a in arrays)) if dtype is None \
        else np.dtype(dtype)
    if dtype is None and isinstance(out, np.ndarray):
        complex_type = np.result_type(complex_type, out.dtype)
    for k, a in enumerate(arrays):
        if not np.can_cast(a.dtype, complex_type, casting):
            raise TypeError(f"Iterator operand {k} dtype could not be cast from {a.dtype!r} "
                            f"to {complex_type!r} according to the rule {casting!r}")
    if complex_type.kind != "c":
        # dtype= a real type (casting='unsafe'): numpy drops the imaginary parts
        warnings.warn("Casting complex values to real discards the imaginary part",
                      np.exceptions.ComplexWarning, stacklevel=3)
        return real_einsum(subscripts, *(a.real for a in arrays), dtype=complex_type,
                           out=out, optimize=optimize, casting="unsafe", order=order)
    if complex_type not in (np.complex64, np.complex128):
        raise TypeError(f"einsum result: tex does not support {complex_type.name}; "
                        "complex: complex64 and complex128")
    part_type = np.empty(0, complex_type).real.dtype
    parts = [(a.real, a.imag) if a.dtype.kind == "c" else (a, None) for a in arrays]
    # parts of the result's part type take tex.einsum's call path without dtype= and
    # casting= (its guard: ~2 us a term, where the full path took ~25)
    cast = {} if all(p.dtype == part_type for pair in parts for p in pair if p is not None) \
        else {"dtype": part_type, "casting": "unsafe"}
    sums = [None, None]             # the real and the imaginary part of the result
    for choice in itertools.product((0, 1), repeat=len(arrays)):
        if any(parts[k][c] is None for k, c in enumerate(choice)):
            continue                # (a real operand has no imaginary part)
        term = np.asarray(real_einsum(
            subscripts, *(parts[k][c] for k, c in enumerate(choice)), optimize=optimize,
            order=order, **cast))
        m = sum(choice)
        signed = -term if m % 4 >= 2 else term      # i**m is -1 or -i
        # (out of place: a term may be a view of an operand, `ij->ji` of one array)
        sums[m % 2] = signed if sums[m % 2] is None else sums[m % 2] + signed
    real, imag = sums
    result = np.empty_like(real, dtype=complex_type)      # (the terms' layout)
    result.real, result.imag = real, imag if imag is not None else 0
    if out is None:
        return result[()] if result.ndim == 0 else result
    if not isinstance(out, np.ndarray):
        raise TypeError("keyword parameter out must be an array for einsum")
    if out.shape != result.shape:
        raise ShapeError(f"out= has shape {out.shape} but the einsum result has shape "
                         f"{result.shape}")
    if not np.can_cast(complex_type, out.dtype, casting):
        raise TypeError(f"Iterator requested dtype could not be cast from {complex_type!r} "
                        f"to {out.dtype!r}, the operand {len(arrays)} dtype, according to "
                        f"the rule {casting!r}")
    np.copyto(out, result, casting="unsafe")
    return out
