"""Schedules: random legal primitive sequences against the unscheduled reference, the
refusal catalogue, history replay and a golden printout."""
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tex
from tex.scheduler.target import overriding
from cpus import ZEN3
from isolate import in_child
from tex.backends import numpy_ref

M, N, K = tex.sizes("M N K")


def _programs():
    i, j, k = tex.indices("i j k")
    A = tex.tensor("A", (M, K), "float32")
    B = tex.tensor("B", (K, N), "float32")
    X = tex.tensor("X", (M, N), "int8")
    Y = tex.tensor("Y", (M, N), "float64")
    return {
        "matmul": tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k)),
        "rowsum_i8": tex.compute("S", (i,), tex.sum(X[i, j], over=j, dtype="int32")),
        "colmax": tex.compute("Cm", (j,), tex.max(Y[i, j], over=i)),
        "argmin_rows": tex.compute("Am", (i,), tex.argmin(Y[i, j], over=j)),
        "prod_rows": tex.compute("P", (i,), tex.prod(Y[i, j] * 0.5 + 0.75, over=j)),
        "elementwise": tex.compute("E", (i, j), tex.exp(Y[i, j]) * 2 - Y[i, j]),
        "full_sum": tex.compute("F", (), tex.sum(Y[i, j], over=(i, j))),
        "argmax_cols": tex.compute("Ax", (j,), tex.argmax(Y[i, j], over=i)),
        "gemm_rowmax": tex.compute("Rm", (i,), tex.max(tex.compute(
            "G", (i, j), tex.sum(A[i, k] * B[k, j], over=k))[i, j], over=j)),
        "min_rows_i8": tex.compute("Mn", (i,), tex.min(X[i, j], over=j)),
        # decreasing indices (reversals): negative steps through every primitive
        "reversed": tex.compute("Rv", (i, j), Y[i, N - 1 - j] * 2 - Y[M - 1 - i, j]),
        "matmul_reversed_k": tex.compute("Ck", (i, j), tex.sum(A[i, K - 1 - k] * B[k, j],
                                                               over=k)),
        "flipped_dot_rows": tex.compute("Fd", (i,), tex.sum(Y[i, N - 1 - j] * Y[i, j],
                                                            over=j)),
    }


PROGRAMS = _programs()
SIZES = [1, 2, 7, 16, 63, 65]


def _inputs(program, rng, sizes):
    arrays = []
    for t in program.inputs:
        shape = tuple(int(d.xreplace(sizes)) for d in t.shape)
        if t.dtype.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(t.dtype))
        else:
            arrays.append(rng.integers(-128, 128, shape).astype(t.dtype))
    return arrays


@st.composite
def schedules(draw):
    name = draw(st.sampled_from(sorted(PROGRAMS)))
    defn = PROGRAMS[name]
    s = tex.schedule(defn)
    if len(s.stages) > 1 and draw(st.booleans()):
        s.fuse(defn, at=draw(st.sampled_from(s[defn].loops)))
    stage = draw(st.sampled_from(s.stages))
    for _ in range(draw(st.integers(0, 5))):
        loops = stage.loops
        if not loops:
            break
        prim = draw(st.sampled_from(["split", "split", "reorder", "parallel", "unroll",
                                     "split_k", "split_parts", "privatize", "pack",
                                     "vectorize"]))
        loop = draw(st.sampled_from(loops))
        try:
            if prim == "pack":
                stage.pack(draw(st.sampled_from(stage.definition.reads())), at=loop,
                           layout=draw(st.sampled_from(["box", "loops"])))
            elif prim == "vectorize":
                stage.vectorize(loops[-1], tail=draw(st.sampled_from(["peel", "mask"])))
            elif prim in ("split_k", "split_parts"):
                parts = draw(st.sampled_from([1, 2, 3, 7, 100, tex.param("P")]))
                getattr(stage, prim)(loop, parts)
            elif prim == "privatize":
                stage.privatize(loop)
            elif prim == "split":
                stage.split(loop, draw(st.integers(1, 9)),
                            tail=draw(st.sampled_from(["guard", "peel", "mask"])))
            elif prim == "reorder":
                stage.reorder(*draw(st.permutations(loops)))
            elif prim == "parallel":
                stage.parallel(loop)
            else:
                stage.unroll(loop)
        except tex.ScheduleError:
            pass                     # an illegal choice is refused; keep going
    sizes = {M: draw(st.sampled_from(SIZES)), N: draw(st.sampled_from(SIZES)),
             K: draw(st.sampled_from(SIZES))}
    params = {"P": draw(st.sampled_from([1, 2, 5, 64]))}
    return name, s, sizes, params


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(schedules(), st.integers(0, 2**31))
@in_child
def test_random_schedules_match_reference(case, seed):
    """At least 500 (program, schedule) pairs a run: splits with every tail, reorders,
    parallel, unrolled and vector loops, split_k with every combiner (fixed and
    call-time P), privatize, packs of both layouts, fusion. Runs in a child process: a
    wrong guard or tail in generated code may crash."""
    name, s, sizes, params = case
    program = s.program
    # one case in 16 checks every access of the generated code (bounds_check): a legal
    # schedule never reads or writes outside a buffer
    f = tex.compile(s, bounds_check=seed % 16 == 0)
    arrays = _inputs(program, np.random.default_rng(seed), sizes)
    kwargs = {p: v for p, v in params.items() if p in f.param_names}
    try:
        want, = numpy_ref.evaluate(program, arrays)
    except ValueError:                       # a max over an empty axis: numpy refuses
        with pytest.raises(ValueError, match="zero-size array"):
            f(*arrays, **kwargs)
        return
    got = f(*arrays, **kwargs)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-4, err_msg=str(s))
    else:
        np.testing.assert_array_equal(got, want, err_msg=str(s))


