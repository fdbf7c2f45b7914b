"""Printed sizes, index expressions and conditions read as Python: evaluated with Python's
operators (and min, max, math.ceil) they give the expression's value. Python binds `//` and `%`
as tightly as `*`, so `3*(N // 4)` and `-(N // 2)` keep their parentheses."""
import math
import random

import tex.symbolic as sp

import tex
from tex.indices import format_size


def _random_expressions(count, seed):
    N, M = tex.sizes("N M")
    atoms = [N, M, N // 2, M // 3, sp.Integer(3), sp.Integer(-2), sp.Mod(N, 4),
             sp.Mod(N - M, 3), sp.Min(N, M), sp.Max(N // 2, 1), sp.ceiling(N / 4), -N, 2 * M]
    rng = random.Random(seed)
    for _ in range(count):
        e = rng.choice(atoms)
        for _ in range(rng.randint(1, 4)):
            other, op = rng.choice(atoms), rng.choice("+-*nfm")
            e = {"+": lambda: e + other, "-": lambda: e - other, "*": lambda: e * other,
                 "n": lambda: -e, "f": lambda: sp.floor(e / rng.choice([2, 3, 5])),
                 "m": lambda: sp.Mod(e, rng.choice([2, 7]))}[op]()
        yield N, M, e


def test_printed_sizes_evaluate_in_python_to_their_value():
    for N, M, e in _random_expressions(400, seed=1):
        text = format_size(e)
        for n, m in [(6, 5), (7, 13), (1025, 2)]:
            got = eval(text, {"min": min, "max": max, "ceil": math.ceil, "N": n, "M": m})  # noqa: S307
            assert got == e.subs({N: n, M: m}), (text, e, n, m)


def test_printed_comparisons_evaluate_in_python_to_their_truth():
    """Comparisons with 0 print as bounds (`ii + 8*io < M`); each keeps its truth."""
    ii, io = tex.indices("ii io")
    rng = random.Random(2)
    env = {"min": min, "max": max, "ceil": math.ceil}
    for N, M, e in _random_expressions(120, seed=3):
        e = e - rng.choice([ii, 8 * io + ii, 6 * ii + 6, ii - 1]) + rng.choice([-1, 0, 1, -7])
        for rel in (e >= 0, e > 0, e <= 0, e < 0):
            if rel in (sp.true, sp.false):
                continue
            text = format_size(rel)
            for n, m, a, b in [(6, 5, 0, 1), (7, 13, 3, 0), (1025, 2, 1, 2)]:
                got = eval(text, {**env, "N": n, "M": m, "ii": a, "io": b})  # noqa: S307
                assert got == bool(rel.subs({N: n, M: m, ii: a, io: b})), (text, rel)


def test_conditions_print_as_python():
    N, M = tex.sizes("N M")
    assert format_size(sp.Eq(M, 1) & (N >= 32)) == "M == 1 and N >= 32"
    assert format_size(~((M >= 6) & (N >= 3))) == "not (M >= 6 and N >= 3)"
    assert format_size(sp.Ne(sp.Mod(N, 4), 0)) == "N % 4 != 0"
    assert format_size(sp.Min(64, N - 64 * M)) in ("min(64, N - 64*M)", "min(N - 64*M, 64)")
    assert format_size(3 * (N // 4)) == "3*(N // 4)"
    assert format_size(-(N // 2)) == "-(N // 2)"
    ii, io = tex.indices("ii io")
    assert format_size(M - ii - 8 * io - 1 >= 0) in ("ii + 8*io < M", "8*io + ii < M")
    assert format_size(N - 64 * io - 64 >= 0) == "64*io + 64 <= N"
    half = sp.Rational(1, 2) * N - M - 1 >= 0       # not integral: no `<` for `<= - 1`
    assert eval(format_size(half), {"N": 3, "M": 1}) is False  # noqa: S307


def test_repr_of_sizes_is_what_a_user_writes_and_evaluates_back():
    """A notebook shows `X.shape` or a size by repr: Python's spelling (`M // 2`), which
    evaluated with the user's own sizes gives the expression back (the same value at
    every point: `-(a + b)*c` may come back with the sign inside the sum); str keeps
    sympy's spelling."""
    N, M = tex.sizes("N M")
    X = tex.tensor("X", (M // 2, math.ceil(N / 4)), "float32")
    assert repr(X.shape) == "(M // 2, ceil(N/4))"
    assert str(M // 2) == "floor(M/2)"
    assert [repr(e) for e in (M % 4, abs(M - N), (M + 1) // 2)] == \
        ["M % 4", "abs(M - N)", "(M + 1) // 2"]
    env = {"min": sp.Min, "max": sp.Max, "ceil": math.ceil, "abs": abs, "N": N, "M": M}
    for _, _, e in _random_expressions(200, seed=4):
        back = sp.sympify(eval(repr(e), env))  # noqa: S307
        for n, m in [(6, 5), (7, 13), (1025, 2)]:
            assert back.subs({N: n, M: m}) == e.subs({N: n, M: m}), (repr(e), e, n, m)
