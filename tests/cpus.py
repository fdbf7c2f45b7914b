"""Fixed targets for tests whose output depends on the CPU (goldens, block sizes): the
two the development machines are, with their caches."""
from tex.scheduler.target import Target

ZEN3 = Target("znver3", "+avx,+avx2,+fma,+f16c,-avx512f,-avx512vl,-avx512vnni,-avxvnni",
              ((1, 32 << 10), (2, 512 << 10), (3, 32 << 20)), 2)
ZEN5 = Target("znver5", "+avx,+avx2,+fma,+f16c,+avx512f,+avx512vl,+avx512bw,+avx512vnni",
              ((1, 48 << 10), (2, 1 << 20), (3, 32 << 20)), 2)
