"""A new user's mistakes and numpy habits (a review's findings): each gets a message
that names the user's tensor, dimension or step and a spelling that works, never an
internal error; displays show the expression that is computed."""
import copy
import pickle
import warnings

import numpy as np
import pytest

import tex
from tex.errors import ScheduleError, ShapeError

M, N, K = tex.sizes("M N K")
i, j, k = tex.indices("i j k")
A = tex.tensor("A", (M, K), "float32")
B = tex.tensor("B", (K, N), "float32")
C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))


def test_einsum_non_string_subscripts_and_dtypes_as_numpy():
    a = np.ones((3, 3))
    for call in (lambda m: m.einsum(["ij"], a),
                 lambda m: m.einsum("ij->i", a, dtype={"a": 1})):
        with pytest.raises(TypeError) as want:
            call(np)
        with pytest.raises(TypeError) as got:
            call(tex)
        assert str(got.value) == str(want.value)
    with pytest.raises(TypeError, match="does not support void"):
        tex.einsum("ij->i", a, dtype=[("x", "f4")])


@pytest.mark.parametrize("bad, says", [
    ([{"op": "nope"}], "step 0 .* is not a step record"),
    (["Split"], "step 0 .'Split'. is not a step record"),
    ('[{"step": "Bogus", "stage": "C"}]', "'Bogus'.* the steps are Split"),
    ([{"step": "Split", "stage": "C", "loop": "i"}], "missing .*'factor'; its fields are"),
    ([{"step": "Split", "stage": "C", "loop": "i", "factor": 4, "x": 1}], "unexpected keyword"),
    ('{"a": 1}', "not dict"), (5, "not int"), (None, "not NoneType"),
    ("not json", "not JSON"),
])
def test_replay_of_a_malformed_history(bad, says):
    with pytest.raises(ScheduleError, match=says):
        tex.schedule(C).replay(bad)


def test_rebuilding_an_auto_schedule_warns_nothing():
    # replaying s.auto()'s steps after its specializations warned about "this step
    # changes only its general nest" in every copy, unpickle and spawned worker
    s = tex.schedule(C)
    s.auto()
    f = tex.compile(C)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        copy.deepcopy(s)
        pickle.loads(pickle.dumps(s))
        pickle.loads(pickle.dumps(f))
        tex.schedule(C).replay(s.history_json())


@pytest.mark.parametrize("index, says", [
    ((np.array([0, 1]), k), "an array of positions is not an index expression: tex has no "
                            "gathers"),
    (([0, 1], k), "a list of positions"),
    ((1.5, k), "1.5 is a float"),
    ((i, {1: 2}), r"dimension 1: \{1: 2\} is not an index expression"),
    ((i * 0.5, k), "0.5\\*i is not affine in i .coefficient 0.5 is"),
    ((i // 2, k), "i // 2 is not affine"),
])
def test_indexing_mistakes(index, says):
    with pytest.raises((TypeError, ValueError), match=says):
        A[index]


def test_hints_spell_what_works():
    S0 = tex.tensor("S0", (), "float32")
    cases = [(lambda: np.sum(A), r"tex.sum\(A\[i, j\], over=j\)"),
             (lambda: np.max(A), r"tex.max\(A\[i, j\], over=j\)"),
             (lambda: np.matmul(A, B), r"tex.sum\(A\[i, k\] \* B\[k, j\], over=k\)"),
             (lambda: np.exp(S0), r"np.exp\(S0\[\(\)\]\)"),
             (lambda: A[i, k] * S0, r"write S0\[\(\)\]"),
             (lambda: tex.sum(A[i, k], axis=1), "reduces over indices, not axes"),
             (lambda: tex.mean(A[i, k], axis=1), "tex.mean.X.i, j., over=j."),
             (lambda: tex.max(A[i, k], over=k, keepdims=True), "keepdims= is numpy's")]
    for call, says in cases:
        with pytest.raises(TypeError, match=says):
            call()
    assert repr(S0[()] * 2) == "S0[()] * 2.0"
    # and the spellings the hints give work
    s = tex.compute("s", (), S0[()] * 2)
    assert s(np.float32(3)) == 6


def test_a_cast_of_a_sum_prints_its_parentheses():
    X = tex.tensor("X", (M, N), "float32")
    e = tex.compute("e", (i, j), tex.cast(X[i, j] + 1, "int32"))
    assert str(e).startswith("e[i, j] = (X[i, j] + 1.0).astype(int32)")
    e = tex.compute("e", (i, j), (X[i, j] + 1) * np.int64(3))
    assert str(e).startswith("e[i, j] = (X[i, j] + 1.0).astype(float64) * 3.0")


def test_declaration_mistakes():
    assert tex.tensor("L", 5, "float32").shape == (5,)      # np.zeros(5)'s habit
    with pytest.raises(TypeError, match=r"tuple of sizes, not the string 'M K'"):
        tex.tensor("L", "M K", "float32")
    with pytest.raises(TypeError, match="tex.indices takes names"):
        tex.indices(3)
    with pytest.raises(ShapeError, match="extent 3.0 is not a non-negative integer"):
        tex.tensor("F", (3.0, 2), "float32")
    # a tensor named like the method's own argument
    S = tex.tensor("self", (M,), "float32")
    D = tex.compute("D", (i,), S[i] * 2)
    np.testing.assert_array_equal(D(self=np.ones(3, np.float32)), [2, 2, 2])


def test_call_time_messages_say_each_value_once():
    X = tex.tensor("X", (3,), "float32")
    with pytest.raises(ShapeError, match=r"^tensor X, dimension 0: expected 3, got 4$"):
        tex.compute("D", (i,), X[i] * 2)(np.ones(4, np.float32))
    Y = tex.tensor("Y", (N,), "float32")
    ten = tex.indices("t", extent=10)
    with pytest.raises(ShapeError, match=r"^compute D: tensor Y, dimension 0: index t \+ 2 "
                                         r"reaches 11, past the end \(N = 5 elements\)$"):
        tex.compute("D", (ten,), Y[ten + 2])(np.ones(5, np.float32))
    with pytest.raises(ShapeError, match="does not count from the end as numpy does; write "
                                         "M - 1"):
        tex.compute("D", (k,), A[-1, k])
    Z = tex.tensor("Z", (N,), "int32")
    with pytest.raises(OverflowError, match="^tensor Z: Python integer"):
        tex.compute("D", (i,), Z[i] * 2)([1, 2, 2**40])


def test_two_indices_of_one_name_in_a_definition():
    # it printed as a diagonal, and a replayed schedule split the other loop
    X = tex.tensor("X", (M, N), "float32")
    i2 = tex.indices("i")
    with pytest.raises(ValueError, match="two different indices are named i"):
        tex.compute("D", (i, i2), X[i, i2] * 2)
    with pytest.raises(ValueError, match="two different indices are named i"):
        tex.compute("D", (i,), tex.sum(X[i, i2], over=i2))
