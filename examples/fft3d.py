#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fft3d.py: a distributed 3-D real-to-complex FFT on pencils, built on redist exchanges.

    mpiexec -n 4 python examples/fft3d.py                        # 64^3 float64, 2 x 2 grid, checked
    mpiexec -n 4 python examples/fft3d.py --shape 96 80 70 --grid 4 1   # slabs, uneven sizes
    mpiexec -n 2 python examples/fft3d.py --gpu                  # cupy + cuFFT, one GPU per rank

A global real array of shape (N0, N1, N2) lives on a P0 x P1 process grid in three pencil
orientations. Each 1-D transform runs on the orientation where its axis is whole, and each
redist exchange between two orientations can write its result with ``result_layout`` putting the
next transform's axis last in memory, so that every FFT is a batch of contiguous lines:

    orientation   split over P0, P1   whole   memory order (slow -> fast)   transform
    physical      axis 0, axis 1      axis 2  (0, 1, 2)                      rfft along axis 2
    middle        axis 0, axis 2      axis 1  (0, 2, 1)                      fft along axis 1
    spectral      axis 1, axis 2      axis 0  (1, 2, 0)                      fft along axis 0

physical -> middle exchanges data inside each row of the grid, middle -> spectral inside each
column. A grid (P, 1) gives slabs: physical -> middle then moves nothing between ranks and the host
skips it (the axis-1 transform runs on the strided axis instead, as it does for every orientation
change that moves nothing); on GPUs every exchange runs, since cuFFT lines here are contiguous.

``layout``: "contiguous" (the table above), "natural" (every result in C order: the host FFTs
then run on strided lines), "planes" (C order but spectral results in order (1, 0, 2): axis 2 stays
contiguous, the axis-0 lines run across small planes) or "auto" (default): contiguous on GPUs,
where cuFFT wants it and a permuted result costs about what a plain one does, natural on the host,
where numpy.fft and FFTW run strided lines about as fast as contiguous ones but the transposing
copy of a permuted result costs several times the exchange (perf/RESULTS.md, "Spectral examples").

``PencilFFT`` is planned once (four ``redist.Redistribute`` objects with fixed operands and
persistent results) and reused every step: ``forward(u)`` is numpy.fft.rfftn of the global array
(unnormalised) and ``backward(u_hat)`` is irfftn (normalised by 1/(N0 N1 N2)), on any global shape,
any P, any grid, with ``nfields`` arrays moving together in every exchange. On GPUs it touches no
allocator after construction, so a whole step built from it can be captured into one CUDA graph
(examples/taylor_green.py --gpu).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import numpy as np
import redist
from mpi4py import MPI
from redist import BlockNonCyclic, DistributedContext, ProcessGrid, Redistribute

__all__ = ["CuFFTLines", "FFTWLines", "HostLines", "PencilFFT", "default_grid", "gather"]

# per orientation: the process grid of its boxes (P0, P1 placed on the split axes)
ORIENTATIONS = {
    "physical": lambda p0, p1: (p0, p1, 1),
    "middle": lambda p0, p1: (p0, 1, p1),
    "spectral": lambda p0, p1: (1, p0, p1),
}
# per layout: the memory order (slowest axis first) of each orientation's exchange results
LAYOUTS = {
    "contiguous": {"physical": (0, 1, 2), "middle": (0, 2, 1), "spectral": (1, 2, 0)},  # transform axis last
    "natural": {"physical": (0, 1, 2), "middle": (0, 1, 2), "spectral": (0, 1, 2)},  # C order
    "planes": {
        "physical": (0, 1, 2),
        "middle": (0, 1, 2),
        "spectral": (1, 0, 2),
    },  # axis 2 last, transform next
}


def context() -> DistributedContext:
    """redist's runtime context: the communicator and the device (after redist.initialize())."""
    ctx = redist.get_context()
    if ctx is None:
        raise RuntimeError("call redist.initialize() first")
    return ctx


def communicator() -> MPI.Intracomm:
    """The MPI communicator redist runs on (its process group's)."""
    comm = context().process_group.mpi_comm
    if comm is None:
        raise RuntimeError("these examples need an MPI process group")
    return comm


