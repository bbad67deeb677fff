"""The daemon's allocator settings give back the memory of large short-lived buffers.

glibc raises its mmap threshold each time it frees a large mapping, so after the first scrape
the next scrape's ~300 KB exposition pieces came from the heap, and the long-lived objects
made in between pinned those pages after the pieces were freed. Each case runs in a child
process of its own (the settings are process-wide): large buffers interleaved with small
long-lived ones, then the large ones freed. The daemon's image and CI are glibc Linux: on
another C library these fail, loudly, rather than skip.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.support import subprocess_env

CHILD = textwrap.dedent("""
    import sys
    from alivemcp.hygiene.heap import tune_allocator

    def rss_mb():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

    if sys.argv[1] == "tuned":
        tune_allocator()
    warm = bytes(1 << 20)
    del warm  # a freed mapping: glibc's own threshold rises past 300 KB
    big, pinned = [], []
    for _ in range(300):
        big.append(bytearray(300 * 1024))
        pinned.append(bytearray(2000))  # long-lived, made in between (glibc's heap)
    before = rss_mb()
    del big
    print(before - rss_mb())
""")


def freed_mb(mode: str, env: dict[str, str] | None = None) -> float:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(env),
        check=True,
    )
    return float(out.stdout.strip())


def test_tuned_allocator_gives_large_buffers_back_to_the_system() -> None:
    assert freed_mb("tuned") > 80  # of the 88 MB freed
    assert freed_mb("plain") < 20  # what the test would see without the setting


def test_the_environments_allocator_settings_win() -> None:
    # An operator's MALLOC_MMAP_THRESHOLD_ is kept: here one that maps nothing below 32 MiB.
    assert freed_mb("tuned", {"MALLOC_MMAP_THRESHOLD_": str(32 << 20)}) < 20
