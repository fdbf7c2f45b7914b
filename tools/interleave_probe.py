"""Why a 2-thread tex call timed right after a 2-thread numpy (OpenBLAS) call runs at
about one thread's speed: OpenBLAS's worker threads spin (sched_yield loops) for about
0.1 s after each call, and the scheduler shares the cores fairly between them and tex's
threads. This probe times a 1024^3 float32 tex matmul after a numpy matmul with growing
gaps, and shows from /proc/self/task/*/schedstat how much CPU each thread of the process
got during the tex call (run time, and time spent runnable but waiting for a core).

    python tools/interleave_probe.py [n]

The checks' `interleaved` timing (A B A B, no pause) always measures tex in that state;
`python -m tex bench` settles 0.25 s before each sample instead. Linux only.
"""
import os
import statistics
import sys
import threading
import time

import numpy as np

import tex


def _schedstat():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            run, wait, _ = f.read().split()
        out[int(tid)] = (int(run), int(wait))
    return out


def main(n=1024):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)

    def run():
        return tex.einsum("ik,kj->ij", a, b)
    run(), a @ b
    print(f"tex threads {tex.get_num_threads()}, cpus {len(os.sched_getaffinity(0))}")
    for gap in (0.0, 0.005, 0.02, 0.05, 0.1, 0.3):
        times = []
        for _ in range(7):
            a @ b
            if gap:
                time.sleep(gap)
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        print(f"tex {n}^3 after numpy + {gap * 1e3:5.0f} ms pause: "
              f"{statistics.median(times) * 1e3:7.2f} ms")
    me = threading.get_native_id()
    for gap in (0.0, 0.3):
        a @ b
        time.sleep(gap)
        s0 = _schedstat()
        t0 = time.perf_counter()
        run()
        t1 = time.perf_counter()
        s1 = _schedstat()
        busy = [(t, (s1[t][0] - s0[t][0]) / 1e6, (s1[t][1] - s0[t][1]) / 1e6)
                for t in s1 if t in s0 and s1[t][0] > s0[t][0]]
        print(f"pause {gap * 1e3:.0f} ms: tex call {1e3 * (t1 - t0):.1f} ms; threads "
              + ", ".join(f"{'main' if t == me else t}: ran {r:.1f} waited {w:.1f}"
                          for t, r, w in busy))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1024)
