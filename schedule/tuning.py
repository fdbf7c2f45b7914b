"""The schedules `tex.tune` searches: plans, the schedule a plan gives, and a cost model.

A plan is a small JSON-able dict naming a family and its parameters, applied to one
stage (the one with the most work) with the ordinary primitives, so the result prints
and replays like any other schedule:

    blocked   schedule/blocking.block_contraction with a Blocking(mr, nr, kc, mc, nc), a
              split-K part count (1, a fixed count or the auto rule) and the set of
              block loops that run in parallel (jc, ic, jr)
    fused     blocking.block_fused_contraction (a contraction with consumers in its
              epilogue) with another register tile and row block
    dots      dot products over a packed B (k innermost), `rows` rows of A a copy
    generic   any definition: loop order (as written, or the last output index inside
              the reductions), the last output index cut into `chunk`-wide parallel
              blocks, split-K parts, and the reduction strategy of schedule/strategies.py

Every other stage keeps the auto schedule. When the program's sizes are symbols, the
tuned nest is a specialization for the size class it was tuned for (each size within
the power-of-two bucket of the tuned value), so a tuned schedule is correct and runs
the auto schedule's nests for every other call.
"""
import math

import numpy as np
import tex.symbolic as sym

from tex.combiners import COMBINERS
from tex.errors import ScheduleError
from tex.expr import AutoParts

from .auto import _form_kernels, _reduced_by_members, _reduced_in_lanes, auto_schedule
from .auto_nest import (auto_reduction_strategy, auto_split_k, auto_vectorize,
                        parallel_first_output_loop)
from .blocking import (L3_SHARED, Blocking, block_contraction, block_fused_contraction,
                       contraction_roles, operand_bytes, parallel_blocks)
from .ir import LoopKind
from .order import prefers_reduction_outside
from .schedule import Schedule
from .target import target

STRATEGIES = ("inner_reduction", "vector_accumulator", "inner_parallel")


# ---------------------------------------------------------------- size classes

def size_class(sizes):
    """{size name: value} -> ((name, lo, hi), ...): each value's power-of-two bucket
    [2^e, 2^(e+1)) (0 a bucket of its own)."""
    out = []
    for name, v in sorted(sizes.items()):
        v = int(v)
        lo = 0 if v == 0 else 1 << (v.bit_length() - 1)
        out.append((name, lo, 1 if v == 0 else 2 * lo))
    return tuple(out)


def class_condition(program, cls):
    """The condition 'every size in its bucket' (None: no symbolic sizes)."""
    by_name = {str(s): s for s in program.sizes}
    terms = []
    for name, lo, hi in cls:
        s = by_name[name]
        terms += [sym.GreaterThan(s, lo), sym.StrictLessThan(s, hi)]
    return sym.And(*terms) if terms else None


# ---------------------------------------------------------------- schedules

def kernel_schedule(program, fast_math=True, fuse=True):
    """A schedule with the auto schedule's program rewrites and kernels (fusions) made,
    and no stage scheduled yet: where a plan is applied."""
    s = Schedule(program, fast_math)
    if fuse:
        s.rewrite()
        _form_kernels(s)
    return s


def build(program, tuned, fast_math=True, fuse=True):
    """The schedule of `program` with `tuned` = [(stage name, size class, plan)] applied
    (plan None: the auto schedule) and the auto schedule for everything else."""
    s = kernel_schedule(program, fast_math, fuse)
    keep = []
    for name, cls, plan in tuned:
        if plan is None:
            continue
        stage = s[name]
        cond = class_condition(s.program, cls)
        apply_plan(stage.specialize(cond) if cond is not None else stage, plan)
        if cond is None:
            keep.append(stage.definition)
    auto_schedule(s, fuse=False, keep=keep)
    return s


def main_stage(sched, sizes):
    """The stage with the most work (iterations of its loops at these sizes) among the
    stages that have a nest of their own."""
    env = {s: sizes[str(s)] for s in sched.program.sizes if str(s) in sizes}
    best, most = None, -1
    for stage in sched.stages:
        d = stage.definition
        if d in sched._fused:
            continue
        work = 1
        for a in stage.state.axes:
            work *= max(1, int(sym.sympify(a.extent).subs(env)))
        if work > most:
            best, most = stage, work
    return best


