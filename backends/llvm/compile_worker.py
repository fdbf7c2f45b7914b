"""The compiler process: LLVM IR in, optimized object code (or assembly) out.

tex runs LLVM's optimizer here, in a child process, not in the user's. Two reasons:
llvmlite's new-pass-manager bindings leak about 100 KB per optimized module (the pass
builder's instrumentation is never freed), so a long notebook session would grow
without bound; and an LLVM assertion or crash on some module ends this process, which
the parent reports as an error, instead of the user's interpreter.

Run as a script (`python compile_worker.py CPU FEATURES`), so that it imports only the
standard library and llvmlite. The protocol on stdin/stdout is a sequence of frames,
each an 8-byte little-endian length and a payload:

    request   b"o" + IR text     optimize (`optimize`) and emit an object file
              b"a" + IR text     optimize and emit assembly text
    response  b"k" + bytes       the object (or the assembly, UTF-8)
              b"e" + text        an error (a parse or verifier failure), UTF-8

The process exits when its stdin closes.
"""
import struct
import sys


def read_frame(stream):
    head = stream.read(8)
    if len(head) < 8:
        return None
    (length,) = struct.unpack("<Q", head)
    payload = stream.read(length)
    if len(payload) < length:
        return None
    return payload


def write_frame(stream, payload):
    stream.write(struct.pack("<Q", len(payload)) + payload)
    stream.flush()


# A module whose code tests access steps inside a reduction loop (a vector loop's "every
# access steps by one element" test, vector.py and transposed.py, where no loop around it
# took the test out: vector.unit_steps_test) names this metadata: it needs LLVM's
# non-trivial loop unswitching to move the test out of the loop, which only O3 runs.
UNSWITCH = "tex.loop_unswitching"


def pipeline_level(text):
    """The optimization pipeline of a module: O3 where it needs loop unswitching, else
    O1. tex emits its loops' vector code itself (register tiles, vector plans, unrolled
    rows), so O3's other passes found nothing more: 28 kernels (matmuls f32/f64/int8,
    split-K, matvec, fused epilogues, row and column reductions, layernorm, softmax,
    attention, conv1d, elementwise on contiguous, strided and Fortran-ordered views) ran
    as fast at O1 (each built both ways in one process, alternated, min of 15; Emerald
    Rapids, AVX-512 and znver3's AVX2 code), and LLVM took 12-22% less time on a kernel
    (a 256^2 matmul's module 255 -> 200 ms). An int8 row sum whose step test stayed in
    its loop ran 12-30% slower at O1 (the test is now made before the loop,
    vector.unit_steps_test)."""
    return 3 if "!" + UNSWITCH in text else 1


def optimize(llvm, machine, text):
    """Parse (in a context of its own), verify and run the O1 or O3 pipeline
    (pipeline_level) with LLVM's loop vectorizer and unroller, without its SLP
    vectorizer."""
    mod = llvm.parse_assembly(text, context=llvm.create_context())
    mod.triple = llvm.get_process_triple()
    mod.data_layout = str(machine.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=pipeline_level(text))
    pto.loop_vectorization = True
    # tex emits its vector code itself; LLVM's loop vectorizer still serves the loops
    # it leaves scalar (elementwise code over runtime strides), but the SLP vectorizer
    # took 10% of LLVM's time on a blocked matmul (the opt pipeline 142 -> 120 ms, a
    # three-operand einsum 139 -> 120) and changed no timing of `python -m tex bench`
    # beyond noise (15 workloads, A/B twice, Zen 5)
    pto.slp_vectorization = False
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(machine, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def optimize_light(llvm, machine, text, combine=True):
    """Parse, verify and run the few passes that code written for clarity needs (calls
    marked alwaysinline inlined, values out of allocas into registers, instructions
    combined, the control flow simplified): for code that is not hot (the thread
    runtime), where the O1 pipeline's loop passes, repeated combining and cleanup cost
    ten times as long for nothing measurable.

    combine=False leaves InstCombine out: a kernel's quick code (tiers.py), where it was
    42% of the light compile (137 quick modules of the einsum conformance run: 4.6 ->
    2.7 s of CPU; a 256^2 matmul's register-tile module 61 -> 29 ms, since LLVM's fast
    instruction selection also takes less time on the uncombined IR) and the code ran
    as fast (matmuls f32/f64/int8, batched, elementwise with exp, transposed and
    strided, row sums: each built both ways in one process, alternated, within 3%,
    elementwise 7-10% faster without it), bit for bit the same results. The thread
    runtime keeps it (its code spins and waits; 1 ms of its ~13)."""
    mod = llvm.parse_assembly(text, context=llvm.create_context())
    mod.triple = llvm.get_process_triple()
    mod.data_layout = str(machine.target_data)
    mod.verify()
    pb = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=0))
    passes = llvm.create_new_module_pass_manager()
    passes.add_always_inliner_pass()
    passes.add_sroa_pass()
    if combine:
        passes.add_instruction_combine_pass()
    passes.add_simplify_cfg_pass()
    passes.run(mod, pb)
    return mod


def main(cpu, features):
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    machine = target.create_target_machine(cpu=cpu, features=features, opt=3,
                                           codemodel="jitdefault")
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        request = read_frame(stdin)
        if request is None:
            return
        kind, text = request[:1], request[1:].decode()
        try:
            mod = optimize(llvm, machine, text)
            out = machine.emit_object(mod) if kind == b"o" else \
                machine.emit_assembly(mod).encode()
            write_frame(stdout, b"k" + out)
        except Exception as err:       # a bad module: the parent raises it
            write_frame(stdout, b"e" + f"{type(err).__name__}: {err}".encode())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
