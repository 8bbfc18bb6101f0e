# SPDX-License-Identifier: Apache-2.0
"""The copy kernel: source, NVRTC compilation (cubin for the device's arch), segment tables.

Nothing here needs a GPU: :func:`compile_family` runs NVRTC only (CI compiles every variant for
sm_90 with no device), :func:`pack_table` builds the device-side segment table as bytes, and
:func:`emulate` replays a table on host memory exactly as the kernel walks it (index maths,
magic-number divisions and all), which is how CI checks lowering without a GPU.

A *family* is one NVRTC program: the kernel template of ``copy.cu`` instantiated for one run
length (``run_bytes``; 0 = read from the table) and one number of outer dimensions (``nout``),
for every vector width V in {1, 2, 4, 8, 16} that divides the run length. The element size is
not a template parameter: everything is bytes, and it only shows through V and the run length.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "BLOCK",
    "CTL_PEERS",
    "KINDS",
    "NO_PEER",
    "ctl_words",
    "ILP",
    "MAXD",
    "MAXF",
    "MAXO",
    "SEG_DTYPE",
    "SEG_LIMIT",
    "tile_edge",
    "tile_axis",
    "tile_count",
    "VEC_WIDTHS",
    "compile_family",
    "emulate",
    "family_source",
    "family_widths",
    "fast_divmod_params",
    "kernel_name",
    "pack_table",
]

MAXD = 8  # outer dimensions a segment may have (REDIST_MAXD)
MAXF = 8  # fields one launch may move (REDIST_MAXF: the kernel's Bases argument)
#: output slots of the Bases argument (REDIST_MAXO): slot f is field f's own output, f + MAXF * (1 + j)
#: field f's output on the j-th push destination (each destination's out= at its own place)
MAXO = 64
#: dynamic shared memory of a launch with transposing segments (REDIST_TILE_SHARED_BYTES: 64 x 65 8-byte elements)
TILE_SHARED_BYTES = 64 * 65 * 8
#: element sizes whose transposing segments move in 16-byte groups (pairs, quads) at vector width 16
GROUP_ROWS = (4, 8)
BLOCK = 256  # threads per block (REDIST_BLOCK)
ILP = 1  # vectors per thread per chunk (REDIST_ILP; 1 measured best with a full grid, perf/history/issue12.md)
VEC_WIDTHS = (16, 8, 4, 2, 1)
GRID_PER_SM = 1024  # most blocks per SM in one launch
#: Largest segment (bytes): unit indices must stay below 2^31 for the magic-number divisions.
SEG_LIMIT = (1 << 31) - 1

SEG_DTYPE = np.dtype(
    [
        ("src", "<u8"),
        ("dst", "<u8"),
        ("src_mask", "<u8"),
        ("dst_mask", "<u8"),
        ("bytes", "<u8"),
        ("row_bytes", "<u4"),
        ("peer", "<u4"),
        ("blk_begin", "<u4"),
        ("blk_count", "<u4"),
        ("run_mul", "<u4", (5,)),
        ("run_shr", "<u4", (5,)),
        ("ext", "<u4", (MAXD,)),
        ("ext_mul", "<u4", (MAXD,)),
        ("ext_shr", "<u4", (MAXD,)),
        ("sstride", "<i8", (MAXD,)),
        ("dstride", "<i8", (MAXD,)),
        ("tile_a", "<u4"),
        ("field", "<u4"),
    ]
)
assert SEG_DTYPE.itemsize == 328, SEG_DTYPE.itemsize  # static_assert(sizeof(Seg) == 328) in copy.cu
def tile_edge(row_bytes: int) -> int:
    """Edge of the square tiles of a transposing segment of ``row_bytes`` elements (TileEdge in copy.cu)."""
    return 32 if row_bytes >= 16 else 64

ALL_ONES = (1 << 64) - 1


def fast_divmod_params(d: int) -> tuple[int, int]:
    """(mul, shr) such that ``n // d == (n * mul) >> 32 >> shr`` for 0 <= n < 2^31 (mul 0: d == 1)."""
    d = int(d)
    if not 1 <= d < (1 << 31):
        raise ValueError(f"divisor {d} out of range [1, 2^31)")
    if d == 1:
        return 0, 0
    log2 = (d - 1).bit_length()  # ceil(log2(d))
    p = 31 + log2
    mul = ((1 << p) + d - 1) // d
    assert mul < (1 << 32)
    return mul, p - 32