def start(gpu: bool):
    """Initialise redist (on the GPU it picks for this rank, or on the host): the communicator and,
    with ``gpu``, a non-blocking cupy stream made current (cupy's calls and redist's executes go on
    it, and are captured from it); else None."""
    redist.initialize(device_id=None if gpu else "cpu")
    stream = None
    if gpu:
        import cupy  # pyright: ignore[reportMissingImports]

        cupy.cuda.Device(context().device_id).use()
        stream = cupy.cuda.Stream(non_blocking=True)
        stream.use()
    return communicator(), stream


AUTO_HOST_LAYOUT = "natural"  # layout="auto" on the host (perf/RESULTS.md, "Spectral examples")


def default_grid(nranks: int) -> tuple[int, int]:
    """The near-square grid MPI would pick (``MPI.Compute_dims``): (P, 1) slabs for 2 or 3 ranks."""
    p0, p1 = MPI.Compute_dims(nranks, 2)
    return p0, p1


def empty_in_order(xp, shape, dtype, order):
    """An uninitialised array of ``shape`` (global axis order) whose memory runs in ``order`` (on the
    host 64-byte aligned, as SIMD FFT codelets like; numpy aligns large arrays to 16 bytes only)."""
    mem_shape, dtype = tuple(shape[a] for a in order), np.dtype(dtype)
    if xp is np:
        nbytes = math.prod(mem_shape) * dtype.itemsize
        raw = np.empty(nbytes + 64, dtype=np.uint8)
        off = -raw.ctypes.data % 64
        mem = raw[off : off + nbytes].view(dtype).reshape(mem_shape)
    else:
        mem = xp.empty(mem_shape, dtype=dtype)
    return mem.transpose(inverse(order))


def inverse(order) -> tuple[int, ...]:
    """The permutation undoing ``order`` (as plain ints: cupy's transpose wants them)."""
    return tuple(int(i) for i in np.argsort(order))


def memory_order(a) -> tuple[int, ...]:
    """The axes of ``a`` from the largest stride to the smallest (its memory order)."""
    return tuple(sorted(range(a.ndim), key=lambda i: (-abs(a.strides[i]), i)))


class HostLines:
    """numpy.fft on the host: any axis, any strides, in place or not; inverses divide by n."""

    xp = np
    strided = True  # lines need not be contiguous: an exchange that only transposes is skipped
    normalises = True

    def __call__(self, kind: str, src, dst, axis: int, n: int) -> None:
        if kind == "irfft":
            np.fft.irfft(src, n=n, axis=axis, out=dst)
        else:
            getattr(np.fft, kind)(src, axis=axis, out=dst)


class FFTWLines:
    """FFTW on the host through pyFFTW (optional: ``pip install pyfftw``), what mpi4py-fft uses too.

    One FFTW_MEASURE plan per call site (kind, shapes, strides, alignment, in place or not), made at
    its first call on scratch arrays of the same layout (measuring overwrites its arrays), then
    re-pointed at the caller's arrays (``update_arrays``: no copy) whenever they change. Inverses are
    unnormalised (PencilFFT.backward scales once at the end). Arrays that are not dense in some
    axis order go through numpy.fft instead."""

    xp = np
    strided = True
    normalises = False

    def __init__(self):
        import pyfftw  # pyright: ignore[reportMissingImports]

        self._pyfftw, self._plans, self._numpy = pyfftw, {}, HostLines()

    @staticmethod
    def _twin(a):
        """A scratch array with a's shape, strides and address modulo 64; None if a is not dense."""
        order = memory_order(a)
        mem_shape = tuple(a.shape[i] for i in order)
        dense = np.empty(mem_shape, dtype=a.dtype).transpose(inverse(order))
        if dense.strides != a.strides:
            return None
        raw = np.empty(a.nbytes + 64, dtype=np.uint8)
        off = (a.ctypes.data - raw.ctypes.data) % 64
        return raw[off : off + a.nbytes].view(a.dtype).reshape(mem_shape).transpose(inverse(order))

    def __call__(self, kind: str, src, dst, axis: int, n: int) -> None:
        if src.size == 0:
            return
        same = src.ctypes.data == dst.ctypes.data
        key = (
            kind,
            n,
            axis,
            src.shape,
            src.strides,
            dst.shape,
            dst.strides,
            src.dtype.str,
            dst.dtype.str,
            src.ctypes.data % 64,
            dst.ctypes.data % 64,
            same,
        )
        plan = self._plans.get(key)
        if plan is None:
            a = self._twin(src)
            b = a if same else self._twin(dst)
            if a is None or b is None:
                plan = self._plans[key] = False
            else:
                flags = ("FFTW_MEASURE", "FFTW_DESTROY_INPUT") if kind == "irfft" else ("FFTW_MEASURE",)
                direction = "FFTW_BACKWARD" if kind in ("ifft", "irfft") else "FFTW_FORWARD"
                plan = self._plans[key] = self._pyfftw.FFTW(
                    a, b, axes=(axis,), direction=direction, flags=flags, threads=1
                )
        if plan is False:
            self._numpy(kind, src, dst, axis, n)
            if kind in ("ifft", "irfft"):  # numpy divided by n: undo, PencilFFT scales once for all
                np.multiply(dst, n, out=dst)
            return
        if (
            plan.input_array.ctypes.data != src.ctypes.data
            or plan.output_array.ctypes.data != dst.ctypes.data
        ):
            plan.update_arrays(src, dst)  # ~1.5 ms at 128^3 (pyFFTW's checks): only when the arrays change
        plan.execute()


