"""Keep freed arrays' memory for the next ones (glibc only; the `shardwise` command does it).

The cost model makes many short-lived temporaries of the same size. glibc's malloc hands a
freed block above its trim threshold back to the kernel and takes fresh pages for the next
one, and every fresh 4 KiB page costs a page fault and a zeroing. numpy asks for huge pages
only from 4 MiB up (`madvise`), so arrays just below that pay the most: a chain of three
operations on 3.75 MiB arrays measured 5.2 ms with glibc's defaults and 1.6 ms with the settings
below, on this project's 2-core test VM (`benchmarks/bench_vectorized.py` reports both). The
settings (mallopt(3)): blocks up to MMAP_THRESHOLD_BYTES come from the heap rather than from
their own mapping, and up to TRIM_THRESHOLD_BYTES of free memory at the top of the heap stay
with the process. They change no result, only where numpy's memory comes from; the peak memory
of a run grows little (a streamed sweep of 1e8 configurations: 0.53 GB against 0.50 GB,
`docs/speed.md`).

The `shardwise` command calls `reuse_freed_memory()` at start. A Python program using the
library may call it itself; importing shardwise does not, since it changes the whole process.
Setting MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ in the environment keeps your own
settings.
"""

from __future__ import annotations

import os

MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's own dynamic threshold stops here (M_MMAP_THRESHOLD max)
TRIM_THRESHOLD_BYTES = 128 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>


def reuse_freed_memory() -> bool:
    """Set glibc's thresholds (module docstring); False where the C library is not glibc or the
    environment sets them already."""
    if any(name in os.environ for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError, TypeError):  # not glibc (macOS, Windows)
        return False
    mapped = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    return bool(mapped) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