def test_split_parts_deals_a_loop_in_parts_and_replays():
    """split_parts(i, P): P chunks of ceil(M/P) (the last shorter, empty ones when P >
    M), the outer loop parallel if asked; recorded and replayed with a call-time P;
    refused for bad part counts."""
    C = PROGRAMS["matmul"]
    s = tex.schedule(C)
    io, ii = s[C].split_parts(s[C].loops[0], tex.param("P"))
    s[C].parallel(io)
    text = str(s)
    assert re.search(r"for io in 0\.\.P:  # parallel", text), text
    again = tex.schedule(C).replay(s.history_json())
    assert str(again) == text
    f = tex.compile(again)
    rng = np.random.default_rng(3)
    for m, parts in [(1, 1), (7, 3), (65, 64), (5, 9)]:
        a = rng.standard_normal((m, 6)).astype(np.float32)
        b = rng.standard_normal((6, 7)).astype(np.float32)
        np.testing.assert_allclose(f(a, b, P=parts), a @ b, rtol=1e-5, atol=1e-5)
    i = s[C].loops[1]
    with pytest.raises(tex.ScheduleError,
                       match=r"split_parts: .*parts must be from 1 to 2\*\*62, got 0"):
        s[C].split_parts(i, 0)
    with pytest.raises(tex.ScheduleError, match="split_parts: .*is not an integer"):
        s[C].split_parts(i, 2.5)


def test_history_replays_to_the_same_nest():
    C = PROGRAMS["matmul"]
    s = tex.schedule(C)
    io, ii = s[C].split(s[C].loops[0], 8, tail="guard")
    jo, ji = s[C].split(s[C].loops[2], 16)
    s[C].reorder(io, jo, ii, s[C].loops[-1], ji)
    s[C].parallel(io)
    again = tex.schedule(C).replay(s.history_json())
    assert str(again) == str(s)


def test_golden_tiled_matmul(golden):
    C = PROGRAMS["matmul"]
    s = tex.schedule(C)
    i, j, k = (x.var for x in s[C].loops)
    io, ii = s[C].split(s[C].loops[0], 8)
    s[C].reorder(io, s[C].loops[2], s[C].loops[3], ii)
    s[C].parallel(io)
    with overriding(ZEN3):
        golden("tiled_matmul", str(s))


def test_refusals_name_the_loop():
    C = PROGRAMS["matmul"]
    s = tex.schedule(C)
    i, j, k = s[C].loops
    with pytest.raises(tex.ScheduleError, match="parallel: .*loop k is a reduction loop"):
        s[C].parallel(k)
    with pytest.raises(tex.ScheduleError,
                       match=r"split: .*loop i: factor must be from 1 to 2\*\*62"):
        s[C].split(i, 0)
    with pytest.raises(tex.ScheduleError, match=r"factor must be from 1 to 2\*\*62, got -3"):
        s[C].split(i, -3)
    # a factor past 2**62 overflowed the generated index arithmetic (a crash, or
    # uninitialized partials), as a parameter that large is refused at its call
    for huge in (2 ** 62 + 1, 2 ** 63, 2 ** 64):
        bound = rf"must be from 1 to 2\*\*62, got {huge}"
        with pytest.raises(tex.ScheduleError, match="split: .*factor " + bound):
            s[C].split(i, huge)
        with pytest.raises(tex.ScheduleError, match="split_k: .*parts " + bound):
            s[C].split_k(k, huge)
        with pytest.raises(tex.ScheduleError, match="split_parts: .*parts " + bound):
            s[C].split_parts(i, huge)
    with pytest.raises(tex.ScheduleError, match="tail='pad' is not one of"):
        s[C].split(i, 4, tail="pad")
    with pytest.raises(tex.ScheduleError, match="vectorize: .*loop i is not the innermost"):
        s[C].vectorize(i)
    other = tex.schedule(PROGRAMS["rowsum_i8"])
    with pytest.raises(tex.ScheduleError, match="belongs to stage S"):
        s[C].split(other[PROGRAMS["rowsum_i8"]].loops[0], 2)
    io, ii = s[C].split(i, 4)
    with pytest.raises(tex.ScheduleError, match="loop ii has extent min\\(4, M - 4\\*io\\)"):
        s[C].reorder(ii, io)
    with pytest.raises(tex.ScheduleError, match="no longer a loop"):
        s[C].split(i, 2)


