# SPDX-License-Identifier: Apache-2.0
"""redist.torch's eager calls that record the gradient (P = 1, each in a fresh process: this one must
not start MPI): they go through redist.torch._Eager rather than the operator's autograd, with the
operator's values and gradients to the bit. A no-op TorchFunctionMode sends a call through torch's
dispatcher (the operator), as any mode does."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from helpers import NO_TORCH, have_torch

pytestmark = pytest.mark.skipif(not have_torch(), reason=NO_TORCH)

PRELUDE = textwrap.dedent(
    """
    import torch
    from torch.overrides import TorchFunctionMode

    import redist
    import redist.torch as rt
    from redist import Slab

    redist.initialize(device_id="cpu")
    G = (6, 5, 4)
    OPTIONS = {"result_layout": (0, 2, 1)}
    EAGER = rt._Eager._backward_cls
    gen = torch.Generator().manual_seed(0)


    class Dispatched(TorchFunctionMode):  # changes nothing, but the call goes through the operator
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))


    def rand(dtype=torch.float64, grad=False):
        return torch.randn(G, dtype=dtype, generator=gen).requires_grad_(grad)


    def call(t, dispatched):
        if not dispatched:
            return rt.redistribute(t, Slab.X, Slab.Y, global_shape=G, options=OPTIONS)
        with Dispatched():
            return rt.redistribute(t, Slab.X, Slab.Y, global_shape=G, options=OPTIONS)


    def same(a, b):
        return all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(a, b, strict=True))
    """
)


def run(body: str) -> None:
    script = PRELUDE + textwrap.dedent(body) + "\nredist.finalize()\nprint('OK')\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stdout + done.stderr


def test_eager_call_with_gradient_goes_through_the_function():
    run(
        """
        x = rand(grad=True)
        assert type(call(x, False).grad_fn) is EAGER, call(x, False).grad_fn
        assert type(call(x, True).grad_fn) is not EAGER  # the mode reaches the operator
        with torch.no_grad():
            assert call(x, False).grad_fn is None
        assert call(x.detach(), False).grad_fn is None
        with torch.inference_mode(), torch.enable_grad():  # records nothing, as torch's own operators there
            assert call(x, False).grad_fn is None and (x * 2).grad_fn is None
        """
    )


def test_gradients_equal_the_operators():
    run(
        """
        for fields in ([rand(grad=True)], [rand(grad=True), rand(torch.complex128)],
                       [rand(torch.complex128), rand(grad=True), rand(torch.float32, grad=True)]):
            ys = {d: call(tuple(fields), d) for d in (False, True)}
            assert same(ys[False], ys[True])
            assert all(y.requires_grad for y in ys[False] + ys[True])  # each output, as the operator's
            seeds = [torch.randn(y.shape, dtype=y.dtype, generator=gen) for y in ys[False]]
            wanted = [t for t in fields if t.requires_grad]
            grads = {d: torch.autograd.grad(ys[d], wanted, seeds) for d in ys}
            assert same(grads[False], grads[True]), fields
            one = {d: torch.autograd.grad(ys[d][-1].abs().sum(), wanted) for d in ys}  # zeros for the rest
            assert same(one[False], one[True])
        x = rand(torch.complex128, grad=True)
        seed = rand(torch.complex128)
        assert same(*(torch.autograd.grad(call(x, d), x, seed) for d in (False, True)))
        """
    )


def test_double_backward_equals_the_operators():
    run(
        """
        x, v, w = rand(grad=True), rand(grad=True), rand()
        out = {}
        for d in (False, True):
            g, = torch.autograd.grad(call(x, d), x, v, create_graph=True)
            assert g.requires_grad and type(g.grad_fn) is not EAGER
            out[d] = (g, *torch.autograd.grad(g, v, w))
        assert same(out[False], out[True])
        """
    )


def test_compiled_autograd_traces_the_operator():
    run(
        """
        from torch._dynamo import compiled_autograd

        x = rand(grad=True)
        loss = (call(x, False) ** 2).sum()
        with compiled_autograd._enable(torch.compile(backend="eager", fullgraph=True)):
            loss.backward()
        assert torch.equal(x.grad, 2 * x.detach())
        """
    )


def test_closure_tensor_under_a_torch_func_transform_takes_the_operator():
    # A tensor that requires grad but that the transform does not wrap (a closure's) is not refused;
    # torch would refuse the Function (it has no setup_context) on the ranks under the transform only.
    run(
        """
        h = rand(grad=True) * 2  # computed outside the transforms
        s = torch.tensor(1.5, dtype=torch.float64)
        out = {}
        for d in (False, True):
            grad = torch.func.grad(lambda s: call(h, d).sum() * s)(s)
            batched = torch.func.vmap(lambda s: call(h, d).sum() * s)(torch.ones(2, dtype=torch.float64))
            tangent = torch.func.jvp(lambda s: call(h, d).sum() * s, (s,), (s,))[1]
            out[d] = [t.detach() for t in (grad, batched, tangent)]
        assert same(out[False], out[True])
        total = h.detach().sum()
        assert torch.allclose(out[False][0], total) and torch.allclose(out[False][1], total.expand(2))
        assert torch.allclose(out[False][2], total * 1.5)
        """
    )
