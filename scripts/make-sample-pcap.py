#!/usr/bin/env python3
"""make-sample-pcap.py — write examples/mixed.pcap, the sample traffic for `qdisc-lab replay`.

Usage: scripts/make-sample-pcap.py [OUTPUT]   (default: examples/mixed.pcap next to this repo)

About 5 s of egress traffic on one Ethernet link, chosen so a shaper with a
priority scheduler below it has something to sort out (about 14 Mbit/s offered):

  flow                                   frames         rate         IP TOS  skb priority
  bulk TCP 10.0.0.1:40001 > :5201        1514 B         ~6 Mbit/s    0x00    0 (best effort)
  bulk TCP 10.0.0.1:40002 > :5201        1514 B         ~6 Mbit/s    0x00    0
  VoIP UDP 10.0.0.2:16384 > :16384        218 B / 20 ms  87 kbit/s   0xb8 EF 4 (interactive bulk)
  SSH  TCP 10.0.0.3:50022 > :22          66-170 B       keystrokes   0x10    6 (interactive)
  bulk UDP 10.0.0.4:40004 > :9000        1442 B         ~2 Mbit/s    0x08    2 (bulk)

(skb priority is what the kernel's ip_forward sets: rt_tos2priority(tos).)

Classic pcap, microsecond timestamps, linktype 1 (Ethernet), snaplen 96: frames are
stored truncated to 96 bytes (headers only) with their true orig_len, as
`tcpdump -s 96` would store them. Deterministic: its own xorshift PRNG with a fixed
seed, fixed start time, stdlib only — rerunning it reproduces the file byte for byte.
"""

import os
import struct
import sys

SNAPLEN = 96
DURATION_US = 5_000_000
EPOCH = 1_700_000_000  # fixed capture start (seconds), so the file is reproducible


class XorShift:
    """xorshift64*: a tiny PRNG whose output does not depend on the Python version."""

    def __init__(self, seed):
        self.s = seed or 1

    def next(self):
        s = self.s
        s ^= (s >> 12)
        s ^= (s << 25) & 0xFFFFFFFFFFFFFFFF
        s ^= (s >> 27)
        self.s = s
        return (s * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF

    def uniform(self, lo, hi):
        """An integer in [lo, hi]."""
        return lo + self.next() % (hi - lo + 1)


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(src, dst, proto, tos, ident, payload_len):
    """A 20-byte IPv4 header (valid header checksum) for a datagram of payload_len."""
    total = 20 + payload_len
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, tos, total, ident & 0xFFFF, 0x4000, 64, proto, 0,
                      bytes(src), bytes(dst))
    return hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:]


def frame(flow, frame_len, seq):
    """An Ethernet frame of frame_len bytes (without FCS) for `flow`."""
    eth = bytes([0x02, 0, 0, 0, 0, 0x02]) + bytes([0x02, 0, 0, 0, 0, 0x01]) + struct.pack("!H", 0x0800)
    ip_len = frame_len - 14
    if flow["proto"] == 6:
        l4_len = 20
        l4 = struct.pack("!HHIIBBHHH", flow["sport"], flow["dport"], seq & 0xFFFFFFFF, 1,
                         5 << 4, 0x18, 502, 0, 0)  # ACK|PSH, checksum left 0
    else:
        l4_len = 8
        l4 = struct.pack("!HHHH", flow["sport"], flow["dport"], ip_len - 20, 0)
    assert ip_len >= 20 + l4_len, (flow, frame_len)
    ip = ipv4(flow["src"], flow["dst"], flow["proto"], flow["tos"], seq, ip_len - 20)
    data = eth + ip + l4
    return data + bytes(frame_len - len(data))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "examples", "mixed.pcap")
    rng = XorShift(0x5EED_0F_0DD5)

    def flow(src, dst, proto, sport, dport, tos):
        return dict(src=src, dst=dst, proto=proto, sport=sport, dport=dport, tos=tos)

    bulk1 = flow([10, 0, 0, 1], [10, 0, 1, 1], 6, 40001, 5201, 0x00)
    bulk2 = flow([10, 0, 0, 1], [10, 0, 1, 1], 6, 40002, 5201, 0x00)
    voip = flow([10, 0, 0, 2], [10, 0, 1, 2], 17, 16384, 16384, 0xB8)
    ssh = flow([10, 0, 0, 3], [10, 0, 1, 3], 6, 50022, 22, 0x10)
    bulk_udp = flow([10, 0, 0, 4], [10, 0, 1, 4], 17, 40004, 9000, 0x08)

    events = []  # (time_us, order, flow, frame_len, seq)

    def cbr(f, frame_len, interval_us, jitter_us, phase_us):
        """Constant bit rate with a little send-side jitter (a sender is never exact)."""
        t, seq, n = phase_us, 1, 0
        while t < DURATION_US:
            at = max(0, t + rng.uniform(0, 2 * jitter_us) - jitter_us)
            events.append((at, len(events), f, frame_len, seq))
            seq += frame_len - 54
            n += 1
            t = phase_us + n * interval_us

    # 1514 B every 2019 us ~ 6.0 Mbit/s each.
    cbr(bulk1, 1514, 2019, 150, 0)
    cbr(bulk2, 1514, 2019, 150, 1000)
    # G.711-ish: 160 B voice + RTP(12) + UDP + IP + Ethernet = 218 B every 20 ms.
    cbr(voip, 218, 20_000, 300, 3_000)
    # 1442 B every 5768 us ~ 2.0 Mbit/s.
    cbr(bulk_udp, 1442, 5768, 200, 500)
    # SSH: keystrokes 20-80 ms apart, small frames (one echo, sometimes a screen update).
    t, seq = 7_000, 1
    while t < DURATION_US:
        frame_len = 66 + 36 if rng.uniform(0, 9) else 66 + rng.uniform(40, 104)
        events.append((t, len(events), ssh, frame_len, seq))
        seq += frame_len - 54
        t += rng.uniform(20_000, 80_000)

    events.sort(key=lambda e: (e[0], e[1]))
    with open(out, "wb") as fh:
        # magic, v2.4, thiszone, sigfigs, snaplen, linktype 1 (Ethernet)
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, SNAPLEN, 1))
        for at, _, f, frame_len, seq in events:
            data = frame(f, frame_len, seq)[:SNAPLEN]
            fh.write(struct.pack("<IIII", EPOCH + at // 1_000_000, at % 1_000_000, len(data), frame_len))
            fh.write(data)
    print("wrote %s: %d frames, %d bytes" % (os.path.normpath(out), len(events), os.path.getsize(out)))


if __name__ == "__main__":
    main()
