# SPDX-License-Identifier: Apache-2.0
"""Where an eager or compiled redist.torch call's host time goes on the CPU (issue #45).

    mpiexec -n 1 python perf/probe_torch_call.py [N]

Slab.X -> Slab.Y of an N^3 complex128 tensor (default 8: the exchange is a small copy, the rest is
the adapter), P = 1, µs per call (median of 5 runs of 5,000 calls):

* ``execute(out=fresh)``: ``Redistribute.execute(out=torch.empty(...))``, every check of an out=;
* ``entry.run``: the cached entry's run (rebinding the operand, a fresh tensor bound as the
  adapter binds it, the exchange);
* ``kernel``: the operator's Python kernel (the plan cache's lookup and ``entry.run``);
* ``torch.ops.redist.redistribute``: the kernel through torch's dispatcher (autograd included);
* ``redistribute``: the whole eager call; ``compiled``: it inside ``torch.compile(fullgraph=True)``;
* ``empty op: custom_op`` / ``empty op: Library``: an operator of the same schema whose kernel
  returns one small tensor, defined with ``torch.library.custom_op`` and with ``torch.library.Library``
  (``register_fake``, ``register_autograd``), eager and compiled: why redist.torch uses the latter.
"""

from __future__ import annotations

import sys

import torch
from host_timing import per_call_us

import redist
import redist.torch as adapter
from redist import Slab


def empty_ops():
    """The two registrations of an empty operator: {name: (eager, compiled)} callables."""

    def kernel(fields, a, b, o, g):
        return [torch.empty(4, 4)]

    def fake(fields, a, b, o, g):
        return [torch.empty(4, 4)]

    def backward(ctx, grads):
        return list(grads), None, None, None, None

    @torch.library.custom_op("redist_probe::custom", mutates_args=())
    def custom(fields: list[torch.Tensor], a: list[int], b: list[int], o: int, g: bool) -> list[torch.Tensor]:
        return kernel(fields, a, b, o, g)

    custom.register_fake(fake)
    custom.register_autograd(backward)
    lib = torch.library.Library("redist_probe", "FRAGMENT")
    lib.define("low(Tensor[] fields, SymInt[] a, SymInt[] b, SymInt o, bool g) -> Tensor[]")  # custom_op's schema
    lib.impl("low", kernel, "CompositeExplicitAutograd")
    torch.library.register_fake("redist_probe::low", fake, lib=lib)
    torch.library.register_autograd("redist_probe::low", backward, lib=lib)
    x = torch.randn(4, 4)
    ops = {"custom_op": torch.ops.redist_probe.custom.default, "Library": torch.ops.redist_probe.low.default}
    rows = {}
    for name, op in ops.items():
        compiled = torch.compile(lambda t, op=op: op([t], [0], [0], 0, False)[0], fullgraph=True)
        rows[name] = (lambda op=op: op([x], [0], [0], 0, False), lambda compiled=compiled: compiled(x))
    return rows, lib


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    redist.initialize("cpu")
    g = (n, n, n)
    X, Y = Slab.X.bind(g), Slab.Y.bind(g)
    x = torch.randn(Slab.X.shape(0, g), dtype=torch.complex128)
    adapter.redistribute(x, X, Y)  # plans the cache's entry
    codes = adapter._resolve(adapter._plain(X), adapter._plain(Y), None, None, 3)
    ins, outs, opts = list(codes[0]), list(codes[1]), codes[2]
    key = ("forward", tuple(ins), tuple(outs), adapter._fingerprints[opts], False, adapter._field_key([x]))
    entry = adapter._cache.get(key, None)  # a hit (the call above planned it)
    r = entry.r
    shape = r.output_box.box_shape
    compiled = torch.compile(lambda t: adapter.redistribute(t, X, Y), fullgraph=True)
    rows = {
        "execute(out=fresh)": lambda: r.execute(out=torch.empty(shape, dtype=x.dtype)),
        "entry.run": lambda: entry.run([x]),
        "kernel": lambda: adapter._redistribute_kernel([x], ins, outs, opts, False),
        "torch.ops.redist.redistribute": lambda: torch.ops.redist.redistribute([x], ins, outs, opts, False),
        "redistribute": lambda: adapter.redistribute(x, X, Y),
        "compiled": lambda: compiled(x),
    }
    empties, _lib = empty_ops()
    for name, (eager, comp) in empties.items():
        rows[f"empty op: {name}"] = eager
        rows[f"empty op: {name}, compiled"] = comp
    print(f"probe_torch_call: P = 1, {n}^3 complex128, torch {torch.__version__}, host µs per call")
    for name, fn in rows.items():
        print(f"  {name:<34} {per_call_us(fn, 5000, warm=100):8.2f}")
    adapter.clear_cache()
    redist.finalize()


if __name__ == "__main__":
    main()
