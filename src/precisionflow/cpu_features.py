"""What this machine's CPU offers the integer kernels (standard library only: the planner and the
int8 graph stage read it, and a node's id covers its import closure)."""

import functools
from pathlib import Path
from typing import Optional

# CPU flags (Linux's /proc/cpuinfo names) of integer dot-product instructions that accumulate
# u8 x s8 products in 32 bits: VNNI (AVX-512 and AVX) on x86, the dot product on ARM.
INTEGER_DOT_FLAGS = ("avx512_vnni", "avx_vnni", "asimddp")
# What a target may declare as its CPU's (TargetConf.cpu_dot_product): a flag above, or none.
DECLARABLE = INTEGER_DOT_FLAGS + ("none",)
# An int8 graph for a CPU whose targets declare nothing: the machine that makes the graph reads its
# own and records it, so the graph's id is the same wherever the plan is made.
READ_WHERE_MADE = "read where the graph is made"


@functools.lru_cache(maxsize=None)
def integer_dot_product() -> Optional[str]:
    """The first INTEGER_DOT_FLAGS flag this CPU has, or None (e.g. an AVX2-only x86)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    flags = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
    return next((flag for flag in INTEGER_DOT_FLAGS if flag in flags), None)
