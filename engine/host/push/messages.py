# SPDX-License-Identifier: Apache-2.0
"""Push's message route: calls with an ``out=`` that no peer can store into move their data as MPI
messages straight into every ``out=`` -- the message methods' exchange, run by an inner
:class:`~..executable.HostExecutable` (``hybrid``) over the same buffers."""

from __future__ import annotations

from ... import collective
from ..executable import AUTO_METHOD, HostExecutable


class MessageRoute:
    """The message route of :class:`~.executable.PushExecutable`."""

    def _make_inner(self) -> HostExecutable:
        """The message exchange of calls with an ``out=`` (local: lowering reserved its tags). This
        rank's status codes change with it: replays made before are forgotten."""
        self._forget_replays()
        tag, second, data_tags = self._inner_args
        inner = HostExecutable(self.plan, self.comm, AUTO_METHOD, tag, self._logger, second, data_tags,
                               results=self.results, agreed=True)
        if self._bound:
            inner.rebind_inputs(self._in_ptrs, self._in_owners)
        for f, buf in enumerate(self._outs):
            inner.bind_output(buf, f)
        return inner

    def _send_messages(self, rebuild: bool) -> None:
        """Some rank writes into an out=: the inner message exchange (agreed already)."""
        if rebuild:  # some rank builds its messages now (after the round): that can fail, so agree once more
            problem = None
            try:
                if self._inner is None:
                    self._inner = self._make_inner()
                problem = self._inner.prepare()
            except Exception as e:  # noqa: BLE001
                problem = collective.problem(e)
            collective.agree(self.comm, problem)
        self._inner.exchange()