#: the kernel kinds of a family: the plain copy, the epoch protocol's copy and its unpack
KINDS = ("plain", "epoch", "epoch_unpack")
_PREFIX = {"plain": "redist_copy", "epoch": "redist_epoch", "epoch_unpack": "redist_epoch_unpack"}
#: the peer field of segments that stay on this rank
NO_PEER = 0xFFFFFFFF
#: control block (u64 words): epoch, two u32 block counters, the last epoch whose credits were
#: posted, then credit[P], arrive[P], signal[P] (REDIST_CTL_* in copy.cu)
CTL_PEERS = 3


def ctl_words(nranks: int) -> int:
    """u64 words of one control block of the epoch protocol."""
    return CTL_PEERS + 3 * nranks


def kernel_name(run_bytes: int, nout: int, vec: int, kind: str = "plain") -> str:
    return f"{_PREFIX[kind]}_r{run_bytes}_n{nout}_v{vec}"


def family_widths(run_bytes: int) -> tuple[int, ...]:
    """Vector widths a family is compiled for: all of them, or those dividing the fixed run length
    (and 16 for rows of 4 or 8 bytes: transposed elements moved in 16-byte groups, see copy.cu)."""
    return tuple(v for v in VEC_WIDTHS
                 if run_bytes == 0 or run_bytes % v == 0 or (run_bytes in GROUP_ROWS and v == 16))


@functools.cache
def _template() -> str:
    with open(os.path.join(os.path.dirname(__file__), "copy.cu")) as f:
        return f.read()