def test_float_reduction_order_is_kept_without_fast_math():
    F = PROGRAMS["full_sum"]
    s = tex.schedule(F, fast_math=False)
    i, j = s[F].loops
    with pytest.raises(tex.ScheduleError, match="reorder: .*would be reassociated"):
        s[F].reorder(j, i)
    with pytest.raises(tex.ScheduleError, match="vectorize: .*fast_math is off"):
        s[F].vectorize(j)
    # integers and max/min may be reordered: the result is the same bits
    Cm = PROGRAMS["colmax"]
    s2 = tex.schedule(Cm, fast_math=False)
    i, j = s2[Cm].loops[1], s2[Cm].loops[0]
    s2[Cm].reorder(i, j)


def test_threads_give_the_same_result_as_one_thread():
    C = PROGRAMS["matmul"]
    f = tex.compile(C)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 200)).astype(np.float32)
    b = rng.standard_normal((200, 150)).astype(np.float32)
    before = tex.get_num_threads()
    try:
        tex.set_num_threads(1)
        one = f(a, b)
        tex.set_num_threads(2)
        two = f(a, b)
    finally:
        tex.set_num_threads(before)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_allclose(two, a @ b, rtol=1e-4, atol=1e-4)


def test_golden_split_k_with_call_time_parts(golden):
    C = PROGRAMS["matmul"]
    s = tex.schedule(C)
    s[C].split_k(s[C].loops[2], parts=tex.param("P"))
    with overriding(ZEN3):
        golden("split_k_call_time_parts", str(s))
    f = tex.compile(s)
    assert [b.name for b in f.buffers] == ["C_part"]
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 13)).astype(np.float32)
    b = rng.standard_normal((13, 3)).astype(np.float32)
    for parts in (1, 2, 5, 13, 14, 100):          # divisors, non-divisors, P > K
        np.testing.assert_allclose(f(a, b, P=parts), a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="missing call-time parameter P"):
        f(a, b)
    with pytest.raises(ValueError, match="parameter P must be from 1"):
        f(a, b, P=0)


def test_split_k_argmax_is_bitwise_deterministic_and_first_index():
    Am = PROGRAMS["argmin_rows"]
    s = tex.schedule(Am)
    s[Am].split_k(s[Am].loops[1], parts=3)
    f = tex.compile(s)
    y = np.random.default_rng(2).integers(0, 3, (40, 17)).astype(np.float64)
    y[4, 7] = y[4, 11] = np.nan
    assert np.array_equal(f(y), y.argmin(axis=1))
    assert np.array_equal(f(y), f(y))


def test_fuse_computes_the_producer_per_row():
    Rm = PROGRAMS["gemm_rowmax"]
    s = tex.schedule(Rm)
    s.fuse(Rm, at=s[Rm].loops[0])
    text = str(s)
    assert "alloc G_local[1, N]" in text and "# G" not in text
    f = tex.compile(s)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((9, 7)).astype(np.float32)
    b = rng.standard_normal((7, 65)).astype(np.float32)
    np.testing.assert_allclose(f(a, b), (a @ b).max(axis=1), rtol=1e-5, atol=1e-5)
    assert all(buf.shape != (sp_M, sp_N) for buf in f.buffers for sp_M, sp_N in [(M, N)])


def test_auto_keeps_the_stages_that_have_steps_already():
    """s.auto() after a step of the user's ran the heuristics on top of it: the schedule
    accepted, then failed at its first print or call (split: index i is not a loop of
    stage C#1). The stage keeps the user's schedule; the others get auto's."""
    C = PROGRAMS["matmul"]
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((64, 33), (33, 70)))
    s = tex.schedule(C)
    s[C].split(s[C].loops[0], 4)
    s.auto()
    assert "for io in 0..ceil(M/4):" in str(s) and "#1" not in str(s)
    np.testing.assert_allclose(tex.compile(s)(a, b), a @ b, rtol=1e-5, atol=1e-5)
    Rm = PROGRAMS["gemm_rowmax"]
    s2 = tex.schedule(Rm)
    s2[Rm].parallel(s2[Rm].loops[0])
    s2.auto()                              # G, untouched, is blocked; Rm is not fused
    assert any(st.stage.startswith("G#") for st in s2.history)
    assert not any(type(st).__name__ == "Fuse" for st in s2.history)
    np.testing.assert_allclose(tex.compile(s2)(a, b), (a @ b).max(axis=1), rtol=1e-5,
                               atol=1e-5)
    s3 = tex.schedule(C).auto()
    steps = len(s3.history)
    s3.auto()                              # every stage has steps: nothing to add
    assert len(s3.history) == steps


