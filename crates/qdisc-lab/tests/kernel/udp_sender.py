#!/usr/bin/env python3
"""Constant-bitrate UDP flows for the kernel differential tests.

usage: udp_sender.py DST SECONDS PORT:BITS_PER_SECOND:PAYLOAD ...

Packets of every flow are scheduled on one timeline (no drift: send time k of a flow
is start + k * interval) and sent in time order from one socket per flow. Errors
from a full qdisc (ENOBUFS) are the point of the exercise and are ignored.
"""
import heapq
import socket
import sys
import time


def main():
    dst, seconds = sys.argv[1], float(sys.argv[2])
    flows = []
    for spec in sys.argv[3:]:
        port, bps, payload = (int(x) for x in spec.split(":"))
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        # Bytes the qdisc accounts: payload + UDP 8 + IPv4 20 + Ethernet 14.
        interval = (payload + 42) * 8 / bps
        flows.append((s, port, b"\0" * payload, interval))
    start = time.perf_counter()
    queue = [(start + i * 1e-4, i, 0) for i in range(len(flows))]
    end = start + seconds
    while queue:
        at, i, k = heapq.heappop(queue)
        if at >= end:
            continue
        while True:
            now = time.perf_counter()
            if now >= at:
                break
            if at - now > 0.0005:
                time.sleep(at - now - 0.0003)
        s, port, data, interval = flows[i]
        try:
            s.sendto(data, (dst, port))
        except OSError:
            pass
        heapq.heappush(queue, (start + (k + 1) * interval + i * 1e-4, i, k + 1))


if __name__ == "__main__":
    main()