def apply_plan(stage, plan):
    """Schedule `stage` (a stage or a specialization) as `plan` says."""
    family = plan["family"]
    d = stage.state.definition
    roles = contraction_roles(d)
    if family == "blocked":
        bl = Blocking(*(plan[x] for x in ("mr", "nr", "kc", "mc", "nc")))
        k_loop, parts = None, plan["parts"]
        if parts != 1:
            if parts == "auto":
                parts = AutoParts(f"{d.name}_parts", parallel_blocks(d, roles, bl),
                                  d.extents[roles.k])
            _, k_loop = stage.split_k(roles.k, parts)
        block_contraction(stage, roles, bl, k_loop)
        names = {"jc": f"{roles.j.name}o", "jr": f"{roles.j.name}io",
                 "ic": f"{roles.i.name}o", "ir": f"{roles.i.name}io"}
        for role, name in names.items():
            kind = LoopKind.PARALLEL if role in plan["parallel"] else LoopKind.SERIAL
            if stage.state.axis(stage._var("tune", name)).kind is not kind:
                stage._kind(name, kind)
        if not plan.get("unroll", True):
            stage._kind(f"{roles.i.name}ii", LoopKind.SERIAL)
    elif family == "fused":
        epilogue = stage.sched._epilogue(stage.definition)
        bl = Blocking(plan["mr"], plan["nr"], 0, plan["mc"], 0)
        block_fused_contraction(stage, roles, bl, _reduced_by_members(epilogue),
                                in_lanes=_reduced_in_lanes(epilogue, stage.state.fast_math))
    elif family == "dots":
        io, _ = stage.split(roles.i, plan["rows"])
        stage.pack(roles.b, io, layout="loops")
        auto_reduction_strategy(stage)
        stage.parallel(io)
    elif family == "generic":
        _apply_generic(stage, plan)
    else:
        raise ScheduleError(f"tune: unknown plan family {family!r}")


def _apply_generic(stage, plan):
    d = stage.state.definition
    red = d.reduction
    if plan["order"] == "inside" and red is not None and d.indices:
        last = d.indices[-1]
        stage.reorder(*[x for x in d.indices if x is not last], *red.over, last)
    parts = plan["parts"]
    if parts == "auto":
        auto_split_k(stage, lazy=False)     # (a plan is for known sizes: no specialization)
    elif parts not in (None, 1):
        first = next(h for h in stage.loops if h.is_reduction)
        stage.split_k(first, parts)
    if plan["chunk"]:
        last = d.indices[-1]
        jo, _ = stage.split(last, plan["chunk"])
        loops = stage.loops
        lead = [h for h in loops if h.var is stage.state.private]
        stage.reorder(*lead, jo, *[h for h in loops if h.var is not jo.var and h not in lead])
        stage.parallel(jo)
    else:
        parallel_first_output_loop(stage)
    if plan["strategy"]:
        stage.reduction_strategy(plan["strategy"])
    auto_vectorize(stage)


# ---------------------------------------------------------------- the search space

def plans(sched, stage, sizes, threads, machine=None):
    """Every plan worth trying on `stage` at these sizes (auto's own choice excluded:
    the tuner measures the auto schedule as candidate 0)."""
    machine = machine or target()
    d = stage.definition
    roles = contraction_roles(d)
    red = d.reduction
    reassoc = red is not None and COMBINERS[red.combiner].may_reassociate(
        red.dtype, stage.state.fast_math)
    if roles is not None and reassoc:
        if sched._epilogue(d) is not None:
            return list(_fused_plans(d, roles, sizes, machine))
        return list(_blocked_plans(d, roles, sizes, threads, machine)) + \
            [{"family": "dots", "rows": r} for r in (16, 32, 64, 128, 256)] + \
            list(_generic_plans(d, sizes, threads))
    if sched._epilogue(d) is not None:
        return []
    return list(_generic_plans(d, sizes, threads))


def _tiles(machine, dtype):
    """(mr, nr) register tiles that fit the register file: mr x nv accumulators, nv
    vectors of B and a broadcast of A."""
    regs, lanes = machine.vector_registers, machine.lanes(dtype)
    for nv in (1, 2, 3, 4):
        for mr in range(2, 17):
            if mr * nv + nv + 1 <= regs and mr * nv >= 6:
                yield mr, nv * lanes