def test_a_private_loop_inside_a_split_reduction_keeps_a_partial_per_lane():
    """The private loop (a vector accumulator's lanes) inside reduction loops that run
    inside an output loop: the register tile's accumulator left it out and wrote its
    partials back outside it (KeyError: ji at compile; an adversarial test's finding)."""
    M_, N_ = tex.sizes("M N")
    i_, j_ = tex.indices("i j")
    Y = tex.tensor("Y", (M_, N_), "float64")
    S = tex.compute("S", (i_,), tex.sum(Y[i_, j_], over=j_))
    rng = np.random.default_rng(7)

    def loop(s, name):
        return next(h for h in s[S].loops if h.name == name)

    def strategy(s):
        s[S].reduction_strategy("vector_accumulator")
        s[S].split(loop(s, "jo"), 2)

    def by_hand(s):
        s[S].split(loop(s, "j"), 8)
        s[S].privatize(loop(s, "ji"))
        s[S].split_parts(loop(s, "jo"), 2)
    for steps in (strategy, by_hand):
        s = tex.schedule(S)
        steps(s)
        s[S].reorder(loop(s, "joo"), loop(s, "i"), loop(s, "joi"), loop(s, "ji"))
        f = tex.compile(s)
        for m, n in [(1, 1), (5, 77), (7, 8), (3, 200)]:
            y = rng.standard_normal((m, n))
            np.testing.assert_allclose(f(y), y.sum(axis=1), rtol=1e-12, atol=1e-12)


def test_every_part_of_a_private_loop_stores_its_first_block():
    """A split reduction's private loop inside a block loop of the same reduction: each
    part's partial is stored by its own first block. The first block was taken as the
    first of the private loop too, so the parts after the first added to memory never
    written (garbage, or the last call's sums; an adversarial test's finding)."""
    C = PROGRAMS["matmul"]
    s = tex.schedule(C)
    i, j, k = s[C].loops
    ko, ki = s[C].split(k, 8, tail="guard")
    kio, kii = s[C].split(ki, 4)
    io, ii = s[C].split(i, 3)
    s[C].reorder(kio, io, j, ko, kii, ii)
    s[C].privatize(ko)
    assert "if kio <= 0:" in str(s) and "ko <= 0" not in str(s), str(s)
    f = tex.compile(s)
    rng = np.random.default_rng(0)
    for m, n, kk in [(7, 5, 20), (7, 5, 20), (1, 1, 1), (63, 65, 100), (7, 5, 20)]:
        a = rng.standard_normal((m, kk), dtype=np.float32)
        b = rng.standard_normal((kk, n), dtype=np.float32)
        np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_compute_at_nests_one_level_and_only_a_producer_read_by_its_host():
    """compute_at chains (mx inside E inside S, in either order) and a producer that
    another definition reads too are refused: the first lowered E inside S without mx,
    the second stored P for neither of its readers (both read memory never written)."""
    i, k = tex.indices("i k")
    A = tex.tensor("A", (M, K), "float32")
    mx = tex.compute("mx", (i,), tex.max(A[i, k], over=k))
    E = tex.compute("E", (i, k), A[i, k] - mx[i])
    S = tex.compute("S", (i,), tex.sum(E[i, k], over=k))
    for first, second in [((mx, E, "k"), (E, S, "i")), ((E, S, "i"), (mx, E, "k"))]:
        s = tex.schedule(S)
        s[first[0]].compute_at(s[first[1]], first[2])
        with pytest.raises(tex.ScheduleError, match=r"compute_at: (E computes mx inside it|"
                                                    r"E is computed inside S)"):
            s[second[0]].compute_at(s[second[1]], second[2])
        a = np.random.default_rng(0).standard_normal((7, 63)).astype(np.float32)
        np.testing.assert_allclose(tex.compile(s)(a), (a - a.max(1, keepdims=True)).sum(1),
                                   rtol=1e-4, atol=1e-3)
    P = tex.compute("P", (i, k), A[i, k] + 1)
    Q = tex.compute("Q", (i,), tex.sum(P[i, k], over=k))
    C = tex.compute("C", (i, k), P[i, k] / Q[i])
    s = tex.schedule(C)
    with pytest.raises(tex.ScheduleError, match="compute_at: P is also read by C; computed "
                                                "inside Q it would not be stored for C"):
        s[P].compute_at(s[Q], "i")


