"""Disk cache: read throughput of ``Cache.read`` from blocks on disk, with its per-block check
(length and CRC-32) and without the CRC-32 (the length alone), and the CRC-32 by itself.

    python benchmarks/cache.py                  # 256 MiB in 4 MiB blocks on /dev/shm
    python benchmarks/cache.py --dir /var/tmp   # blocks on another disk (its page cache)

Every read is a cache hit (the blocks are written once, untimed): what is timed is opening each
block file, reading it, checking it and slicing the range out, the work a hit costs. Whole-block
reads give MB/s of blocks; 4 KiB reads (one per block) cost a whole block each, as in
``Cache.read``. The two variants alternate, round by round; the table gives medians.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _harness as H
from seekdata.remote import Cache
from seekdata.sources.remote import cache as _cache


class Source:
    """A remote file as ``Cache.read`` sees one, its bytes in memory (every read here hits)."""

    def __init__(self, data: bytes) -> None:
        self.url, self.etag, self.size, self.data = "mem://bench/data.bin", '"1"', len(data), data

    def get(self, start: int, stop: int) -> bytes:
        return self.data[start:stop]


WHOLE, SMALL = "whole blocks", "4 KiB, one per block"


def length_only(head: bytes, data: bytes, want: int) -> str | None:
    """``cache._damage`` without the CRC-32: the block's length alone."""
    return None if len(head) == _cache.HEADER_BYTES and len(data) == want else "short"


@contextlib.contextmanager
def checked(on: bool) -> Iterator[None]:
    full = _cache._damage
    _cache._damage = full if on else length_only  # type: ignore[assignment]
    try:
        yield
    finally:
        _cache._damage = full  # type: ignore[assignment]


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    p = H.parser(__doc__ or "", "cache")
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    p.add_argument("--dir", default=shm, help="where the cache's folder goes (default /dev/shm)")
    p.add_argument("--mib", type=int, default=256, help="bytes of blocks read per round, MiB")
    p.add_argument("--block-bytes", type=int, default=4 << 20)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    mib, rounds = (32, 3) if args.quick else (args.mib, args.rounds)
    bsize = args.block_bytes
    nblocks = max(1, (mib << 20) // bsize)
    data = os.urandom(nblocks * bsize)
    src = Source(data)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="seekdata-bench-cache-") as tmp:
        cache = Cache(tmp, max_bytes=2 * nblocks * (bsize + 64), block_bytes=bsize)
        assert cache.read(src, 0, src.size) == data  # every block written (untimed)

        def whole() -> None:
            for k in range(nblocks):
                cache.read(src, k * bsize, (k + 1) * bsize)

        def small() -> None:
            for k in range(nblocks):
                cache.read(src, k * bsize + 100, k * bsize + 100 + 4096)

        times: dict[tuple[str, bool], list[float]] = {}
        for r in range(rounds):
            for on in (r % 2 == 0, r % 2 != 0):  # alternate which variant goes first
                with checked(on):
                    for name, fn in ((WHOLE, whole), (SMALL, small)):
                        times.setdefault((name, on), []).append(timed(fn))
        crc = [timed(lambda: zlib.crc32(data)) for _ in range(rounds)]
    for name in (WHOLE, SMALL):
        for on in (True, False):
            t = H.median(times[(name, on)])
            rows.append(
                {
                    "reads": name,
                    "check": "length + CRC-32" if on else "length only",
                    "block MB/s": nblocks * bsize / t / 1e6,
                    "reads/s": nblocks / t,
                }
            )
        with_crc, without = (H.median(times[(name, on)]) for on in (True, False))
        rows[-2]["cost"] = f"{(with_crc / without - 1) * 100:+.0f} %"
    rows.append({"reads": "zlib.crc32 alone", "block MB/s": len(data) / H.median(crc) / 1e6})
    print(f"{nblocks} blocks of {bsize} bytes under {args.dir or tempfile.gettempdir()}, "
          f"median of {rounds} rounds\n")  # fmt: skip
    print(H.table(rows, ["reads", "check", "block MB/s", "reads/s", "cost"]))
    H.write(args.out, "cache", rows, blocks=nblocks, block_bytes=bsize, dir=args.dir,
            rounds=rounds, zlib=zlib.ZLIB_RUNTIME_VERSION)  # fmt: skip


if __name__ == "__main__":
    main()
