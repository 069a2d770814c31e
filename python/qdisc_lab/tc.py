"""The engine's tc over in-memory devices (``qdisc-lab tc``), and packet-level
stepping for notebooks: offer packets with :meth:`Tc.enqueue` and take them with
:meth:`Tc.dequeue` at times you choose (nanoseconds; nothing happens between calls —
the engine has no clock of its own)."""

import json as _json

from . import _native
from .errors import TcError


class Tc:
    """``Tc(devs=["eth0"], kernel=None, sysctl=None)``: devices as ``qdisc-lab tc
    --dev`` takes them (``"eth0,txqueues=4"``, ``"veth0,kind=veth"``), the kernel
    whose behaviour to follow (``"6.12"``, the default, or ``"6.18"``), and
    ``sysctl=["net.core.default_qdisc=fq_codel"]`` applied before they come up."""

    def __init__(self, devs=("eth0",), kernel=None, sysctl=None):
        self._tc = _native.Tc(list(devs), kernel, list(sysctl or []))
        self.stderr = ""

    def run(self, command, t_ns=None):
        """One tc command line, e.g. ``"qdisc add dev eth0 root fq_codel"`` (tc's
        global options may lead: ``"-s -j qdisc show"``), at virtual time ``t_ns``
        if given. Returns what tc prints; raises :class:`TcError` (tc's message and
        exit code). Warnings tc prints without failing are kept in ``self.stderr``."""
        out, err, code = self._tc.run(command, t_ns)
        return self._result(out, err, code)

    def batch(self, text, force=False):
        """``tc -batch`` of ``text`` (one command a line; ``-force`` goes on after a
        failing line). Returns what it printed; raises :class:`TcError`."""
        out, err, code = self._tc.batch(text, force)
        return self._result(out, err, code)

    def _result(self, out, err, code):
        self.stderr = err
        if code != 0:
            raise TcError(err, code)
        return out

    def show(self, what="qdisc", dev=None, json=False, stats=False, details=False):
        """``tc [-s] [-d] [-j] qdisc|class|filter show [dev DEV]``: the text, or with
        ``json=True`` the parsed JSON (a list)."""
        flags = (["-s"] if stats else []) + (["-d"] if details else []) + (["-j"] if json else [])
        cmd = " ".join(flags + [what, "show"] + (["dev", dev] if dev else []))
        out = self.run(cmd)
        if not json:
            return out
        # tc -j prints one array per device queried.
        dec, items, pos = _json.JSONDecoder(), [], 0
        while pos < len(out):
            while pos < len(out) and out[pos].isspace():
                pos += 1
            if pos == len(out):
                break
            v, pos = dec.raw_decode(out, pos)
            items.extend(v if isinstance(v, list) else [v])
        return items

    def enqueue(self, dev, t_ns, length=1000, **fields):
        """Offer a packet of ``length`` bytes to ``dev`` at ``t_ns`` as the stack does
        (``__dev_xmit_skb``). Fields: ``src``, ``dst`` (IP addresses), ``sport``,
        ``dport``, ``proto`` (6), ``priority``, ``mark``, ``tos``, ``hash`` (else the
        5-tuple's), ``id`` (else a counter), ``driver_idle`` (False: the driver is
        busy, so no bypass), ``frame`` (bytes: the frame from its Ethernet header on,
        which u32, the ematches and flower read when the packet has no addresses; its
        ethertype is the packet's protocol; bytes past it read as zeros). Returns "queued", "congested", "dropped", "stolen", or
        "direct" (sent to the driver without queueing: noqueue, or a bypass)."""
        return self._tc.enqueue(dev, t_ns, length, **fields)

    def dequeue(self, dev, t_ns, txq=0):
        """The next packet ``dev`` sends at ``t_ns`` (tx queue ``txq`` under mq) as a
        dict (id, length, priority, mark, tos, hash, enqueued_at_ns, ce, and the
        5-tuple if it had one), or None: then :attr:`watchdog` is the time a shaper
        may send again, or None if nothing is queued."""
        return self._tc.dequeue(dev, t_ns, txq)

    @property
    def watchdog(self):
        return self._tc.watchdog

    @property
    def devices(self):
        return self._tc.devices()
