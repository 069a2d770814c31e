#!/usr/bin/env python3
"""gen-htb-classes.py — write a scenario with an htb of N leaf classes (issue 18's size test).

Usage: scripts/gen-htb-classes.py N [DURATION] > htb-N.toml   (DURATION default "10s")

client -- router -- server, 1 Gbit/s NICs. The router's eth1 (towards the server) has
`htb default 2` with one inner class 1:1 and N leaf classes 1:10, 1:11, ... (hex minors),
each 1mbit ceil 1gbit with its default pfifo; the default class 1:2 gets what no filter
claims. A u32 hash table of 256 buckets keyed on the low byte of the UDP/TCP source port
holds one filter per leaf class (`match ip sport P`), so classification stays cheap
whatever N is. Traffic: 4 cubic TCP flows, 4 UDP streams of 20 Mbit/s, ping every 10 ms.

Deterministic: the same N gives the same file byte for byte.
"""

import sys


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[2])
    n = int(sys.argv[1])
    duration = sys.argv[2] if len(sys.argv) == 3 else "10s"
    if not 1 <= n <= 0xFFFF - 0x10:
        sys.exit(f"N must be 1 to {0xFFFF - 0x10} (class minors are 16 bits)")
    out = [
        f'name = "htb with {n} leaf classes"',
        f'duration = "{duration}"',
        "seed = 1",
        "",
        '[[host]]\nname = "client"\n',
        '[[host]]\nname = "router"\n',
        '[[host]]\nname = "server"\n',
        '[[link]]\nbetween = ["client:eth0", "router:eth0"]\nrate = "1gbit"\n',
        '[[link]]\nbetween = ["router:eth1", "server:eth0"]\nrate = "1gbit"\n',
        "[tc.router]",
        'script = """',
        "qdisc add dev eth1 root handle 1: htb default 2",
        "class add dev eth1 parent 1: classid 1:1 htb rate 1gbit",
        "class add dev eth1 parent 1:1 classid 1:2 htb rate 100mbit ceil 1gbit",
    ]
    for i in range(n):
        out.append(f"class add dev eth1 parent 1:1 classid 1:{i + 0x10:x} htb rate 1mbit ceil 1gbit")
    out += [
        "filter add dev eth1 parent 1: prio 1 handle 100: protocol ip u32 divisor 256",
        "filter add dev eth1 parent 1: prio 1 protocol ip u32 ht 800:: "
        "match ip protocol 17 0xff hashkey mask 0x000000ff at 20 link 100:",
    ]
    for i in range(n):
        port = 10000 + i
        out.append(
            f"filter add dev eth1 parent 1: prio 1 protocol ip u32 ht 100:{port & 0xFF:x}: "
            f"match ip sport {port} 0xffff flowid 1:{i + 0x10:x}"
        )
    out += [
        '"""',
        "",
        '[[traffic]]\nkind = "tcp"\nfrom = "client"\nto = "server"\nflows = 4\n',
        '[[traffic]]\nkind = "udp"\nfrom = "client"\nto = "server"\nrate = "20mbit"\nflows = 4\n',
        '[[traffic]]\nkind = "ping"\nfrom = "client"\nto = "server"\ninterval = "10ms"',
    ]
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
