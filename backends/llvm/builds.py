"""A compiled function's builds: machine code for the nests its calls need.

A kernel whose stages choose among specialized nests (codegen.choices) is built with
the nests its calls run so far (`_build`: the others left out, returning
STATUS_DEFERRED); `Signature` holds a function's builds and switches between them, or
makes a new one, when a call needs a nest its current build lacks (`build_choice`).
A build whose first call is small runs quick code until its optimized code is linked
(tiers.py): `Signature.use` puts a gate in the call path meanwhile.
"""
import collections

from tex.expr import AutoParts

from ...gcpause import paused
from ...scheduler.ir import Loop, LoopKind, structure_key, walk
from ...scheduler.target import overriding
from . import choices, codegen, fastcall, jit, split, threads, tiers
from .choices import call_values
from ... import forksafe


# A kernel's machine code: its address, the image holding it, its cache key, its IR
# (a function: generated on first use), the address of its bounds record (0 without),
# the choices it left out, and what built it: the kernel it was generated from (holes
# where deferred) and the Nests that kernel came from; for quick code, the
# tiers.Upgrade that replaces it (else None) and whether tex vectorized its loops.
Built = collections.namedtuple(
    "Built", "address image key make_ir bounds deferred kernel symbol fast_math bounds_check "
             "nests upgrade vectorized")


def _build(nests, symbol, fast_math, bounds_check, deferred, call=None):
    """A build of the kernel without the choices in `deferred`, for the target it was
    compiled for (a nest a later call needs is built for it, whatever target() is then).
    Quick code first (tiers.py) unless the first calls, `call` = (program, [{Size:
    value}] or one dict; None: not known yet, the call path's gate decides), are too
    large for it."""
    kernel = nests.kernel(deferred)
    vectorized = any(isinstance(n, Loop) and n.kind is LoopKind.VECTOR for n in walk(kernel))
    ir_text = []            # generated only on a cache miss, or when f.llvm_ir is read

    def make_ir():
        if not ir_text:
            with overriding(nests.target):
                ir_text.append(str(codegen.build(kernel, symbol, fast_math, bounds_check,
                                                 deferred)))
        return ir_text[0]
    with overriding(nests.target):
        text = (f"{symbol} fast_math={fast_math} bounds_check={bounds_check} "
                f"deferred={sorted(deferred)} {codegen.settings()}\n{structure_key(kernel)}")
        key = jit.cache_key(text)
        # linked against the thread runtime: its pool and interrupt flag
        if tiers.enabled() and not bounds_check and tiers.first_calls_small(call, vectorized):
            address, image, upgrade = tiers.load(key, symbol, make_ir,
                                                 large=len(text) > split.LARGE_NEST_BYTES,
                                                 before_link=threads.runtime)
        else:
            upgrade = None
            address, image = jit.load_key(key, symbol, make_ir,
                                          large=len(text) > split.LARGE_NEST_BYTES,
                                          before_link=threads.runtime)
    # a kernel without loops has no bounds record (and cannot go out of bounds): 0
    bounds = image.symbols.get(f"{symbol}.bounds", 0) if bounds_check else 0
    return Built(address, image, key, make_ir, bounds, deferred, kernel, symbol, fast_math,
                 bounds_check, nests, upgrade, vectorized)