class CuFFTLines:
    """cuFFT on the GPU: batches of contiguous lines (``cupy.cuda.cufft.Plan1d``), one plan per
    (kind, n, batch, dtype) made at the first call with their work areas. Later calls allocate
    nothing and enqueue only on the current stream, so they can be captured into a CUDA graph.
    Inverses are unnormalised (PencilFFT.backward scales once at the end)."""

    strided = False
    normalises = False

    def __init__(self):
        import cupy  # pyright: ignore[reportMissingImports]
        from cupy.cuda import cufft  # pyright: ignore[reportMissingImports]

        self.xp, self._cufft, self._plans = cupy, cufft, {}

    def __call__(self, kind: str, src, dst, axis: int, n: int) -> None:
        if src.size == 0:
            return
        order = memory_order(src)
        mem_src, mem_dst = src.transpose(order), dst.transpose(order)
        if order[-1] != axis or not (mem_src.flags.c_contiguous and mem_dst.flags.c_contiguous):
            raise ValueError(
                f"cuFFT lines must be contiguous along axis {axis}: got strides {src.strides} -> "
                f"{dst.strides}"
            )
        cufft, double = self._cufft, src.dtype in (np.float64, np.complex128)
        fft_type, direction = {
            "rfft": (cufft.CUFFT_D2Z if double else cufft.CUFFT_R2C, cufft.CUFFT_FORWARD),
            "irfft": (cufft.CUFFT_Z2D if double else cufft.CUFFT_C2R, cufft.CUFFT_INVERSE),
            "fft": (cufft.CUFFT_Z2Z if double else cufft.CUFFT_C2C, cufft.CUFFT_FORWARD),
            "ifft": (cufft.CUFFT_Z2Z if double else cufft.CUFFT_C2C, cufft.CUFFT_INVERSE),
        }[kind]
        batch = mem_src.size // mem_src.shape[-1]
        key = (fft_type, n, batch)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = cufft.Plan1d(n, fft_type, batch)
        plan.fft(mem_src, mem_dst, direction)


