"""Parameter sweeps: a scenario × a grid of overrides × seeds, run on any
``concurrent.futures.Executor`` (a local process pool by default, or Dask), into one
tidy DataFrame: one row per run × metric, with columns

    <each grid path>, seed, metric, value, error

(``metric``/``value`` from the run's summary, crates/qdisc-py/src/summary.rs; a run
that failed is one row with metric and value empty and ``error`` its message).

How it behaves:
* Every grid point is applied to the scenario and validated before any run starts;
  a bad path or value raises ScenarioError with the loader's located message.
* Workers run the simulator in their own process and send back only the summary
  rows, not whole results.
* A task whose worker died (a broken process pool, a Dask KilledWorker, a lost
  connection) is retried once — on a fresh pool when the pool is ours — then reported
  as a failed row.
* With ``out`` (.parquet or .csv), rows are written as runs finish (CSV: appended per
  run; Parquet: rewritten at most once a second and at the end), so an interrupted
  sweep resumes from the file: runs already there without an error are skipped.
"""

import concurrent.futures as cf
import itertools
import math
import os
import sys
import time

import pandas as pd

from . import _native
from .errors import RunError, ScenarioError
from .scenario import as_scenario

FIXED = ["seed", "metric", "value", "error"]


def _run_one(text, file, backend, seed, kernel, metrics):
    """A worker's task: one run → ([(metric, value)], error or None)."""
    try:
        rows = _native.run_summary(text, file, backend, seed, kernel)
    except (RunError, ScenarioError) as e:
        return [], str(e)
    except Exception as e:  # anything else a run raises is that run's failure
        return [], f"{type(e).__name__}: {e}"
    if metrics is not None:
        rows = [r for r in rows if r[0] in metrics]
    return rows, None


def _key(values, seed):
    """How a run is recognised in an output file (values read back from CSV may
    have changed type: compare as text)."""
    return tuple(str(v) for v in values) + (str(int(seed)),)


def _resolve_executor(executor, jobs):
    """(executor, factory to make a fresh one or None, things to close at the end)."""
    if executor is None:
        n = jobs or os.cpu_count() or 1

        def factory():
            return cf.ProcessPoolExecutor(max_workers=n)

        return factory(), factory, []
    if isinstance(executor, cf.Executor):
        return executor, None, []
    if isinstance(executor, str):
        from distributed import Client

        client = Client(executor)
        return client.get_executor(pure=False), None, [client]
    if hasattr(executor, "get_executor"):  # a dask.distributed Client
        # Not pure: a retried task must run again, not return its failed key's result.
        return executor.get_executor(pure=False), None, []
    raise TypeError(f"executor={executor!r}: not a concurrent.futures.Executor, a dask Client or an address")


class _Progress:
    """count/total, rate and ETA on stderr, one line redrawn."""

    def __init__(self, total, stream=None):
        self.total, self.stream, self.t0 = total, stream or sys.stderr, time.monotonic()

    def __call__(self, done, total):
        el = time.monotonic() - self.t0
        rate = done / el if el > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else math.inf
        w = 30
        fill = int(w * done / total) if total else w
        eta_s = "--:--" if math.isinf(eta) else f"{int(eta) // 60:02d}:{int(eta) % 60:02d}"
        self.stream.write(f"\r\x1b[K[{'#' * fill}{' ' * (w - fill)}] {done}/{total} runs  {rate:.1f} runs/s  ETA {eta_s}")
        if done == total:
            self.stream.write("\n")
        self.stream.flush()


def _read_out(out):
    if out.endswith(".parquet"):
        return pd.read_parquet(out)
    return pd.read_csv(out, keep_default_na=False, na_values=[""])


def _write_parquet(df, out):
    tmp = out + ".tmp"
    df.to_parquet(tmp, index=False)
    os.replace(tmp, out)


