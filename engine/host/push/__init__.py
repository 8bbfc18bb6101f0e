# SPDX-License-Identifier: Apache-2.0
"""Host push: on one node, each rank stores its part straight into its peers' results.

The engine-owned result of every rank lives in a shared-memory segment of its own (a file in
``/dev/shm``, mapped by its owner and by every rank that sends to it, unlinked as soon as they
all have), so a sender copies (numpy, one pass, no MPI datatype, no staging) from its operand
into the destination's result, like the GPU push kernel does over NVLink. One copy per element
instead of MPI's two for strided regions, and no rendezvous.

One execute, on every rank (:class:`.status.StatusRound`):

1. send a zero-byte *status* to every other rank, its tag what this rank says about the call:
   it failed, or it is well and whether it writes into an ``out=`` of its own; receive every
   other rank's. Now every rank is in this execute (so it is done reading its previous result:
   the status is also the credit) and knows whether any rank failed. If one did, every rank
   raises the same error and nobody has written a byte anywhere: a failed call changes no
   result and no ``out=``, on any rank;
2. no rank has an ``out=``: store into each destination's result, send it a zero-byte
   *arrival*, copy the local part, wait for the arrivals of every source: the result is
   complete. MPI's messages order the stores: a sender stores, then sends; the receiver reads
   after the receive (the release/acquire of MPI's own shared-memory queues);
3. some rank has an ``out=``: a peer cannot store into private memory, and the engine-owned
   result must stay as it was (``execute(out=...)`` never touches it), so

   * small exchanges (every rank's receive staging at most :data:`.tuning.LANDING_MAX` bytes): the
     peers store into a *landing* area behind the results in its segment (the plan's receive
     staging, a slot per source) instead, and the rank copies its slots into ``out=`` after
     the arrivals; its local part goes straight into ``out=``. Two copies of the remote part,
     but no rendezvous: cheaper than any message while latency dominates. Where no rank
     receives anything (at any number of ranks up to COMPLETE_MAX) this is just the local
     copies into ``out=``;
     Exchanges where some rank receives at least :data:`.tuning.DIRECT_SMALL_MIN` copy across memories
     instead, as below, on any MPI (:data:`.tuning.DIRECT_SMALL`); a rank whose ``out=`` cannot be copied
     into (strided) still lands, in the same call;
   * larger ones, on Open MPI (:data:`.tuning.DIRECT`: there its messages into ``out=`` are the slower
     route; on MPICH they are the faster one, perf/RESULTS.md), where every pair of ranks can use
     Linux cross-memory attach (checked once, when the object is planned) and every run of the
     exchange is at least :data:`.tuning.DIRECT_MIN_RUN` bytes: a rank whose every ``out=`` is laid out like its result
     writes the ``out=`` addresses into its segment and says so in its status (*direct*); the
     peers store their parts straight into that ``out=`` with ``process_vm_writev`` (one copy,
     by the sender, as into a result), and into the results of the ranks without an ``out=``;
     arrivals as above. Where a pair's runs make fewer stretches in the sender's operand than in
     the destination (the kernel pins the remote side's pages per iovec), the destination reads
     them instead, with ``process_vm_readv`` from the operand addresses the sender keeps in its
     segment, written by every call (decided per pair when planned). Every direct call ends with one small Allreduce,
     which each rank enters after its copies: it tells every rank whether a copy failed, and a
     sender returns (and may change its operand) only once every reader is done. Each element
     moves once and no message carries data;
   * wherever a rank's every ``out=`` lies in host symmetric memory (engine/host/symmetric.py:
     ``redist.allocate_symmetric_memory(shape, numpy)``, mapped by every rank of the node) and is
     laid out like its result, it says *shared*, with the allocation's id beside each address in
     its segment; its peers store into their own mapping of that ``out=``, as into a result. One
     copy per element and no system call, at any size and on any MPI (the Allreduce of direct
     calls only where some rank said *direct*);
   * otherwise: the call moves its data as MPI messages straight into every ``out=`` (and
     into the results of the ranks that have none) -- the message methods' exchange, run by an
     inner :class:`~.executable.HostExecutable` (``hybrid``) over the same buffers; the local
     part is copied straight into ``out=``. Each element moves once. A rank whose inner
     executable must first be built for its binding says so in its status; then the ranks
     agree once more (a build can fail) before any data moves.

Cross-memory attach needs the ranks to be allowed to copy from and into each other (the same user; Yama
``ptrace_scope`` 0, or 1 with the target's consent, which each rank gives at plan time with
``prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`` as Open MPI's CMA transport does; no seccomp filter
blocking ``process_vm_writev`` or ``process_vm_readv``). Where one pair cannot, every rank uses the messages.

Jobs of more than :data:`~.executable.COMPLETE_MAX` ranks replace the status messages by one
small Allreduce (the same agreement, the same credit); their calls with an ``out=`` never copy
directly (the Allreduce carries no per-rank codes).

**Lifetimes are local.** A segment is plain shared memory, not an MPI object: nothing about it
is collective after lowering. The executable holds its own segment and its mappings of its
peers'; the result arrays hold the own segment too, so a result the user keeps past ``free()``
or ``redist.finalize()`` stays a valid array with the last execute's data, and the memory goes
back to the system when the last of them is dropped. ``free()`` and garbage collection release
everything else at once, on any rank, in any order.

The package, one module per route (each a part of :class:`~.executable.PushExecutable`):
``executable`` (set-up, binding, the status round, lifetime), ``store`` (stores into the peers'
results), ``land`` (small calls with an ``out=``: the landing), ``shared`` (an ``out=`` in host
symmetric memory), ``cross_memory`` (copies across memories), ``messages`` (the inner message
exchange), ``replay`` (the words of the compiled replays); ``segment`` (the shared segments, their
headers, :func:`push_problem`), ``codes`` (the status codes), ``tuning`` (the routes' thresholds).
"""

from .executable import PushExecutable
from .segment import push_problem

__all__ = ["PushExecutable", "push_problem"]