def test_more_refusals_name_the_loop():
    C = PROGRAMS["matmul"]
    s = tex.schedule(C)
    i, j, k = s[C].loops
    with pytest.raises(tex.ScheduleError, match="split_k: .*loop i is not a reduction loop"):
        s[C].split_k(i, 2)
    with pytest.raises(tex.ScheduleError,
                       match=r"split_k: .*parts must be from 1 to 2\*\*62, got 0"):
        s[C].split_k(k, 0)
    with pytest.raises(tex.ScheduleError, match="privatize: .*loop j is not a reduction loop"):
        s[C].privatize(j)
    # (an unroll of N iterations was accepted, and LLVM warned on stderr at each compile)
    with pytest.raises(tex.ScheduleError, match="unroll: .*loop j runs N times, not a constant"):
        s[C].unroll(j)
    jo, ji = s[C].split(j, 4)
    s[C].unroll(ji)                 # min(4, N - 4*jo) times: at most 4
    s4 = tex.schedule(C)
    ko, ki = s4[C].split_k(s4[C].loops[2], 4)
    with pytest.raises(tex.ScheduleError, match="privatize: .*loop ki: a stage has one "
                       "private loop, and ko already is"):
        s4[C].privatize(ki)
    with pytest.raises(tex.ScheduleError, match="privatize: .*loop ko is already private"):
        s4[C].privatize(ko)
    # (said in split_k's terms, with the user's loop: it named a parts loop, kio, that the
    # refused split would have made)
    with pytest.raises(tex.ScheduleError, match="^split_k: in stage C, loop ki: the stage's "
                       "partial results are ko's already"):
        s4[C].split_k(ki, 2)
    X = tex.tensor("Xq", (M, N), "float32")
    with pytest.raises(tex.ScheduleError, match="pack: .*does not read Xq"):
        s[C].pack(X, at=i)
    s[C].pack(C.reads()[1], at=k)
    with pytest.raises(tex.ScheduleError, match="split: .*loop k anchors the local copy of B"):
        s[C].split(k, 4)
    F = PROGRAMS["full_sum"]
    s2 = tex.schedule(F, fast_math=False)
    with pytest.raises(tex.ScheduleError, match="split_k: .*reassociates the reduction"):
        s2[F].split_k(s2[F].loops[0], 2)
    Rm = PROGRAMS["gemm_rowmax"]
    s3 = tex.schedule(Rm)
    with pytest.raises(tex.ScheduleError, match="compute_at: Rm cannot be computed inside "
                                                "itself"):
        s3[Rm].compute_at(s3[Rm], s3[Rm].loops[0])


def test_split_k_reference_shape_from_the_discussion():
    """C[123x456] = A[123x51234] @ B[51234x456] with parts=77 (does not divide 51234)
    and with a call-time P."""
    C = PROGRAMS["matmul"]
    rng = np.random.default_rng(4)
    a = rng.standard_normal((123, 51234), dtype=np.float32)
    b = rng.standard_normal((51234, 456), dtype=np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(want).max()
    for parts in (77, tex.param("P")):
        s = tex.schedule(C)
        i, j, k = s[C].loops
        ko, ki = s[C].split_k(k, parts=parts)
        s[C].reorder(ko, i, ki, j)
        f = tex.compile(s)
        got = f(a, b) if parts == 77 else f(a, b, P=5)
        assert np.abs(got - want).max() / scale < 1e-5


def test_golden_tiled_and_vectorized_matmul(golden):
    C = PROGRAMS["matmul"]
    s = tex.schedule(C)
    i, j, k = s[C].loops
    io, jo, ii, ji = s[C].tile(i, 4, j, 16)
    s[C].reorder(io, jo, k, ii, ji)
    s[C].unroll(ii)
    s[C].vectorize(ji, tail="mask")
    s[C].parallel(io)
    with overriding(ZEN3):
        golden("tiled_vectorized_matmul", str(s))
    f = tex.compile(s)
    rng = np.random.default_rng(5)
    for m, n, kk in [(1, 1, 1), (7, 17, 5), (65, 63, 33)]:
        a = rng.standard_normal((m, kk)).astype(np.float32)
        b = rng.standard_normal((kk, n)).astype(np.float32)
        np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_specialize_runs_the_schedule_whose_condition_holds():
    """`specialize(cond)`: calls where cond holds run the specialization, others the
    stage's own schedule; both against numpy on either side of the condition."""
    C = PROGRAMS["matmul"]
    s = tex.schedule(C)
    wide = s[C].specialize(N >= 16)
    jo, ji = wide.split("j", 16, tail="guard")
    wide.reorder("i", "k", jo, ji)
    wide.vectorize(ji, tail="mask")
    assert wide.name == "C#1" and s["C#1"] is wide
    text = str(s)
    assert text.startswith("# C\nif N >= 16:\n") and "\nelse:\n" in text
    f = tex.compile(s)
    rng = np.random.default_rng(2)
    for n in (1, 15, 16, 17, 70):
        a = rng.standard_normal((9, 13)).astype(np.float32)
        b = rng.standard_normal((13, n)).astype(np.float32)
        np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-5)
    again = tex.schedule(C).replay(s.history_json())
    assert str(again) == text