class PencilFFT:
    """A planned distributed 3-D real-to-complex FFT of ``nfields`` arrays at once.

    Collective: every rank constructs it with the same arguments. ``grid=(P0, P1)`` with
    P0 * P1 = the number of ranks (default :func:`default_grid`); ``layout``: "contiguous",
    "natural" or "auto" (see the module docstring). ``stream``: the CUDA stream the GPU work goes
    on (a cupy stream, or None for cupy's current one). ``host_fft``: "numpy" (numpy.fft, no extra
    dependency) or "fftw" (FFTW through pyFFTW, :class:`FFTWLines`). ``forward`` and ``backward``
    take and return tuples of ``nfields`` arrays (one array is accepted when ``nfields`` is 1).
    """

    def __init__(
        self,
        global_shape,
        grid=None,
        *,
        nfields: int = 1,
        dtype=np.float64,
        gpu: bool = False,
        layout: str = "auto",
        stream=None,
        host_fft: str = "numpy",
    ):
        ctx = context()
        self.rank, self.nranks = ctx.process_group.rank, ctx.process_group.nranks
        self.shape = tuple(int(n) for n in global_shape)
        if len(self.shape) != 3 or min(self.shape) < 1:
            raise ValueError(f"global_shape must be three positive extents, got {global_shape!r}")
        self.grid = tuple(grid) if grid is not None else default_grid(self.nranks)
        if len(self.grid) != 2 or self.grid[0] * self.grid[1] != self.nranks:
            raise ValueError(f"grid {self.grid} does not have {self.nranks} ranks (P0 * P1)")
        self.nfields = int(nfields)
        if host_fft not in ("numpy", "fftw"):
            raise ValueError(f"host_fft must be 'numpy' or 'fftw', got {host_fft!r}")
        if layout != "auto" and layout not in LAYOUTS:
            raise ValueError(f"layout must be 'auto' or one of {sorted(LAYOUTS)}, got {layout!r}")
        self.layout = ("contiguous" if gpu else AUTO_HOST_LAYOUT) if layout == "auto" else layout
        if gpu and self.layout != "contiguous":
            raise ValueError(f"cuFFT lines here must be contiguous: layout={layout!r} is host-only")
        self.lines = CuFFTLines() if gpu else (FFTWLines() if host_fft == "fftw" else HostLines())
        xp = self.xp = self.lines.xp
        self.real_dtype = np.dtype(dtype)
        self.complex_dtype = np.result_type(self.real_dtype, np.complex64)
        self.stream = stream
        self.spectral_shape = self.shape[:2] + (self.shape[2] // 2 + 1,)
        self._dists = {name: BlockNonCyclic(ProcessGrid(g(*self.grid))) for name, g in ORIENTATIONS.items()}

        self.physical_box = self.box("physical", self.shape)
        self.spectral_box = self.box("spectral", self.spectral_shape)
        self._exchanges: list[Redistribute] = []

        def zeros(shape, order):
            return self._fill(empty_in_order(xp, shape, self.complex_dtype, order))

        # forward: rfft along 2 into _a, then physical -> middle, fft along 1, middle -> spectral, fft along 0
        self._a = tuple(
            zeros(self.box("physical", self.spectral_shape).shape(), (0, 1, 2)) for _ in range(self.nfields)
        )
        self._fwd_mid, self._fwd_mid_buf = self._stage(self._a, "physical", "middle")
        self._fwd_spec, self._fwd_last = self._stage(self._fwd_mid_buf, "middle", "spectral")
        # backward: ifft along 0 into _c (laid out like the forward's last buffer), spectral -> middle,
        # ifft along 1, middle -> physical, irfft along 2
        self._c = tuple(zeros(b.shape, memory_order(b)) for b in self._fwd_last)
        self._bwd_mid, self._bwd_mid_buf = self._stage(self._c, "spectral", "middle")
        self._bwd_phys, self._bwd_last = self._stage(self._bwd_mid_buf, "middle", "physical")
        self._scale = None if self.lines.normalises else 1.0 / math.prod(self.shape)

    # --- set-up ------------------------------------------------------------------------------

    def box(self, orientation: str, global_shape) -> redist.Box:
        """This rank's box of ``global_shape`` in one of the three orientations."""
        return self._dists[orientation].box(self.rank, tuple(global_shape), nranks=self.nranks)

    def _fill(self, a):
        a[...] = 0
        return a

    def _stage(self, operands, src: str, dst: str):
        """(the exchange src -> dst with fixed operands, its persistent results); (None, operands)
        where the host can skip it: every rank's box is the same in both orientations."""
        same = all(
            self._dists[src].box(r, self.spectral_shape, nranks=self.nranks)
            == self._dists[dst].box(r, self.spectral_shape, nranks=self.nranks)
            for r in range(self.nranks)
        )
        if same and self.lines.strided:
            return None, operands
        r = Redistribute(
            tuple(operands),
            self._dists[src],
            self._dists[dst],
            options={"result_layout": LAYOUTS[self.layout][dst]},
        )
        r.plan(stream=self.stream)
        results = tuple(r.execute(stream=self.stream))  # persistent: the same arrays every execute
        self._exchanges.append(r)
        return r, results

    def describe(self) -> str:
        """One line: grid, orientations and which exchanges run."""
        names = ["physical->middle", "middle->spectral"]
        runs = [n for n, r in zip(names, (self._fwd_mid, self._fwd_spec)) if r is not None]
        return (
            f"global {self.shape} {self.real_dtype}, grid {self.grid[0]}x{self.grid[1]}, {self.nfields} field(s), "
            f"exchanges: {', '.join(runs) or 'none'} (and back), layout {self.layout}, "
            f"{type(self.lines).__name__}"
        )

    # --- arrays ------------------------------------------------------------------------------

    def physical_empty(self):
        """A tuple of ``nfields`` uninitialised real arrays of this rank's physical box."""
        return tuple(
            empty_in_order(self.xp, self.physical_box.shape(), self.real_dtype, (0, 1, 2))
            for _ in range(self.nfields)
        )

    def spectral_empty(self):
        """A tuple of ``nfields`` uninitialised complex arrays of this rank's spectral box, laid out
        like the forward's last buffer (the axis-0 lines contiguous where the exchanges made them so)."""
        return tuple(
            empty_in_order(self.xp, b.shape, self.complex_dtype, memory_order(b)) for b in self._fwd_last
        )

    def _fields(self, arrays, what: str) -> tuple:
        fields = (arrays,) if self.nfields == 1 and not isinstance(arrays, (tuple, list)) else tuple(arrays)
        if len(fields) != self.nfields:
            raise ValueError(f"{what}: expected {self.nfields} field(s), got {len(fields)}")
        return fields

    # --- transforms --------------------------------------------------------------------------

    def _exchange(self, r):
        if r is not None:
            r.execute(stream=self.stream)

    def forward(self, u, out=None):
        """Collective: rfftn of the distributed real field(s) ``u`` (physical boxes) into ``out``
        (spectral boxes; default new arrays, :meth:`spectral_empty`). Returns ``out`` (a tuple)."""
        u = self._fields(u, "forward")
        out = self.spectral_empty() if out is None else self._fields(out, "forward(out=)")
        n0, n1, n2 = self.shape
        for f in range(self.nfields):
            self.lines("rfft", u[f], self._a[f], 2, n2)
        self._exchange(self._fwd_mid)
        mid = self._fwd_mid_buf
        for f in range(self.nfields):
            self.lines("fft", mid[f], mid[f], 1, n1)
        self._exchange(self._fwd_spec)
        for f in range(self.nfields):
            self.lines("fft", self._fwd_last[f], out[f], 0, n0)
        return out

    def backward(self, u_hat, out=None):
        """Collective: irfftn of the distributed spectral field(s) ``u_hat`` (not modified) into
        ``out`` (physical boxes; default new arrays). Returns ``out`` (a tuple)."""
        u_hat = self._fields(u_hat, "backward")
        out = self.physical_empty() if out is None else self._fields(out, "backward(out=)")
        n0, n1, n2 = self.shape
        for f in range(self.nfields):
            self.lines("ifft", u_hat[f], self._c[f], 0, n0)
        self._exchange(self._bwd_mid)
        mid = self._bwd_mid_buf
        for f in range(self.nfields):
            self.lines("ifft", mid[f], mid[f], 1, n1)
        self._exchange(self._bwd_phys)
        for f in range(self.nfields):
            self.lines("irfft", self._bwd_last[f], out[f], 2, n2)
            if self._scale is not None:
                self.xp.multiply(out[f], self._scale, out=out[f])
        return out

    def release_captured(self) -> None:
        """The CUDA graphs that captured this plan's exchanges are destroyed (see docs/capture.md):
        :meth:`free` may then free what their recorded copies used."""
        for r in self._exchanges:
            r.release_captured()

    def free(self) -> None:
        """Collective: free the exchanges (their results with them)."""
        for r in self._exchanges:
            r.free()
        self._exchanges.clear()


# --- the command line: forward + backward of random data, checked, timed ---------------------


def gather(comm, local, box, global_shape, root: int = 0):
    """The global array on ``root`` (None elsewhere) from every rank's ``local`` piece of ``box``."""
    pieces = comm.gather((box.lower, box.upper, np.ascontiguousarray(local)), root=root)
    if comm.rank != root:
        return None
    full = np.empty(global_shape, dtype=local.dtype)
    for lo, hi, piece in pieces:
        full[tuple(slice(a, b) for a, b in zip(lo, hi))] = piece
    return full


def check(fft: PencilFFT, comm, seed: int) -> float:
    """Forward and backward of seeded random fields against numpy.fft.rfftn/irfftn of the gathered
    arrays; returns the worst relative error (the same on every rank)."""
    xp, lo, hi = fft.xp, fft.physical_box.lower, fft.physical_box.upper
    rng = np.random.default_rng(seed)
    glob = [rng.standard_normal(fft.shape).astype(fft.real_dtype) for _ in range(fft.nfields)]
    u = tuple(xp.asarray(np.ascontiguousarray(g[tuple(slice(a, b) for a, b in zip(lo, hi))])) for g in glob)
    u_hat = fft.forward(u)
    back = fft.backward(u_hat)
    err = 0.0
    for f in range(fft.nfields):
        host_hat = u_hat[f].get() if hasattr(u_hat[f], "get") else u_hat[f]
        host_back = back[f].get() if hasattr(back[f], "get") else back[f]
        spec = gather(comm, host_hat, fft.spectral_box, fft.spectral_shape)
        phys = gather(comm, host_back, fft.physical_box, fft.shape)
        if spec is not None and phys is not None:  # the root
            ref = np.fft.rfftn(glob[f])
            err = max(
                err,
                float(np.max(np.abs(spec - ref)) / np.max(np.abs(ref))),
                float(np.max(np.abs(phys - glob[f])) / np.max(np.abs(glob[f]))),
            )
    return comm.bcast(err, root=0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run under mpiexec: mpiexec -n P python examples/fft3d.py [options]",
    )
    ap.add_argument(
        "--shape",
        type=int,
        nargs="+",
        default=[64],
        metavar="N",
        help="global real shape N0 [N1 N2] (one value: a cube; default 64)",
    )
    ap.add_argument(
        "--grid", type=int, nargs=2, metavar=("P0", "P1"), help="process grid (default: MPI.Compute_dims)"
    )
    ap.add_argument("--fields", type=int, default=1, help="fields transformed together (default 1)")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--iters", type=int, default=10, help="timed forward+backward pairs (default 10)")
    ap.add_argument(
        "--layout",
        choices=["auto", *LAYOUTS],
        default="auto",
        help="exchange results: contiguous transform axes (result_layout) or C order; auto "
        "(default): contiguous on GPUs, natural on the host",
    )
    ap.add_argument(
        "--fft",
        choices=["numpy", "fftw"],
        default="numpy",
        help="host lines: numpy.fft (default) or FFTW through pyFFTW (pip install pyfftw)",
    )
    ap.add_argument("--gpu", action="store_true", help="cupy arrays and cuFFT, one GPU per rank")
    ap.add_argument("--no-check", action="store_true", help="skip the check against numpy.fft.rfftn")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    shape = args.shape * 3 if len(args.shape) == 1 else args.shape
    if len(shape) != 3:
        ap.error("--shape takes one or three extents")

    comm, stream = start(args.gpu)
    fft = PencilFFT(
        shape,
        args.grid,
        nfields=args.fields,
        dtype=args.dtype,
        gpu=args.gpu,
        layout=args.layout,
        stream=stream,
        host_fft=args.fft,
    )
    if comm.rank == 0:
        print(f"fft3d: {comm.size} rank(s), {fft.describe()}")
    status = 0
    if not args.no_check:
        tol = 1e-12 if fft.real_dtype == np.float64 else 1e-5
        err = check(fft, comm, args.seed)
        if comm.rank == 0:
            print(
                f"  check against numpy.fft.rfftn / irfftn of the gathered array: max relative error {err:.2e} "
                f"({'OK' if err <= tol else 'FAILED'}, tolerance {tol:g})"
            )
        status = 0 if err <= tol else 1
    u = fft.physical_empty()
    for a in u:
        a[...] = 1.0
    u_hat = fft.spectral_empty()
    sync = stream.synchronize if stream is not None else (lambda: None)
    times = []
    for it in range(args.iters + 1):
        comm.Barrier()
        t0 = time.perf_counter()
        fft.forward(u, out=u_hat)
        fft.backward(u_hat, out=u)
        sync()
        t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if it:  # the first pair is a warm-up
            times.append(t)
    if comm.rank == 0 and times:
        print(
            f"  forward + backward: median {statistics.median(times) * 1e3:.3f} ms, min {min(times) * 1e3:.3f} ms "
            f"over {len(times)} pairs (slowest rank)"
        )
    fft.free()
    return status


if __name__ == "__main__":
    sys.exit(main())
