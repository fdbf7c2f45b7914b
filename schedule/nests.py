"""A kernel whose specialized nests are lowered when a build first needs them.

The auto schedule of a symbolic matmul gives its stage a dozen specializations (blocked,
narrow, dot products, one row, two rows, ...), and a call runs one of them. Lowering and
vector-planning all of them took 70-100 ms of a first call, where one took 5-10. A
`Nests` holds the kernel with every choice's nest left out (a `Guard.hole`: its
condition only, which is what decides the choice) and lowers a choice's nest, through
the kernel passes, when a build asks for a kernel that has it (`kernel(deferred)`); the
code generator leaves out exactly the holes (backends/llvm/codegen.py). The states are
the schedule's when it was compiled, and so is the target (schedule/target.py): a nest
lowered later, in another target's context, or after the schedule took further steps,
is the nest it would have been then.

A nest lowered alone is the nest lowered with the others (each choice is a loop nest of
its own at the top of its stage, and the passes rewrite within a nest):
tests/test_nests.py compares the structure keys of `kernel()` and `Schedule.kernel()`.
"""

from .blocked_sums import blocked_sums
from .edge_tiles import edge_tiles
from .ir import Guard, Stage, walk
from .stage import lower_stage
from .target import overriding, target
from .vectorize import plan_vectors
from tex import forksafe


def finish(kernel, fast_math):
    """The kernel passes after lowering: sums in blocks, edge tiles, the vector plan."""
    return plan_vectors(edge_tiles(blocked_sums(kernel)), fast_math)


def choice_guards(kernel):
    """The guards that choose among a stage's specializations (Guard.choice), in the
    order of the nest: their numbers are what a build's `deferred` names."""
    return [n for n in walk(kernel) if isinstance(n, Guard) and n.choice is not None]


class Nests:
    """`skeleton`: the finished kernel with holes; `states`: {(definition, choice name):
    StageState, or a function that returns it} of each hole; `buffers`, `all_states`:
    what lowering a stage reads."""

    def __init__(self, skeleton, states=None, buffers=None, all_states=None,
                 fast_math=True):
        self.skeleton = skeleton
        self.target = target()      # what the kernel's code is for
        self._states, self._buffers = states or {}, dict(buffers or {})
        self._all_states, self._fast_math = dict(all_states or {}), fast_math
        self._guards = choice_guards(skeleton)
        self._stage_of = {id(g): st.definition for st in skeleton.body
                          for g in st.body if isinstance(g, Guard) and g.hole}
        self._filled = {}           # choice number -> its Guard with the nest lowered
        self._kernels = {}          # frozenset of choices left out -> the kernel
        self._lock = forksafe.lock()

    @classmethod
    def of(cls, kernel):
        """A Nests of a kernel without holes (a loop nest built or changed by hand)."""
        return kernel if isinstance(kernel, cls) else cls(kernel)

    @property
    def choices(self):
        return self._guards

    def kernel(self, deferred=frozenset()):
        """The kernel with every choice's nest but those numbered in `deferred`; a hole
        stays only where deferred (Guard.hole)."""
        holes = frozenset(n for n, g in enumerate(self._guards) if g.hole)
        key = frozenset(deferred) & holes
        with self._lock, overriding(self.target):
            out = self._kernels.get(key)
            if out is None:
                out = self._kernels[key] = self._assemble(holes - key)
        return out

    def _assemble(self, numbers):
        if not numbers:
            return self.skeleton
        swap = {id(self._guards[n]): self._fill(n) for n in sorted(numbers)}
        body = tuple(st.replace(body=tuple(swap.get(id(g), g) for g in st.body))
                     for st in self.skeleton.body)
        return plan_vectors(self.skeleton.replace(body=body), self._fast_math)

    def _fill(self, number):
        """The guard of choice `number` with its nest lowered and finished, alone."""
        done = self._filled.get(number)
        if done is None:
            hole = self._guards[number]
            definition = self._stage_of[id(hole)]
            state = self._states[(definition, hole.choice)]
            if callable(state):         # a deferred specialization's schedule (handles.py)
                state = state()
            nest = lower_stage(state, self._buffers, self._all_states).body
            alone = self.skeleton.replace(body=(Stage(definition, (
                hole.replace(body=nest, hole=False),)),))
            (stage,) = finish(alone, self._fast_math).body
            (done,) = stage.body
            self._filled[number] = done
        return done


def nests_of(sched):
    """The Nests of a schedule as it is now."""
    buffers, states = sched._buffers(), sched._states
    body, holes = [], {}
    for d in sched._stage_order():
        stage = sched._stages[d]
        lowered = stage.lower(buffers, states, sched._epilogue(d), holes=True)
        if any(isinstance(g, Guard) and g.hole for g in lowered.body):
            holes.update({(d, name): st for name, st in stage.choice_states().items()})
        body.append(lowered)
    skeleton = finish(sched._kernel_of(tuple(body)), sched.fast_math)
    return Nests(skeleton, holes, buffers, states, sched.fast_math)