@pytest.mark.parametrize("cpu", ["znver3", "znver5"])
def test_printed_choices_read_as_an_elif_chain_that_picks_the_guard_that_holds(cpu):
    """A stage's choices print as `if c1:` / `elif c2:` ... `else:` with each choice's
    own condition (the auto schedule of a symbolic matmul and of x @ W.T has a dozen);
    reading the chain first match wins picks, at every size tried, the one guard whose
    full condition (the IR's: its own and the earlier ones' negations) holds. A guard
    whose condition is not its chain's prints in full, every guard of the run."""
    from cpus import ZEN5
    from tex.scheduler.ir import Guard, walk
    from tex.scheduler.printer import format_nest
    from tex.backends.llvm.choices import pycond
    i, j, k = tex.indices("i j k")
    for B in (tex.tensor("B", (K, N), "float32"), tex.tensor("B", (N, K), "float64")):
        A = tex.tensor("A", (M, K), B.dtype)
        at = (k, j) if B.shape[0] == K else (j, k)
        C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[at], over=k))
        with overriding({"znver3": ZEN3, "znver5": ZEN5}[cpu]):
            kernel = tex.schedule(C).auto().kernel()
        text = format_nest(kernel)
        guards = [g for g in walk(kernel) if isinstance(g, Guard) and g.choice]
        heads = re.findall(r"^(if|elif|else)(.*):$", text, flags=re.M)
        assert [h for h, _ in heads] == ["if"] + ["elif"] * (len(guards) - 2) + ["else"], text
        # each condition as Python (sympy took 45 s over these sizes); checked against
        # sympy's own evaluation at a few of them
        names = {M: "m", N: "n", K: "kk"}
        full = [eval(f"lambda m, n, kk: {pycond(g.cond, names)}") for g in guards]
        shown = [eval(f"lambda m, n, kk: {pycond(g.shown, names)}") for g in guards]
        for m, n, kk in [(m, n, kk) for m in (1, 2, 5, 6, 7, 12, 13, 100)
                         for n in (1, 7, 8, 15, 16, 24, 47, 48, 64, 65, 113, 385, 1000)
                         for kk in (1, 3, 4, 8, 128, 255, 256, 640, 1024, 1025, 5000)]:
            holds = [g for g, f in zip(guards, full) if f(m, n, kk)]
            first = next(g for g, f in zip(guards, shown) if f(m, n, kk))
            assert holds == [first], (m, n, kk)
            if (m, n) in ((1, 1), (7, 65), (100, 1000)) and kk in (1, 1025):
                at_sizes = {M: m, N: n, K: kk}
                assert [bool(g.cond.subs(at_sizes)) for g in guards] == \
                    [f(m, n, kk) for f in full], (m, n, kk)
    bad = Guard(N >= 5, guards[1].body, choice="X#1", shown=N >= 4)
    text = format_nest(tex.schedule(PROGRAMS["matmul"]).kernel().replace(
        body=(kernel.body[0].replace(body=(guards[0], bad)),)))
    assert "\nif N >= 5:" in text and "elif" not in text and "else" not in text


def test_specialize_on_a_parameter_of_a_schedule_step():
    """A condition on a tex.param that only split_k uses (not the program's expressions)
    was refused as 'not sizes or parameters of the program' (an adversarial test)."""
    C = PROGRAMS["matmul"]
    P = tex.param("P")
    s = tex.schedule(C)
    s[C].split_k(s[C].loops[2], parts=P)
    spec = s[C].specialize(P >= 4)
    spec.parallel(spec.loops[0])
    f = tex.compile(s)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((7, 33), dtype=np.float32)
    b = rng.standard_normal((33, 5), dtype=np.float32)
    for p in (1, 3, 4, 9):
        np.testing.assert_allclose(f(a, b, P=p), a @ b, rtol=1e-4, atol=1e-4)


def test_specialize_refusals():
    C = PROGRAMS["matmul"]
    s = tex.schedule(C)
    with pytest.raises(tex.ScheduleError, match="is not a condition on sizes"):
        s[C].specialize(True)
    x = tex.sizes("x")
    with pytest.raises(tex.ScheduleError, match="uses x, which are not sizes"):
        s[C].specialize(x > 3)
    spec = s[C].specialize(M > 3)
    with pytest.raises(tex.ScheduleError, match="is a specialization already"):
        spec.specialize(N > 3)
    with pytest.raises(tex.ScheduleError, match="C#2 is not a specialization of C"):
        s["C#2"]


def test_split_partials_with_no_parts_still_write_the_identity():
    """A privatized loop with no iterations (K = 0): the merge writes the identity,
    also where one part would have been the output itself."""
    i, k = tex.indices("i k")
    X = tex.tensor("X", (M, K), "float32")
    R = tex.compute("R", (i,), tex.sum(X[i, k], over=k))
    s = tex.schedule(R)
    ko, ki = s[R].split(k, 4)
    s[R].reorder(ko, i)
    s[R].privatize(ko)
    f = tex.compile(s)
    out = np.full(5, np.nan, np.float32)
    f(np.ones((5, 0), np.float32), out=out)
    np.testing.assert_array_equal(out, np.zeros(5, np.float32))
    np.testing.assert_allclose(f(np.ones((5, 3), np.float32)), np.full(5, 3.0))


