"""The ``qdisc-lab`` command of the Python package: ``sweep`` is handled here; every
other subcommand (tc, replay, run, plot, compare) is the Rust command line, run
in-process (crates/qdisc-lab's ``main_with_args``)."""

import argparse
import json
import os
import sys

from . import _native
from .errors import ScenarioError


def _seeds(text):
    """``1..20`` (inclusive), ``1,5,9`` or ``7``."""
    try:
        if ".." in text:
            a, b = text.split("..", 1)
            a, b = int(a), int(b)
            if b < a:
                raise ValueError
            return list(range(a, b + 1))
        return [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: seeds are A..B, a list A,B,C or one number") from None


def _set(text):
    """``PATH=V1,V2,…``: each value a TOML literal if it is one, else a string."""
    path, eq, values = text.partition("=")
    if not eq or not path.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected PATH=V1,V2,... (e.g. link[0].rate=10mbit,100mbit)")
    return path.strip(), [json.loads(_native.literal_json(v)) for v in values.split(",")]


def sweep_main(argv):
    p = argparse.ArgumentParser(
        prog="qdisc-lab sweep",
        description="Run a scenario over a grid of overrides × seeds (in parallel) into one table: "
        "one row per run × metric, columns: the grid paths, seed, metric, value, error. "
        "An interrupted sweep resumes from its --out file.",
    )
    p.add_argument("scenario", help="the scenario file (docs/scenarios.md)")
    p.add_argument("--set", dest="sets", metavar="PATH=V1,V2", action="append", type=_set, default=[],
                   help="a grid axis: a scenario path and its values, e.g. link[0].rate=10mbit,100mbit "
                        "(repeatable; every combination runs)")
    p.add_argument("--seeds", type=_seeds, default=[1], metavar="A..B", help="seeds: A..B, A,B,C or N (default 1)")
    p.add_argument("--jobs", type=int, metavar="N", help="local worker processes (default: all cores)")
    p.add_argument("--dask", metavar="ADDRESS", help="run on this Dask scheduler (tcp://HOST:PORT) instead")
    p.add_argument("--backend", default="sim", choices=["sim", "host", "vm"], help="where each run runs (default sim)")
    p.add_argument("--kernel", help="with --backend vm: the kernel to boot")
    p.add_argument("--metrics", metavar="M1,M2", help="keep only these metrics")
    p.add_argument("--out", metavar="FILE", help="write the table here (.parquet or .csv); default: CSV on stdout")
    a = p.parse_args(argv)
    if a.jobs is not None and a.jobs < 1:
        p.error("--jobs must be at least 1")
    if a.dask and a.jobs:
        p.error("--jobs is for the local pool; with --dask the cluster's workers run")
    if a.out and not (a.out.endswith(".parquet") or a.out.endswith(".csv")):
        p.error(f"--out {a.out}: write .parquet or .csv")
    from .sweep import sweep

    try:
        df = sweep(a.scenario, grid=dict(a.sets), seeds=a.seeds, executor=a.dask, out=a.out,
                   metrics=a.metrics.split(",") if a.metrics else None, progress=sys.stderr.isatty() or None,
                   backend=a.backend, kernel=a.kernel, jobs=a.jobs)
    except ScenarioError as e:
        print(f"qdisc-lab sweep: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nqdisc-lab sweep: interrupted" + (f"; rerun to resume from {a.out}" if a.out else ""), file=sys.stderr)
        return 130
    keys = [k for k, _ in a.sets] + ["seed"]
    runs = df.drop_duplicates(keys)
    failed = int(df.drop_duplicates(keys)["error"].notna().sum())
    if a.out:
        print(f"{len(runs)} runs ({failed} failed), {len(df)} rows: {a.out}")
    else:
        df.to_csv(sys.stdout, index=False)
    for err in df["error"].dropna().unique()[:5]:
        print(f"qdisc-lab sweep: a run failed: {err}", file=sys.stderr)
    return 1 if failed else 0


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "sweep":
        return sweep_main(args[1:])
    return _native.main(args)