def _blocked_plans(d, roles, sizes, threads, machine):
    red = d.reduction
    env = _env(d, sizes)
    M, N, K = (env(d.extents[x]) for x in (roles.i, roles.j, roles.k))
    parts = ("auto", 1) + ((threads,) if threads > 1 else ())
    pars = (("jc", "ic"), ("ic",), ("jc",), ("jr",), ("ic", "jr"))
    for mr, nr in _tiles(machine, red.dtype):
        for kc in sorted({min(kc, _round_up(K, 16)) for kc in (128, 256, 512, 768, 1024)}):
            for mc in sorted({min(mr * m, _round_up(M, mr)) for m in (2, 4, 8, 16, 32)}):
                for nc in sorted({min(nc // nr * nr or nr, _round_up(N, nr))
                                  for nc in (256, 512, 1024, 2048, 4096)}):
                    for p in parts:
                        for par in pars:
                            yield {"family": "blocked", "mr": mr, "nr": nr, "kc": kc,
                                   "mc": mc, "nc": nc, "parts": p, "parallel": list(par)}


def _fused_plans(d, roles, sizes, machine):
    env = _env(d, sizes)
    M = env(d.extents[roles.i])
    for mr, nr in _tiles(machine, d.reduction.dtype):
        for mc in sorted({min(mr * m, _round_up(M, mr)) for m in (2, 4, 8, 16, 32)}):
            yield {"family": "fused", "mr": mr, "nr": nr, "mc": mc}


def _generic_plans(d, sizes, threads):
    red = d.reduction
    orders = ("written", "inside") if red is not None and d.indices else ("written",)
    env = _env(d, sizes)
    last = env(d.extents[d.indices[-1]]) if d.indices else 1
    chunks = [None] + sorted({c for c in (256, 1024, _round_up(-(-last // threads), 64),
                                          _round_up(-(-last // (2 * threads)), 64))
                              if c < last})
    parts = (None, "auto") + ((threads,) if threads > 1 else ()) if red is not None else (None,)
    for order in orders:
        # (a reduction strategy needs the reduction innermost: the order as written)
        strategies = (None,) + (STRATEGIES if red is not None and order == "written" else ())
        for chunk in chunks:
            for p in parts:
                for strategy in strategies:
                    yield {"family": "generic", "order": order, "chunk": chunk, "parts": p,
                           "strategy": strategy}


def _env(d, sizes):
    def value(e):
        e = sym.sympify(e)
        return int(e.subs({s: sizes[str(s)] for s in e.free_symbols if str(s) in sizes}))
    return value


def _round_up(x, m):
    return max(m, -(-x // m) * m)


# ---------------------------------------------------------------- the cost model

GHZ = 3.0e9
BANDWIDTH = {1: 64.0, 2: 32.0, 3: 16.0, 4: 8.0}     # bytes a cycle a core, L1 .. DRAM
REGION = 2e-6                                       # starting a parallel loop, seconds


def dims(d, sizes):
    """The extents the cost model reads, as numbers at these sizes."""
    env = _env(d, sizes)
    roles = contraction_roles(d)
    out = {"work": math.prod(env(e) for e in d.extents.values()),
           "out": math.prod(env(d.extents[x]) for x in d.indices) if d.indices else 1,
           "rows": env(d.extents[d.indices[0]]) if d.indices else 1,
           "last": env(d.extents[d.indices[-1]]) if d.indices else 1,
           "inside": prefers_reduction_outside(d)}     # which order reads unit-stride
    if roles is not None:
        out.update(bytes=operand_bytes(roles), M=env(d.extents[roles.i]),
                   N=env(d.extents[roles.j]), K=env(d.extents[roles.k]),
                   batch=math.prod(env(d.extents[x]) for x in roles.batch))
    return out


def cost(d, plan, dm, threads, machine=None):
    """Predicted seconds of `plan` on `d` at these sizes: the micro-kernel's FMAs and
    loads (loads per FMA; FMA latency hidden only with enough accumulators), the bytes
    each level of the memory hierarchy moves (a block that does not fit its cache comes
    from the next), padding, and how evenly the threads share the work."""
    machine = machine or target()
    family = plan["family"]
    if family not in ("blocked", "fused"):
        return _cost_streaming(d, plan, dm, threads, machine)
    M, N, K, batch = dm["M"], dm["N"], dm["K"], dm["batch"]
    lanes = machine.lanes(d.reduction.dtype)
    b = dm["bytes"]
    mr, nr, mc = plan["mr"], plan["nr"], plan["mc"]
    kc = plan.get("kc") or K
    nc = plan.get("nc") or 112
    nv = nr // lanes
    Mp, Np = _round_up(M, mr), _round_up(N, nr)
    fmas = batch * Mp * Np * K / lanes
    latency = max(1.0, 8.0 / (mr * nv))              # 4 cycles x 2 pipes in flight
    kernel = max(fmas / 2 * latency, fmas * (mr + nv) / (mr * nv) / 2)

    def level(nbytes, share=1.0):
        for lv, size in ((1, machine.cache(1, 32 << 10)), (2, machine.cache(2, 512 << 10)),
                         (3, min(L3_SHARED, machine.cache(3, 8 << 20)) / max(1, threads))):
            if nbytes <= size * share:
                return lv
        return 4
    traffic = {1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0}
    traffic[level(kc * nr * b, 0.5)] += batch * K * Np * b * math.ceil(M / mr)   # B panels
    traffic[level(kc * min(nc, Np) * b, 0.5)] += batch * K * Np * b * math.ceil(M / mc)  # B block
    traffic[level(mc * kc * b, 0.5)] += batch * K * Mp * b * math.ceil(N / nr)   # A panels
    traffic[level(batch * M * K * b)] += batch * M * K * b * math.ceil(N / nc)   # packing A
    traffic[level(batch * K * N * b)] += batch * K * N * b                      # packing B
    traffic[level(M * N * 4)] += batch * M * N * 8 * math.ceil(K / kc)           # C updates
    memory = sum(v / BANDWIDTH[lv] for lv, v in traffic.items())
    cycles = max(kernel, memory) + 0.25 * min(kernel, memory)
    units, regions = batch, 1
    par = plan.get("parallel", ("ic",))
    parts = plan.get("parts", 1)
    if parts == "auto":
        blocks = batch * math.ceil(M / mc) * math.ceil(N / nc)
        parts = threads if threads > 1 and blocks < 4 * threads and K >= 1024 * threads else 1
    units *= parts
    if parts > 1:
        cycles += M * N * parts * 8 / BANDWIDTH[3]
    for role, n in (("jc", math.ceil(N / nc)), ("ic", math.ceil(M / mc)),
                    ("jr", math.ceil(min(nc, N) / nr))):
        if role in par:
            units *= n
            regions *= math.ceil(K / kc) if role != "jc" else 1
    used = min(threads, units)
    balance = math.ceil(units / used) * used / units
    return cycles / GHZ / used * balance + regions * REGION


def _cost_streaming(d, plan, dm, threads, machine):
    """dots and generic plans: a pass over the operands per output row block, vector
    loads at one FMA per load at best; threads as the parallel loop has iterations."""
    work, out, rows = dm["work"], dm["out"], dm["rows"]
    lanes = machine.lanes(d.dtype)
    unit_stride = (plan.get("order") == "inside") == dm["inside"] or plan["family"] == "dots"
    cycles = work / lanes * (1.0 if unit_stride else 2.0)
    if plan.get("strategy"):
        cycles *= 0.9
    if plan.get("chunk"):
        units = math.ceil(dm["last"] / plan["chunk"])
        # each step of the loops outside a chunk reads a chunk's worth of a row: short
        # runs defeat the prefetchers and touch a page a step (1 x 4096 @ 4096 x 4096
        # with 1024-wide chunks on two threads: 2x slower than the whole row on one)
        cycles *= 1 + 8192 / (plan["chunk"] * np.dtype(d.dtype).itemsize)
    elif plan["family"] == "dots":
        units = math.ceil(rows / plan["rows"])
    else:
        units = rows
    if plan.get("parts") not in (None, 1, "auto"):
        units *= plan["parts"]
        cycles += out * plan["parts"] * 8 / BANDWIDTH[3]
    used = max(1, min(threads, units))
    balance = math.ceil(units / used) * used / units
    return cycles / GHZ / used * balance + REGION


# ---------------------------------------------------------------- the candidate list

def ranked(d, all_plans, sizes, threads, seed, limit=400, machine=None):
    """The plans in the order the tuner measures them (at most `limit`): best predicted
    first, with every fourth place an exploration pick drawn (by `seed`) from the rest,
    and the two best of each family early on, so that the model's blind spots still get
    measured."""
    import random               # here: only a tuning draws (1.9 ms of a first compile)
    rng = random.Random(seed)
    dm = dims(d, sizes)
    scored = [(cost(d, p, dm, threads, machine), rng.random(), n, p)
              for n, p in enumerate(all_plans)]
    scored.sort(key=lambda t: (t[0], t[1]))
    order = [t[3] for t in scored]
    picked = set()
    for family in dict.fromkeys(p["family"] for p in order):
        picked |= {id(p) for p in [q for q in order if q["family"] == family][:2]}
    head = [p for p in order if id(p) in picked]
    rest = [p for p in order if id(p) not in picked]
    out, r = list(head), 0
    explore = rest[len(rest) // 8:]
    while len(out) < limit and r < len(rest):
        if len(out) % 4 == 3 and explore:
            p = explore.pop(rng.randrange(len(explore)))
            picked.add(id(p))
        else:
            p = rest[r]
            r += 1
            if id(p) in picked:
                continue
            picked.add(id(p))
        out.append(p)
    return out