# ---------------------------------------------------------------- a user's mistakes

def _matmul_and_consumers():
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K)), tex.tensor("B", (K, N))
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    D = tex.compute("D", (i, j), tex.relu(C[i, j]) + 1)
    E = tex.compute("E", (i,), tex.sum(D[i, j], over=j))
    return (i, j, k), C, D, E


def test_a_stage_of_another_schedule_is_refused_and_changes_neither():
    (i, j, k), C, D, E = _matmul_and_consumers()
    s1, s2 = tex.schedule(E), tex.schedule(E)
    with pytest.raises(tex.ScheduleError, match="belongs to another schedule"):
        s1[D].compute_at(s2[E], i)
    with pytest.raises(tex.ScheduleError, match="belongs to another schedule"):
        s1.fuse(s2[D])
    assert s1.history == [] and s2.history == []
    s1[D].compute_at(s1[E], i)                    # its own: as before
    a = np.random.default_rng(1).random((7, 5), np.float32)
    b = np.random.default_rng(2).random((5, 3), np.float32)
    np.testing.assert_allclose(tex.compile(s1)(a, b), (np.maximum(a @ b, 0) + 1).sum(1),
                               rtol=1e-5)


def test_a_second_output_is_not_taken_for_fast_math():
    (i, j, k), C, D, E = _matmul_and_consumers()
    for call in (lambda: tex.schedule(D, E), lambda: tex.compile(D, E)):
        with pytest.raises(TypeError, match=r"several outputs go in one tuple: .*\(\(\.\.\., E\)\)"):
            call()
    assert tex.schedule(D, False).fast_math is False


def test_messages_of_schedule_steps_name_what_the_user_wrote():
    (i, j, k), C, D, E = _matmul_and_consumers()
    s = tex.schedule(C)
    cases = [
        (lambda: s[C].pack("Q", at=i), "no tensor 'Q' \\(its inputs: A, B\\)"),
        (lambda: s[C].specialize(M >= 0), "always true"),
        (lambda: s[C].split_k(i, 4), "loop i is not a reduction loop: split_k splits"),
        (lambda: s[C].reduction_strategy("inner_reduction", tail="guard"),
         "^reduction_strategy: tail='guard'"),
        (lambda: s[C].compute_at(s[C], i), "cannot be computed inside itself"),
        (lambda: s[C].reorder(i, i, j), "loop i appears twice"),
        (lambda: s[C].split(i, tex.param("P")), "split_parts"),
        (lambda: s[C].tile(i, 8, j), "^tile: .*j has no factor"),
        (lambda: s[C].tile(i, 8, j, 0),
         r"^tile: in stage C, loop j: factor must be from 1 to 2\*\*62"),
    ]
    for call, message in cases:
        with pytest.raises(tex.ScheduleError, match=message):
            call()
    assert s.history == []                   # a refused tile undid its first split too
    s[C].specialize("N >= 64")               # a string reads the program's sizes
    assert str(s[C].specializations[0].condition) == "N >= 64"
    s2 = tex.schedule(E)
    with pytest.raises(tex.ScheduleError, match="^fuse: "):
        s2.fuse(E, at=k)


def test_a_specialized_producer_is_not_computed_inside_a_consumer():
    """compute_at computes a producer by one nest, inside its consumer's loop: a
    producer with specializations (its own, or the auto schedule's) is refused, and so is
    a specialization of a producer already inside a consumer; neither was dropped
    silently. A schedule that keeps to it runs and agrees with numpy."""
    (i, j, k), C, D, E = _matmul_and_consumers()
    s = tex.schedule(E)
    s[D].specialize("M >= 8")
    with pytest.raises(tex.ScheduleError, match="^compute_at: stage D has specialized "
                                                "schedules .* compute_at before specializing"):
        s[D].compute_at(s[E], i)
    s = tex.schedule(E)
    s[D].compute_at(s[E], i)
    with pytest.raises(tex.ScheduleError, match="^specialize: stage D is computed inside E"):
        s[D].specialize("M >= 8")
    s[E].specialize("M >= 8")           # the consumer's own specializations are its own
    f = tex.compile(s)
    rng = np.random.default_rng(5)
    for m in (3, 9):
        a = rng.standard_normal((m, 5)).astype(np.float32)
        b = rng.standard_normal((5, 7)).astype(np.float32)
        want = (np.maximum(a @ b, 0) + 1).sum(axis=1)
        np.testing.assert_allclose(f(a, b), want, rtol=1e-4, atol=1e-4)


