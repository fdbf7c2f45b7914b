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
import functools
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
    complex_type = _complex_type(tuple(a.dtype for a in arrays), dtype,
                                 out.dtype if dtype is None and isinstance(out, np.ndarray)
                                 else None, casting)
    if complex_type.kind != "c":
        # dtype= a real type (casting='unsafe'): numpy drops the imaginary parts
        warnings.warn("Casting complex values to real discards the imaginary part",
                      np.exceptions.ComplexWarning, stacklevel=3)
        return real_einsum(subscripts, *(a.real for a in arrays), dtype=complex_type,
                           out=out, optimize=optimize, casting="unsafe", order=order)
    part_type = _PART_TYPES[complex_type]
    parts = [(a.real, a.imag) if a.dtype.kind == "c" else (a, None) for a in arrays]
    # parts of the result's part type take tex.einsum's call path without dtype= and
    # casting= (its guard: ~2 us a term, where the full path took ~25)
    cast = {} if all(p.dtype == part_type for pair in parts for p in pair if p is not None) \
        else {"dtype": part_type, "casting": "unsafe"}
    sums = [None, None]             # the real and the imaginary part of the result
    for choice, imaginary, negative in _terms(tuple(p[1] is not None for p in parts)):
        term = np.asarray(real_einsum(
            subscripts, *(parts[k][c] for k, c in enumerate(choice)), optimize=optimize,
            order=order, **cast))
        total = sums[imaginary]
        if total is None:
            # (a copy when the term is a view: `ij->ji` of one array is its operand's)
            sums[imaginary] = -term if negative else \
                term if term.base is None and term.flags.writeable else term.copy()
        else:
            (np.subtract if negative else np.add)(total, term, out=total)
    real, imag = sums
    result = np.empty_like(real, dtype=complex_type)      # (the terms' layout)
    result.real = real
    if imag is not None:
        result.imag = imag
    else:
        result.imag = 0
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


_PART_TYPES = {np.dtype(np.complex64): np.dtype(np.float32),
               np.dtype(np.complex128): np.dtype(np.float64)}


@functools.lru_cache(maxsize=256)
def _complex_type(dtypes, dtype, out_dtype, casting):
    """The type the einsum computes in (numpy's rules), having checked that every
    operand casts to it under `casting`: the same answer for every call of these dtypes."""
    complex_type = np.result_type(*dtypes) if dtype is None else np.dtype(dtype)
    if out_dtype is not None:
        complex_type = np.result_type(complex_type, out_dtype)
    for k, dt in enumerate(dtypes):
        if not np.can_cast(dt, complex_type, casting):
            raise TypeError(f"Iterator operand {k} dtype could not be cast from {dt!r} "
                            f"to {complex_type!r} according to the rule {casting!r}")
    if complex_type.kind == "c" and complex_type not in _PART_TYPES:
        raise TypeError(f"einsum result: tex does not support {complex_type.name}; "
                        "complex: complex64 and complex128")
    return complex_type


@functools.lru_cache(maxsize=256)
def _terms(complex_operands):
    """(choice of part per operand, whether it adds to the imaginary part, whether it
    subtracts) for each term: i**m for m imaginary parts is 1, i, -1 or -i."""
    terms = []
    for choice in itertools.product((0, 1), repeat=len(complex_operands)):
        if any(c and not is_c for c, is_c in zip(choice, complex_operands)):
            continue                # (a real operand has no imaginary part)
        m = sum(choice)
        terms.append((choice, m % 2, m % 4 >= 2))
    return tuple(terms)
