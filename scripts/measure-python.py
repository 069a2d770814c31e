"""Measures (does not assert) the Python package's costs on this machine:

1. per-run overhead of the Python API (``run(...).summary()``) and of the sweep
   machinery (a 1-worker process pool) beyond the run itself (``_native.run_summary``
   in-process, the GIL released);
2. 100 runs of scenarios/bufferbloat-fq_codel.toml on 2 local workers vs 1;
3. the same on a Dask LocalCluster of 2 worker processes vs the 2-worker local pool.

    python scripts/measure-python.py [--runs 100]

Prints the load average with the numbers: the machine may be shared."""

import argparse
import os
import pathlib
import resource
import time

import qdisc_lab
from qdisc_lab import _native

REPO = pathlib.Path(__file__).resolve().parents[1]


def timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    a = ap.parse_args()
    s = qdisc_lab.Scenario.load(REPO / "scenarios" / "bufferbloat-fq_codel.toml")
    text = s.validate().to_toml()
    seeds = range(1, a.runs + 1)
    print(f"load average before: {os.getloadavg()}")

    # 1. Overhead per run: the three ways interleaved, same seeds, the minimum of each
    # (the least disturbed by other load on the machine).
    n = 20
    bare, api, api_json = [], [], []
    for i in range(1, n + 1):
        bare.append(timed(lambda: _native.run_summary(text, s.file, "sim", i, None)))
        api.append(timed(lambda: qdisc_lab.run(s, seed=i).summary()))
        api_json.append(timed(lambda: qdisc_lab.run(s, seed=i).json))
    bare, api, api_json = min(bare), min(api), min(api_json)
    pool1 = min(timed(lambda: qdisc_lab.sweep(s, seeds=[1], jobs=1)) for _ in range(3))
    print(f"run itself (in-process, min of {n}):           {bare * 1e3:7.1f} ms")
    print(f"run(...).summary()  overhead:                {(api - bare) * 1e3:+7.1f} ms")
    print(f"run(...).json (1.1 MB parsed) overhead:      {(api_json - bare) * 1e3:+7.1f} ms")
    print(f"sweep of 1 run on a fresh 1-worker pool:      {(pool1 - bare) * 1e3:+7.1f} ms "
          "(validation, pool start-up, transfer, DataFrame)")

    # 2. Local pool: 2 workers vs 1. The workers' CPU time per wall second says how much
    # of the machine they got (2.0 = two whole cores): on a shared machine, the ceiling.
    def pool(jobs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = timed(lambda: qdisc_lab.sweep(s, seeds=seeds, jobs=jobs))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return t, cpu

    (t1, c1), (t2, c2) = pool(1), pool(2)
    print(f"{a.runs} runs, local pool 1 worker: {t1:6.2f} s ({c1 / t1:.2f} CPUs busy); "
          f"2 workers: {t2:6.2f} s ({c2 / t2:.2f} CPUs busy); speed-up {t1 / t2:.2f}x")

    # 3. Dask LocalCluster of 2 worker processes vs the local pool.
    try:
        import distributed
    except ImportError:
        print("dask: not installed (pip install '.[dask]')")
        return
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cl, distributed.Client(cl) as client:
        qdisc_lab.sweep(s, seeds=range(1, 3), executor=client)  # warm the workers
        td = timed(lambda: qdisc_lab.sweep(s, seeds=seeds, executor=client))
    print(f"{a.runs} runs, Dask LocalCluster 2 workers: {td:6.2f} s; vs local pool of 2: {td / t2 - 1:+.1%}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
