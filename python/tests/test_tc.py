"""The engine's tc and packet stepping from Python, with hand-computed values."""

import pytest

from qdisc_lab import Tc, TcError


def test_tbf_hand_stepped():
    # 8 Mbit/s = 1 byte/µs; burst 1500 bytes = 1.5 ms of tokens; limit 3000 bytes.
    tc = Tc()
    tc.run("qdisc add dev eth0 root tbf rate 8mbit burst 1500 limit 3000")
    verdicts = [tc.enqueue("eth0", 0, length=1000, src="10.0.0.1", dst="10.0.0.2", sport=1, dport=2)
                for _ in range(4)]
    assert verdicts == ["queued", "queued", "queued", "dropped"]
    p = tc.dequeue("eth0", 0)  # the burst pays for the first
    assert (p["id"], p["length"], p["src"], p["dst"], p["sport"], p["dport"], p["proto"]) == \
        (0, 1000, "10.0.0.1", "10.0.0.2", 1, 2, 6)
    assert tc.watchdog is None
    # 0.5 ms of tokens left, 1 ms needed: throttled until 0.5 ms.
    assert tc.dequeue("eth0", 1) is None
    assert tc.watchdog == 500_000
    assert tc.dequeue("eth0", 499_999) is None and tc.watchdog == 500_000
    assert tc.dequeue("eth0", 500_000)["id"] == 1
    assert tc.dequeue("eth0", 1_000_000) is None and tc.watchdog == 1_500_000
    assert tc.dequeue("eth0", 1_500_000)["id"] == 2
    assert tc.dequeue("eth0", 9_000_000) is None and tc.watchdog is None
    st = tc.show(json=True, stats=True)[0]
    assert (st["kind"], st["bytes"], st["packets"], st["drops"], st["backlog"], st["qlen"]) == \
        ("tbf", 3000, 3, 1, 0, 0)


def test_pfifo_limit_order_and_stats_text():
    tc = Tc()
    tc.run("qdisc add dev eth0 root pfifo limit 2")
    assert [tc.enqueue("eth0", 0, length=100 * (i + 1)) for i in range(3)] == ["queued", "queued", "dropped"]
    assert [tc.dequeue("eth0", 5)["length"] for _ in range(2)] == [100, 200]
    assert tc.dequeue("eth0", 5) is None and tc.watchdog is None
    assert tc.show(stats=True) == (
        "qdisc pfifo 8001: dev eth0 root refcnt 2 limit 2p\n"
        " Sent 300 bytes 2 pkt (dropped 1, overlimits 0 requeues 0) \n"
        " backlog 0b 0p requeues 0\n"
    )


def test_prio_bands_by_priority():
    # prio's priomap sends priority 6 (TC_PRIO_INTERACTIVE) to band 0, 0 to band 1.
    tc = Tc()
    tc.run("qdisc add dev eth0 root handle 1: prio")
    tc.enqueue("eth0", 0, length=100, priority=0, id=10)
    tc.enqueue("eth0", 0, length=100, priority=6, id=11)
    assert [tc.dequeue("eth0", 1)["id"] for _ in range(2)] == [11, 10]


def test_tc_errors_in_tcs_words():
    tc = Tc()
    with pytest.raises(TcError) as e:
        tc.run("qdisc add dev eth9 root pfifo")
    assert (e.value.message, e.value.exit_code) == ('Cannot find device "eth9"\n', 1)
    with pytest.raises(TcError) as e:
        tc.run("qdisc add dev eth0 root fq_codel bogus")
    assert e.value.message.startswith('What is "bogus"?\nUsage: ... fq_codel\t[ limit PACKETS ]')
    assert e.value.exit_code == 1
    with pytest.raises(TcError) as e:
        Tc(devs=["eth0,mtu=x"])
    assert e.value.exit_code == 2
    with pytest.raises(KeyError):
        tc.enqueue("eth7", 0)


def test_batch_and_devices():
    tc = Tc(devs=["eth0", "eth1,txqueues=2"], sysctl=["net.core.default_qdisc=fq_codel"])
    assert tc.devices == ["eth0", "eth1"]
    out = tc.batch("qdisc replace dev eth0 root pfifo limit 5\nqdisc show dev eth0\n")
    assert out == "qdisc pfifo 8001: root refcnt 2 limit 5p\n"  # tc omits the dev it was asked for
    kinds = [q["kind"] for q in tc.show(dev="eth1", json=True)]
    assert kinds == ["mq", "fq_codel", "fq_codel"]
    with pytest.raises(TcError) as e:
        tc.batch("qdisc add dev eth0 root pfifo\nqdisc show\n")
    assert "Command failed -:1" in e.value.message


def test_classifiers_read_a_frame_without_addresses():
    # An AF_PACKET-like frame: broadcast, from 02:00:00:00:00:01, ethertype 0x88b5.
    # u32 reads from the network header (offset 14), so -8 is the source MAC's first
    # four bytes; a key past the frame's end (84 + 4 > 100 - 14) ends that filter and
    # the next one is tried.
    frame = bytes([0xFF] * 6 + [0x02, 0, 0, 0, 0, 0x01, 0x88, 0xB5])
    tc = Tc()
    tc.run("qdisc add dev eth0 root handle 1: prio bands 4")
    tc.run("filter add dev eth0 parent 1: protocol all prio 1 u32 match u32 0 0xffffffff at 84 flowid 1:1")
    tc.run("filter add dev eth0 parent 1: protocol all prio 2 u32 match u32 0x02000000 0xffffffff at -8 flowid 1:3")
    tc.enqueue("eth0", 0, length=100, frame=frame, id=1)  # band 2 (1:3)
    tc.enqueue("eth0", 0, length=100, id=2)  # no bytes to read: priomap's band 1
    tc.enqueue("eth0", 0, length=100, frame=frame, id=3)  # band 2
    assert [tc.dequeue("eth0", 0)["id"] for _ in range(3)] == [2, 1, 3]
