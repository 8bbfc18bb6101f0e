# SPDX-License-Identifier: Apache-2.0
"""A distributed spectral convolution (the core of a Fourier neural operator layer), trained with
torch.compile: FFT along the local axes, redistribute, FFT along the remaining axis, multiply by
learnable weights, and back.

The field lives on X-slabs; each rank holds the Y-slab of the weights (axis 0 whole there, where
the last FFT runs). ``redist.torch.redistribute`` is differentiable (its backward is the adjoint
redistribution) and compiles without a graph break, so the whole forward step is one compiled
graph and ``loss.backward()`` runs the redistributions backwards. The loss curve is checked
against a one-process run of the same layer on the whole array (float64, to 1e-10).

    mpiexec -n 4 python examples/fno_layer.py                        # 32 x 24 x 16, 5 steps, inductor
    mpiexec -n 3 python examples/fno_layer.py --shape 9 7 5 --backend aot_eager
    mpiexec -n 2 python examples/fno_layer.py --gpu                  # one GPU per rank
"""

from __future__ import annotations

import argparse
import math
import sys

# the [torch] extra (CI's wheel check type-checks the examples without torch)
import torch  # pyright: ignore[reportMissingImports]
from mpi4py import MPI

import redist
import redist.torch
from redist import Slab


def global_field(shape, seed: int) -> torch.Tensor:
    """The whole input (or target) array, the same on every rank (seeded)."""
    return torch.rand(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def global_weights(shape) -> torch.Tensor:
    gen = torch.Generator().manual_seed(7)
    return 1 + 0.1 * torch.randn(shape, dtype=torch.complex128, generator=gen)


class SpectralConv(torch.nn.Module):
    """y = IFFT(W · FFT(x)) on X-slabs of a 3-D field; W is learnable, held on Y-slabs."""

    def __init__(self, shape, rank: int, device) -> None:
        super().__init__()
        self.x, self.y = Slab.X.bind(shape), Slab.Y.bind(shape)  # bound: compiled code knows every box
        box = self.y.box(rank)
        mine = tuple(slice(lo, hi) for lo, hi in zip(box.lower, box.upper))
        self.weight = torch.nn.Parameter(global_weights(shape)[mine].to(device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = torch.fft.fftn(x, dim=(1, 2))  # axes 1 and 2 are whole on X-slabs
        f = redist.torch.redistribute(
            f, self.x, self.y, options={"result_layout": (1, 2, 0)}
        )  # axis 0 contiguous
        f = torch.fft.fft(f, dim=0) * self.weight
        f = torch.fft.ifft(f, dim=0)
        f = redist.torch.redistribute(f, self.y, self.x)
        return torch.fft.ifftn(f, dim=(1, 2)).real


def reference_losses(shape, steps: int, lr: float) -> list[float]:
    """The same layer and optimizer in one process, on the whole array."""
    x, target = global_field(shape, 1), global_field(shape, 2)
    weight = torch.nn.Parameter(global_weights(shape))
    opt = torch.optim.SGD([weight], lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        y = torch.fft.ifftn(torch.fft.fftn(x) * weight).real
        loss = ((y - target) ** 2).sum()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[32, 24, 16])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.5, help="learning rate times the number of elements")
    parser.add_argument(
        "--backend", default="inductor", help="torch.compile backend (inductor, aot_eager, eager)"
    )
    parser.add_argument("--gpu", action="store_true", help="one GPU per rank (default: CPU)")
    args = parser.parse_args()
    shape = tuple(args.shape)

    redist.initialize(device_id=None if args.gpu else "cpu")
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    ctx = redist.get_context()
    assert ctx is not None  # after redist.initialize()
    # device_id: the GPU redist picked for this rank, or None when it runs CPU-only
    device = torch.device("cpu") if ctx.device_id is None else torch.device("cuda", ctx.device_id)
    box = Slab.X.box(rank, shape)
    mine = tuple(slice(lo, hi) for lo, hi in zip(box.lower, box.upper))
    x, target = global_field(shape, 1)[mine].to(device), global_field(shape, 2)[mine].to(device)

    layer = SpectralConv(shape, rank, device)
    lr = args.lr / math.prod(shape)  # the loss sums every element
    opt = torch.optim.SGD(layer.parameters(), lr=lr)

    def local_loss(x, target):
        return ((layer(x) - target) ** 2).sum()

    step = torch.compile(local_loss, fullgraph=True, backend=args.backend)
    losses = []
    for _ in range(args.steps):
        opt.zero_grad()
        loss = step(x, target)  # this rank's part of the loss; the global loss is the sum
        loss.backward()  # collective: the redistributions' adjoints
        opt.step()
        losses.append(comm.allreduce(float(loss.detach())))
    want = reference_losses(shape, args.steps, lr)
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, want))
    if rank == 0:
        for i, (a, b) in enumerate(zip(losses, want)):
            print(f"step {i}: loss {a:.12e}  one process {b:.12e}")
        print(f"{comm.Get_size()} rank(s), {shape}, {args.backend}: max relative difference {worst:.2e}")
    redist.finalize()
    return 0 if worst <= 1e-10 else 1


if __name__ == "__main__":
    sys.exit(main())