def sweep(scenario, grid=None, seeds=(1,), executor=None, out=None, metrics=None, progress=None,
          backend="sim", kernel=None, jobs=None):
    """Run ``scenario`` for every combination of ``grid`` ({path: [values]}, paths as
    in Scenario.set) and every seed; returns the tidy DataFrame described above, in
    grid order (the first path varies slowest), then seed, then metric.

    ``executor``: None (a process pool of ``jobs`` workers, default all cores), any
    ``concurrent.futures.Executor``, a ``dask.distributed.Client`` (its
    ``get_executor()``), or a Dask scheduler address. ``out``: a .parquet or .csv
    file, written as runs finish and resumed from. ``metrics``: the metric names to
    keep (default all). ``progress``: True for a bar on stderr, or a callable
    ``(done, total)``."""
    base = as_scenario(scenario)
    grid = dict(grid or {})
    paths = list(grid)
    for p in paths:
        if p in FIXED:
            raise ScenarioError(f"grid path {p!r} clashes with the column of that name; use a scenario path")
    seeds = [int(s) for s in seeds]
    metrics = set(metrics) if metrics is not None else None
    if out is not None:
        out = os.fspath(out)
        if not (out.endswith(".parquet") or out.endswith(".csv")):
            raise ValueError(f"out={out!r}: write .parquet or .csv")

    # Every grid point validated before any run starts.
    points = []
    for values in itertools.product(*(list(grid[p]) for p in paths)):
        text = _native.load_scenario(base.to_toml(), base.file, list(zip(paths, values)))
        points.append((values, text))
    tasks = [(values, text, seed) for values, text in points for seed in seeds]

    # Resume: runs already in the output file without an error are skipped.
    done_rows = {}
    if out is not None and os.path.exists(out):
        old = _read_out(out)
        missing = [c for c in paths + FIXED if c not in old.columns]
        if missing:
            raise ValueError(f"{out}: not this sweep's output (no column {', '.join(missing)})")
        for key, g in old.groupby([*paths, "seed"], sort=False, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            if g["error"].isna().all():
                done_rows[_key(key[:-1], key[-1])] = list(zip(g["metric"], g["value"]))
    results = {}  # task index -> (rows, error)
    for i, (values, _, seed) in enumerate(tasks):
        k = _key(values, seed)
        if k in done_rows:
            results[i] = (done_rows[k], None)

    def frame(indices):
        rows = []
        for i in indices:
            values, _, seed = tasks[i]
            mrows, err = results[i]
            if err is not None:
                rows.append([*values, seed, None, math.nan, err])
            else:
                rows.extend([*values, seed, m, float(v), None] for m, v in mrows)
        df = pd.DataFrame(rows, columns=paths + FIXED)
        df["seed"] = df["seed"].astype("int64")
        df["value"] = df["value"].astype("float64")
        df["metric"] = df["metric"].astype("object")
        df["error"] = df["error"].astype("object")
        return df

    todo = [i for i in range(len(tasks)) if i not in results]
    total = len(tasks)
    report = _Progress(total) if progress is True else (progress or None)

    # The output file starts as what is kept of it (failed rows dropped: they rerun).
    if out is not None:
        kept = frame(sorted(results))
        if out.endswith(".csv"):
            kept.to_csv(out, index=False)
        else:
            _write_parquet(kept, out)
    last_write = time.monotonic()

    def record(i):
        nonlocal last_write
        if out is None:
            return
        if out.endswith(".csv"):
            frame([i]).to_csv(out, mode="a", header=False, index=False)
        elif time.monotonic() - last_write >= 1.0:
            _write_parquet(frame(sorted(results)), out)
            last_write = time.monotonic()

    ex, factory, closers = _resolve_executor(executor, jobs)
    try:
        if report:
            report(len(results), total)
        attempts = {i: 0 for i in todo}
        pending = todo
        while pending:
            futures = {}
            for i in pending:
                values, text, seed = tasks[i]
                futures[ex.submit(_run_one, text, base.file, backend, seed, kernel, metrics)] = i
            retry = []
            for fut in cf.as_completed(futures):
                i = futures[fut]
                try:
                    results[i] = fut.result()
                except Exception as e:  # the worker, not the run: died, lost, cancelled
                    attempts[i] += 1
                    if attempts[i] < 2:
                        retry.append(i)
                        continue
                    results[i] = ([], f"worker failed twice: {type(e).__name__}: {e}")
                record(i)
                if report:
                    report(len(results), total)
            if retry and factory is not None:
                # A process pool whose worker died is broken for good: a fresh one.
                ex.shutdown(wait=False, cancel_futures=True)
                ex = factory()
            pending = sorted(retry)
    finally:
        if factory is not None:
            ex.shutdown(wait=True, cancel_futures=True)
        for c in closers:
            c.close()
        if out is not None and out.endswith(".parquet") and results:
            _write_parquet(frame(sorted(results)), out)
    return frame(range(total))