class Signature:
    """What a compiled function's call path and its error paths need: the program, the
    loop nest, the entry point, and the image whose code it runs (referenced here so
    that the code lives as long as any holder of the call path; never the
    CompiledFunction itself, which would make a reference cycle that only the garbage
    collector frees -- and with it the JIT memory)."""

    def __init__(self, program, built):
        kernel = built.kernel
        self.program, self.kernel, self.symbol = program, kernel, built.symbol
        self.param_names = tuple(str(p) for p in kernel.params if not isinstance(p, AutoParts))
        self.casting = "safe"    # numpy's casting rule for inputs of another dtype
        self.owner = None        # a weak reference to the CompiledFunction (dask calls)
        self.scope = None        # the call path's globals (its `_cfunc` follows `use`)
        self.builds = []         # every build of the kernel so far (build_choice)
        self._building = forksafe.lock()   # one build_choice at a time
        self.switches = 0        # build_choice's changes to an earlier build (SWITCH_S)
        self._not_taken_at = None    # choices.decider of the kernel, once needed
        self._every_choice = None
        self.use(built)

    @property
    def deferred(self):
        """The choices (codegen.choices) that no build so far has."""
        return frozenset.intersection(*(b.deferred for b in self.builds))

    def use(self, built):
        """Run `built`'s code from now on: its optimized code once its upgrade is done,
        else its quick code through `_gate`."""
        if built.upgrade is not None and built.upgrade.done.is_set():
            quick, up = built, built.upgrade
            built = built._replace(upgrade=None) if up.error is not None else \
                built._replace(address=up.result[0], image=up.result[1], upgrade=None)
            # (a call still in the quick code holds its builtin, whose `self` holds the
            # quick image: fastcall.caller)
            self.builds = [built if b is quick else b for b in self.builds]
        if all(b is not built for b in self.builds):
            self.builds.append(built)   # its image: the code lives as long as this
        self.built = built
        self.cfunc = fastcall.caller(built.image, built.symbol) \
            if built.upgrade is None else self._gate(built)
        self.kernel = built.kernel           # what its statuses' numbers refer to
        self.object_key = built.key          # what backends/llvm/warm.py records
        # bounds_check kernels: (fast_math, address of the record)
        self.bounds = (built.fast_math, built.bounds) if built.bounds_check else None
        if self.scope is not None:
            self.scope["_cfunc"] = self.cfunc

    def _gate(self, built):
        """The call path's function while `built` runs quick code: its first
        tiers.QUICK_CALLS calls run the quick code when small enough
        (tiers.small_enough: the steps of an einsum's contraction path may run one
        kernel), and so does a call that needs a nest the build left out (it returns
        STATUS_DEFERRED before computing anything); another call waits for the
        optimized code (compiling it, if no thread has begun), switches to it and
        runs it."""
        quick = fastcall.caller(built.image, built.symbol)
        n_in, n_arrays = len(self.kernel.inputs), len(self.kernel.inputs) + len(
            self.kernel.outputs)
        allowed = iter(range(tiers.QUICK_CALLS))   # (next(): atomic, whatever the threads)

        def gate(*args):
            if not built.upgrade.done.is_set():
                values = call_values(built.kernel, args[:n_in], args[n_arrays:])
                if self._defers(built, values) or next(allowed, None) is not None and \
                        tiers.small_enough(tiers.quick_cost(self.program, values,
                                                            built.vectorized)):
                    return quick(*args)
                try:
                    built.upgrade.wait()
                except Exception:       # (warned: the quick code stays)
                    pass
            with self._building:
                if self.built is built:
                    self.use(built)
            return self.cfunc(*args)
        return gate

    def _defers(self, built, values):
        """Whether a call at `values` needs a nest that `built` left out."""
        if not built.deferred:
            return False
        self._decide_choices()
        return bool((self._every_choice - self._not_taken_at(values)) & built.deferred)

    def _decide_choices(self):
        if self._not_taken_at is None:
            self._every_choice = frozenset(range(len(self.built.nests.choices)))
            self._not_taken_at = choices.decider(self.built.nests.skeleton)

    def build_choice(self, number, inputs, params):
        """Run a build that has the choice `number` from now on (a call with these
        inputs and parameters needs it: STATUS_DEFERRED): an earlier build with every
        choice the call takes (one a stage), else a build of those alone. The nests
        built before are not compiled again: a matmul first called with 256 rows, then
        with 3, compiles the 3-row nest alone (0.31 s, where compiling both took 0.70).
        A call runs the build used last; one that needs another returns
        STATUS_DEFERRED before computing anything and switches (10-20 us). Calls that
        keep switching get one build of every choice built so far once their switches
        have cost what that build would (SWITCH_S, NEST_BUILD_S).
        Concurrent calls that need the same new nest compile it once (the others wait
        and find it)."""
        with self._building, paused():
            self._choose(number, inputs, params)

    def _choose(self, number, inputs, params):
        b = self.built
        self._decide_choices()
        deferred = self._not_taken_at(call_values(b.kernel, inputs, params)) - {number}
        want = self._every_choice - deferred
        for other in reversed(self.builds):
            if not want & other.deferred:
                self.switches += 1
                union = deferred.intersection(*(o.deferred for o in self.builds))
                if other.deferred <= union or self.switches * SWITCH_S < \
                        NEST_BUILD_S * len(self._every_choice - union):
                    self.use(other)
                    return
                # the switches have cost what a build of every choice built so far
                # costs: that build now (and the count starts again)
                self.switches = 0
                deferred = union
                break
        self.use(_build(b.nests, b.symbol, b.fast_math, b.bounds_check, deferred,
                        call=(self.program, call_values(b.kernel, inputs, params))))


# A switch between builds (Signature.build_choice: a call returns STATUS_DEFERRED, its
# choices are decided in Python, it runs again) costs about SWITCH_S; a build about
# NEST_BUILD_S a nest (a matmul's, optimized). Calls that keep switching get one build of
# every choice built so far once their switches have cost what it would: rent, then buy,
# never more than twice the better of the two. (A build of all after 8 switches
# rebuilt every nest again for each new one of a kernel whose calls kept meeting new
# nests: 4.2 of the 6 s a test spent compiling, where switching would have cost 0.01.)
SWITCH_S = 15e-6
NEST_BUILD_S = 0.15