def test_a_producers_own_steps_are_never_dropped_by_compute_at():
    """Inside its consumer a producer is computed from its definition over the part the
    consumer reads: a producer with steps of its own is refused (they were dropped
    without a word: a helper's schedule review), and so is a step on a producer computed
    inside a consumer, and a specialization of a stage that runs in another's epilogue.
    A refused step changes nothing."""
    (i, j, k), C, D, E = _matmul_and_consumers()
    s = tex.schedule(E)
    s[D].split(i, 4)
    before = s.history
    with pytest.raises(tex.ScheduleError, match=r"^compute_at: D has a schedule of its own "
                                                r"\(1 step\); inside E .* compute_at before "
                                                "scheduling it"):
        s[D].compute_at(s[E], i)
    assert s.history == before
    s = tex.schedule(E)
    s[D].compute_at(s[E], i)
    shown = str(s)
    for step in (lambda: s[D].split(i, 4), lambda: s[D].parallel(i)):
        with pytest.raises(tex.ScheduleError, match="^stage D is computed inside E "
                                                    r"\(compute_at\).*schedule E's loops"):
            step()
    assert str(s) == shown
    M, N = tex.sizes("M N")
    A = tex.tensor("A", (M, N), "float32")
    Y = tex.compute("Y", (i, j), A[i, j] * 2)
    R = tex.compute("R", (i,), tex.max(Y[i, j], over=j))
    s = tex.schedule(R).auto()
    with pytest.raises(tex.ScheduleError, match=r"^specialize: stage R runs in Y's epilogue "
                                                r"\(fused\).*never run"):
        s[R].specialize("N == 7")


def test_a_part_count_parameter_has_a_name_of_its_own():
    """tex.param("K") as split_k's part count, beside a size K, printed `ceil(K/K)` and
    made specialize("K >= 20") ambiguous: a parameter named as a size, tensor, definition
    or index is refused where it is given."""
    C = PROGRAMS["matmul"]
    for name, kind in (("K", "a size"), ("A", "a tensor"), ("C", "a definition"),
                       ("k", "an index")):
        s = tex.schedule(C)
        i, j, k = s[C].loops
        with pytest.raises(tex.ScheduleError, match=f"^split_k: in stage C, parameter {name} "
                                                    f"has the name of {kind} of the program"):
            s[C].split_k(k, tex.param(name))
        with pytest.raises(tex.ScheduleError, match=f"^split_parts: .*parameter {name} has"):
            s[C].split_parts(i, tex.param(name))
        assert s.history == tex.schedule(C).history
    s = tex.schedule(C)
    s[C].split_k(s[C].loops[2], tex.param("P"))


def test_unrolling_thousands_of_iterations_is_refused():
    i = tex.indices("i")
    X = tex.tensor("X", (4096,))
    Y = tex.compute("Y", (i,), X[i] * 2)
    s = tex.schedule(Y)
    with pytest.raises(tex.ScheduleError, match="runs up to 4096 times"):
        s[Y].unroll(i)
    _, ii = s[Y].split(i, 8)
    s[Y].unroll(ii)
    x = np.arange(4096, dtype=np.float32)
    np.testing.assert_array_equal(tex.compile(s)(x), x * 2)


def test_a_step_after_the_auto_schedule_says_it_changes_only_the_general_nest():
    (i, j, k), C, D, E = _matmul_and_consumers()
    s = tex.schedule(C)
    s.auto()
    with pytest.warns(UserWarning, match=r"stage C has \d+ specialized nests .*only its "
                                         "general nest"):
        s[C].split(i, 4)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s[C].split(j, 4)                 # once a stage


def test_a_refused_tile_in_a_deferred_specialization_records_nothing():
    (i, j, k), C, D, E = _matmul_and_consumers()
    s = tex.schedule(C)

    def schedule(spec):
        with pytest.raises(tex.ScheduleError):
            spec.tile(i, 8, j, 0)
        spec.tile(i, 16, j, 16)
    s[C].specialize("M >= 64", schedule)
    tex.compile(s)
    assert [st.factor for st in s.history if type(st).__name__ == "Split"] == [16, 16]
    assert str(tex.schedule(C).replay(s.history)) == str(s)


def test_a_string_condition_reads_only_the_programs_names():
    (i, j, k), C, D, E = _matmul_and_consumers()
    s = tex.schedule(C)
    for text, message in (("M >= ", "not a condition tex can read"),
                          ("E > 2", "uses E, which are not sizes"),
                          ("Q >= 3", "uses Q, which are not sizes")):
        with pytest.raises(tex.ScheduleError, match=message):
            s[C].specialize(text)
    s[C].specialize("Eq(M, 3) & (N >= 16)")          # sympy's spelling, as histories had
    assert s.history[-1].condition == "M == 3 and N >= 16"     # Python's, as print(s)
    s[C].specialize("M >= 64 and N >= 16 and not (K % 4 == 0 or min(K, N) < 8)")
    assert s.history[-1].condition == "M >= 64 and N >= 16 and not (K % 4 == 0 or min(K, N) < 8)"
    assert str(tex.schedule(C).replay(s.history)) == str(s)