def family_source(run_bytes: int, nout: int, kind: str = "plain") -> str:
    """copy.cu plus the ``extern "C"`` wrappers of one family, for one kind of kernel."""
    if not 0 <= nout <= MAXD:
        raise ValueError(f"nout must be in [0, {MAXD}], got {nout}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    lines = [_template(), "", f"// family run_bytes={run_bytes} nout={nout} kind={kind}"]
    for v in family_widths(run_bytes):
        t = f"{v}, {v.bit_length() - 1}, {run_bytes}u, {nout}"
        head = f'extern "C" __global__ void __launch_bounds__(REDIST_BLOCK) {kernel_name(run_bytes, nout, v, kind)}('
        if kind == "plain":
            lines.append(f"{head}const __grid_constant__ Bases bases, const Seg* table, int nsegs) "
                         f"{{ copy_segments<{t}>(bases, table, nsegs); }}")
        else:
            lines.append(
                f"{head}const __grid_constant__ Bases bases, const Seg* table, int nsegs, u64* ctl, const u64* proto, "
                f"int nranks, int ncredit, int narrive, int nwait, int wait, int bump) "
                f"{{ epoch_segments<{t}, {int(kind == 'epoch_unpack')}>(bases, table, nsegs, ctl, "
                f"proto, nranks, ncredit, narrive, nwait, wait, bump); }}"
            )
    return "\n".join(lines) + "\n"


_compile_lock = threading.Lock()
_compiled: dict[tuple[str, str], Any] = {}


def compile_family(run_bytes: int, nout: int, arch: str = "90", kind: str = "plain") -> Any:
    """NVRTC-compile one family (one kind) to a cubin for ``sm_<arch>``; cached per process.

    Returns ObjectCode. Cubin, not PTX: PTX from an NVRTC newer than the driver would not load.
    """
    arch = str(arch).removeprefix("sm_")
    src = family_source(run_bytes, nout, kind)
    key = (arch, hashlib.sha256(src.encode()).hexdigest())
    with _compile_lock:
        obj = _compiled.get(key)
        if obj is not None:
            return obj
        from cuda.core import Program, ProgramOptions

        from ..errors import CudaError

        opts = ProgramOptions(arch=f"sm_{arch}", std="c++17", name=f"{kernel_name(run_bytes, nout, 0, kind)}.cu")
        try:
            obj = Program(src, "c++", opts).compile("cubin")
        except Exception as e:
            raise CudaError(
                f"NVRTC failed to compile the redist copy kernel (run_bytes={run_bytes}, nout={nout}, kind={kind}, "
                f"sm_{arch}): {e}"
            ) from e
        _compiled[key] = obj
        return obj


def pack_table(rows: list[dict[str, Any]]) -> np.ndarray:
    """The device segment table (SEG_DTYPE records) from plain dicts.

    Each dict: src, dst (ints), src_rel, dst_rel (bools), bytes, row_bytes, outer (extents,
    outermost first), sstride, dstride (byte strides), blk_begin, blk_count, and peer (the other
    rank; :data:`NO_PEER` for a local segment; default NO_PEER).
    """
    tab = np.zeros(len(rows), dtype=SEG_DTYPE)
    for i, r in enumerate(rows):
        t = tab[i]
        t["src"] = r["src"] & ALL_ONES
        t["dst"] = r["dst"] & ALL_ONES
        t["src_mask"] = ALL_ONES if r["src_rel"] else 0
        t["dst_mask"] = ALL_ONES if r["dst_rel"] else 0
        t["bytes"] = r["bytes"]
        t["row_bytes"] = r["row_bytes"]
        outer = tuple(r["outer"])
        n = len(outer)
        if n > MAXD:
            raise ValueError(f"segment has {n} outer dimensions, at most {MAXD} supported")
        t["peer"] = r.get("peer", NO_PEER)
        ta = r.get("tile_a")
        t["tile_a"] = NO_PEER if ta is None else MAXD - n + ta
        f = r.get("field", 0)
        t["field"] = f | (r.get("slot", f) << 16)
        t["blk_begin"] = r["blk_begin"]
        t["blk_count"] = r["blk_count"]
        for lv in range(5):
            v = 1 << lv
            if r["row_bytes"] % v == 0:
                t["run_mul"][lv], t["run_shr"][lv] = fast_divmod_params(r["row_bytes"] // v)
        ext = [1] * (MAXD - n) + list(outer)
        ss = [0] * (MAXD - n) + list(r["sstride"])
        ds = [0] * (MAXD - n) + list(r["dstride"])
        for k in range(MAXD):
            t["ext"][k] = ext[k]
            t["ext_mul"][k], t["ext_shr"][k] = fast_divmod_params(ext[k])
            t["sstride"][k] = ss[k]
            t["dstride"][k] = ds[k]
    return tab


def tile_axis(row_bytes: int, outer: Sequence[int], sstride: Sequence[int], dstride: Sequence[int]) -> int | None:
    """The outer dimension a segment is transposed over, or None (copied row by row).

    A segment of one-element rows (``row_bytes`` a vector width) whose innermost outer dimension
    is contiguous on the destination side while another one is contiguous on the source side is a
    transpose: the kernel moves it through shared-memory tiles (square, :func:`tile_edge`; both sides
    coalesced) when its vector width equals ``row_bytes``. Returns that other dimension's index
    (outermost = 0); both dimensions must have at least 2 elements.
    """
    n = len(outer)
    if n < 2 or row_bytes not in VEC_WIDTHS or dstride[-1] != row_bytes or sstride[-1] == row_bytes or outer[-1] < 2:
        return None
    for k in range(n - 2, -1, -1):
        if sstride[k] == row_bytes and outer[k] >= 2:
            return k
    return None


def tile_count(outer: Sequence[int], ta: int, row_bytes: int) -> int:
    """Tiles of a transposing segment: squares over dimension ``ta`` and the innermost, times
    every index of the other dimensions."""
    rest = math.prod(e for k, e in enumerate(outer[:-1]) if k != ta)
    edge = tile_edge(row_bytes)
    return rest * ceil_div(outer[ta], edge) * ceil_div(outer[-1], edge)


def _emulate_tiles(sg, b0: int, nb: int, nout: int, src0: int, dst0: int, vec: int,
                   groups: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) element addresses of a transposing segment, tile by tile as copy.cu's
    redist_tile_segment walks it (``groups``: redist_tile_groups, whose 16-byte group starts must be aligned)."""
    ka, kb = int(sg["tile_a"]), MAXD - 1
    na, nb_ = int(sg["ext"][ka]), int(sg["ext"][kb])
    TILE = tile_edge(vec)
    ta, tb = ceil_div(na, TILE), ceil_div(nb_, TILE)
    others = [k for k in range(MAXD - nout, MAXD - 1) if k != ka]
    ntiles = math.prod(int(sg["ext"][k]) for k in others) * ta * tb
    seen = np.zeros(ntiles, np.int64)
    for blk in range(nb):  # each block takes tiles blk, blk + nb, ...
        seen[blk::nb] += 1
    assert (seen == 1).all(), "a tile is walked by no block or by two"
    t = np.arange(ntiles, dtype=np.int64)
    jb, r = t % tb, t // tb
    ja, r = r % ta, r // ta
    so = np.zeros(ntiles, np.int64)
    do = np.zeros(ntiles, np.int64)
    for k in reversed(others):
        e = int(sg["ext"][k])
        idx, r = r % e, r // e
        so += idx * int(sg["sstride"][k])
        do += idx * int(sg["dstride"][k])
    assert (r == 0).all()
    i = np.arange(TILE, dtype=np.int64)
    a = ja[:, None, None] * TILE + i[None, :, None]  # [tile, a within, b within]
    b = jb[:, None, None] * TILE + i[None, None, :]
    ok = (a < na) & (b < nb_)
    src = src0 + so[:, None, None] + a * int(sg["sstride"][ka]) + b * int(sg["sstride"][kb])
    dst = dst0 + do[:, None, None] + a * int(sg["dstride"][ka]) + b * int(sg["dstride"][kb])
    if groups:  # a whole group of 16 / vec elements is read from a multiple of it along a, written along b
        g = 16 // vec
        read = ok & (a % g == 0) & (a + g - 1 < na)
        write = ok & (b % g == 0) & (b + g - 1 < nb_)
        assert not (src[read] % 16).any() and not (dst[write] % 16).any(), "misaligned 16-byte group"
    return src[ok].astype(np.uint64), dst[ok].astype(np.uint64)


def _fdiv(n: np.ndarray, mul: int, shr: int) -> np.ndarray:
    if mul == 0:
        return n
    return ((n.astype(np.uint64) * np.uint64(mul)) >> np.uint64(32 + shr)).astype(np.uint64)


def emulate(
    table: np.ndarray,
    *,
    vec: int,
    run_bytes: int,
    nout: int,
    grid: int,
    in_base: int | Sequence[int],
    out_delta: int | Sequence[int],
    load: Callable[[np.ndarray, int], np.ndarray],
    store: Callable[[np.ndarray, np.ndarray], None],
) -> None:
    """Run the kernel's addressing on the host, the way copy.cu does (vectorised per segment).

    ``load(addresses, vec) -> uint8[n, vec]`` and ``store(addresses, data)`` model memory.
    Checks what the kernel relies on: every block maps to a segment, units stay below 2^31,
    alignment to ``vec``; raises AssertionError otherwise. ``in_base`` / ``out_delta``: one per
    field (the kernel's Bases argument), or one int for a single field.
    """
    in_bases = [in_base] if isinstance(in_base, int) else list(in_base)
    out_deltas = [out_delta] if isinstance(out_delta, int) else list(out_delta)
    nsegs = len(table)
    lv = vec.bit_length() - 1
    covered = np.zeros(grid, dtype=bool)
    for s in range(nsegs):
        sg = table[s]
        b0, nb = int(sg["blk_begin"]), int(sg["blk_count"])
        assert nb >= 1 and b0 + nb <= grid, (b0, nb, grid)
        assert not covered[b0 : b0 + nb].any(), "two segments share a block"
        covered[b0 : b0 + nb] = True
        if s + 1 < nsegs:
            assert int(table[s + 1]["blk_begin"]) == b0 + nb, "segments must own consecutive block ranges"
        mask, f, o = int(sg["src_mask"]), int(sg["field"]) & 0xFFFF, int(sg["field"]) >> 16
        assert f < len(in_bases) and f < MAXF, f"segment of field {f} without its operand base"
        assert o < len(out_deltas) and o < MAXO, f"segment of output slot {o} without its output delta"
        src0 = (int(sg["src"]) + (in_bases[f] & mask)) & ALL_ONES
        dst0 = (int(sg["dst"]) + (out_deltas[o] & int(sg["dst_mask"]))) & ALL_ONES
        nbytes = int(sg["bytes"])
        rb = int(sg["row_bytes"])
        if nout >= 2 and int(sg["tile_a"]) != NO_PEER and (rb == vec or (rb in GROUP_ROWS and vec == 16)):
            src, dst = _emulate_tiles(sg, b0, nb, nout, src0, dst0, rb, groups=vec != rb)
            assert len(src) * rb == nbytes, "the tiles do not cover the segment"
            store(dst, load(src, rb))
            continue
        assert nbytes % vec == 0
        units = nbytes >> lv
        assert units < (1 << 31)
        if units == 0:
            continue
        g = np.arange(units, dtype=np.uint64)
        rb = int(sg["row_bytes"])
        assert rb % vec == 0
        if nout == 0:
            row, u = np.zeros_like(g), g
        else:
            ru = (run_bytes if run_bytes else rb) // vec
            if run_bytes:
                assert run_bytes == rb, "fixed run length differs from the segment's"
                row = g // np.uint64(ru)
            else:
                row = _fdiv(g, int(sg["run_mul"][lv]), int(sg["run_shr"][lv]))
            u = g - row * np.uint64(ru)
        so = np.zeros(units, dtype=np.int64)
        do = np.zeros(units, dtype=np.int64)
        r = row
        for k in range(nout - 1, 0, -1):
            kk = MAXD - nout + k
            e = int(sg["ext"][kk])
            q = _fdiv(r, int(sg["ext_mul"][kk]), int(sg["ext_shr"][kk]))
            assert np.array_equal(q, r // np.uint64(e)), "magic division disagrees"
            idx = (r - q * np.uint64(e)).astype(np.int64)
            so += idx * int(sg["sstride"][kk])
            do += idx * int(sg["dstride"][kk])
            r = q
        if nout >= 1:
            kk = MAXD - nout
            # leading padding dimensions are (extent 1, stride 0); unused ones must stay at 0
            so += r.astype(np.int64) * int(sg["sstride"][kk])
            do += r.astype(np.int64) * int(sg["dstride"][kk])
            assert (r < np.uint64(int(sg["ext"][kk]))).all()
        for kk in range(MAXD - nout):
            assert int(sg["ext"][kk]) == 1, "segment has more outer dimensions than the kernel's nout"
        src = (np.uint64(src0) + so.astype(np.uint64) + u * np.uint64(vec)).astype(np.uint64)
        dst = (np.uint64(dst0) + do.astype(np.uint64) + u * np.uint64(vec)).astype(np.uint64)
        assert not (src % np.uint64(vec)).any() and not (dst % np.uint64(vec)).any(), "misaligned vector"
        store(dst, load(src, vec))
    assert covered.all(), "a block has no segment"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def blocks_for(nbytes: list[int], sm_count: int) -> list[int]:
    """Blocks per segment: one per chunk of BLOCK * ILP 16-byte vectors, at least one each, at most
    1024 per SM in all (then blocks stride over several chunks). Many short-lived blocks beat a
    grid-stride loop over one resident wave: 1.005x vs 1.09x a device-to-device copy at 1 GiB."""
    chunk = BLOCK * ILP * 16
    want = [max(1, ceil_div(n, chunk)) for n in nbytes]
    cap = max(sm_count * GRID_PER_SM, len(nbytes))
    total = sum(want)
    if total <= cap:
        return want
    return [max(1, math.floor(w * cap / total)) for w in want]
