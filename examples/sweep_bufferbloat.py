"""Bufferbloat, swept: the bundled scenario (scenarios/bufferbloat-fq_codel.toml: 4 bulk
TCP flows and a ping through an htb shaper) with its leaf qdisc and shaping rate varied
over several seeds, on all local cores; then throughput against ping's 99th percentile
RTT, one point per run. A long FIFO fills and delays everything behind it; fq_codel
and the other AQMs keep the ping fast at the same throughput.

    python examples/sweep_bufferbloat.py [--small] [--out DIR]

writes DIR/bufferbloat-sweep.parquet (or .csv without pyarrow) and
DIR/bufferbloat-sweep.png. --small is the quick version CI runs."""

import argparse
import os
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import qdisc_lab  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]


def script(leaf, rate):
    """The scenario's htb shaper at `rate` with `leaf` under its one class."""
    return (f"qdisc add dev eth0 root handle 1: htb default 10\n"
            f"class add dev eth0 parent 1: classid 1:10 htb rate {rate}\n"
            f"qdisc add dev eth0 parent 1:10 handle 10: {leaf}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="2 leaves × 2 rates × 2 seeds of 2 s (CI)")
    ap.add_argument("--out", default=".", help="where to write the table and the plot")
    a = ap.parse_args()
    if a.small:
        leaves, rates, seeds, duration = ["pfifo limit 1000", "fq_codel"], ["20mbit", "100mbit"], range(1, 3), "2s"
    else:
        leaves = ["pfifo limit 1000", "fq_codel", "sfq", "pie", "cake"]
        rates, seeds, duration = ["10mbit", "50mbit", "100mbit"], range(1, 6), "10s"

    base = qdisc_lab.Scenario.load(REPO / "scenarios" / "bufferbloat-fq_codel.toml").set("duration", duration)
    scripts = {script(leaf, rate): (leaf.split()[0], rate) for leaf in leaves for rate in rates}
    os.makedirs(a.out, exist_ok=True)
    try:
        import pyarrow  # noqa: F401
        table = os.path.join(a.out, "bufferbloat-sweep.parquet")
    except ImportError:
        table = os.path.join(a.out, "bufferbloat-sweep.csv")
    df = qdisc_lab.sweep(base, grid={"tc.client.script": list(scripts)}, seeds=seeds, out=table,
                         metrics=["throughput_mbps", "ping_p99_ms"])
    failed = df[df["error"].notna()]
    if len(failed):
        raise SystemExit(f"{len(failed)} runs failed: {failed['error'].iloc[0]}")

    # One row per run: the grid's script back as leaf and rate.
    wide = df.pivot_table(index=["tc.client.script", "seed"], columns="metric", values="value").reset_index()
    wide["leaf"] = [scripts[s][0] for s in wide["tc.client.script"]]
    wide["rate"] = [scripts[s][1] for s in wide["tc.client.script"]]

    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    markers = dict(zip(rates, "o^sD"))
    colours = dict(zip([leaf.split()[0] for leaf in leaves], plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for (leaf, rate), g in wide.groupby(["leaf", "rate"], sort=False):
        ax.scatter(g["ping_p99_ms"], g["throughput_mbps"], marker=markers[rate], color=colours[leaf],
                   label=f"{leaf} @ {rate}", alpha=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("ping RTT, 99th percentile (ms, log scale)")
    ax.set_ylabel("TCP goodput, 4 flows (Mbit/s)")
    ax.set_title(f"Bufferbloat: htb shaper × leaf qdisc, {len(wide)} simulated runs of {duration}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    png = os.path.join(a.out, "bufferbloat-sweep.png")
    fig.savefig(png)
    print(wide.groupby(["leaf", "rate"])[["throughput_mbps", "ping_p99_ms"]].mean().round(2).to_string())
    print(f"{table}\n{png}")


if __name__ == "__main__":
    main()
