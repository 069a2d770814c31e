"""Sweeps: row counts and columns, validation before any run, failed rows, retries of
dead workers, resume, Parquet, Dask, determinism, and the command line."""

import concurrent.futures as cf
import os
import subprocess
import sys
import threading

import pandas as pd
import pytest

import qdisc_lab
from qdisc_lab import ScenarioError

from conftest import BUFFERBLOAT, REPO

SCRIPTS = {
    "pfifo": "qdisc add dev eth0 root handle 1: htb default 10\n"
             "class add dev eth0 parent 1: classid 1:10 htb rate 100mbit\n"
             "qdisc add dev eth0 parent 1:10 handle 10: pfifo limit 1000\n",
    "fq_codel": "qdisc add dev eth0 root handle 1: htb default 10\n"
                "class add dev eth0 parent 1: classid 1:10 htb rate 100mbit\n"
                "qdisc add dev eth0 parent 1:10 handle 10: fq_codel\n",
}
GRID = {"link[0].rate": ["200mbit", "1gbit"], "tc.client.script": list(SCRIPTS.values())}
METRICS = ["throughput_mbps", "ping_p99_ms", "qdisc_drops"]


class Recording(cf.ThreadPoolExecutor):
    """A thread pool that counts what it was given."""

    def __init__(self):
        super().__init__(max_workers=2)
        self.submitted = []
        self.lock = threading.Lock()

    def submit(self, fn, *args, **kw):
        with self.lock:
            self.submitted.append(args)
        return super().submit(fn, *args, **kw)


def test_rows_and_columns(short):
    df = qdisc_lab.sweep(short, grid=GRID, seeds=range(1, 3), metrics=METRICS, executor=Recording())
    assert list(df.columns) == ["link[0].rate", "tc.client.script", "seed", "metric", "value", "error"]
    assert len(df) == 2 * 2 * 2 * 3
    assert df["error"].isna().all()
    # Grid order (first path slowest), then seed, then metric.
    assert df["link[0].rate"].tolist()[:12] == ["200mbit"] * 12
    assert df["seed"].tolist()[:6] == [1, 1, 1, 2, 2, 2]
    assert df["metric"].tolist()[:3] == METRICS
    # Each row is that run's own summary.
    one = df[(df["link[0].rate"] == "1gbit") & (df["tc.client.script"] == SCRIPTS["pfifo"]) & (df["seed"] == 2)]
    r = qdisc_lab.run(short.with_({"link[0].rate": "1gbit", "tc.client.script": SCRIPTS["pfifo"]}), seed=2)
    s = r.summary()
    assert dict(zip(one["metric"], one["value"])) == {m: s[m][0] for m in METRICS}


def test_process_pool_matches_threads_and_is_deterministic(short):
    grid = {"link[0].rate": ["200mbit", "1gbit"]}
    local = qdisc_lab.sweep(short, grid=grid, seeds=[1, 2], jobs=2)
    threads = qdisc_lab.sweep(short, grid=grid, seeds=[1, 2], executor=Recording())
    pd.testing.assert_frame_equal(local, threads)
    again = qdisc_lab.sweep(short, grid=grid, seeds=[1, 2], jobs=2)
    pd.testing.assert_frame_equal(local, again)


def test_bad_grid_refused_before_any_run(short):
    ex = Recording()
    with pytest.raises(ScenarioError) as e:
        qdisc_lab.sweep(short, grid={"link[0].rate": ["10mbit", "fast"]}, seeds=[1], executor=ex)
    assert str(e.value).startswith(f'override link[0].rate="fast": {BUFFERBLOAT}:21:8: link[0].rate: invalid rate')
    with pytest.raises(ScenarioError) as e:
        qdisc_lab.sweep(short, grid={"link[3].rate": ["10mbit"]}, seeds=[1], executor=ex)
    assert "index 3 out of range" in str(e.value)
    with pytest.raises(ScenarioError):
        qdisc_lab.sweep(short, grid={"traffic[0].flows": [2, "x"]}, seeds=[1], executor=ex)
    assert ex.submitted == []


def test_failed_run_is_a_row(short):
    grid = {"tc.client.script": ["qdisc add dev eth0 root pfifo", "qdisc add dev eth0 root pfifo limit nope"]}
    df = qdisc_lab.sweep(short, grid=grid, seeds=[1], metrics=METRICS, executor=Recording())
    ok, bad = df[df["error"].isna()], df[df["error"].notna()]
    assert len(ok) == 3 and len(bad) == 1
    assert bad["metric"].isna().all() and bad["value"].isna().all()
    assert 'pfifo: Illegal value for "limit": "nope"' in bad["error"].iloc[0]


SWEEP = sys.modules["qdisc_lab.sweep"]
_real_run_one = SWEEP._run_one


def _dying(text, *args):
    """A task that kills its worker process when its scenario has "limit 7"."""
    if "limit 7" in text:
        os._exit(3)
    return _real_run_one(text, *args)


class DyingWorkers(cf.Executor):
    """Runs tasks inline; the first `deaths[seed]` attempts of a seed die as a
    process pool's worker would."""

    def __init__(self, deaths):
        self.deaths, self.calls = dict(deaths), []

    def submit(self, fn, *args, **kw):
        seed = args[3]
        self.calls.append(seed)
        f = cf.Future()
        if self.deaths.get(seed, 0) > 0:
            self.deaths[seed] -= 1
            f.set_exception(cf.process.BrokenProcessPool("A process in the process pool was terminated abruptly"))
        else:
            f.set_result(fn(*args, **kw))
        return f


def test_dead_worker_retried_once_then_failed(short):
    ex = DyingWorkers({2: 1, 3: 5})
    df = qdisc_lab.sweep(short, seeds=[1, 2, 3], metrics=METRICS, executor=ex)
    assert sorted(ex.calls) == [1, 2, 2, 3, 3]
    runs = df.drop_duplicates("seed").set_index("seed")
    assert runs["error"].isna().tolist()[:2] == [True, True]
    assert runs.loc[3, "error"].startswith("worker failed twice: BrokenProcessPool")
    assert len(df) == 3 + 3 + 1


def test_a_real_dead_process_pool_is_replaced(short, monkeypatch):
    # A worker that exits mid-task breaks the pool: every task in it is retried on a
    # fresh pool; the one that kills its worker every time ends as a failed row.
    import multiprocessing
    if multiprocessing.get_start_method() != "fork":
        pytest.skip("needs the fork start method")
    grid = {"tc.client.script": ["qdisc add dev eth0 root pfifo", "qdisc add dev eth0 root pfifo limit 7"]}
    monkeypatch.setattr(SWEEP, "_run_one", _dying)  # forked workers see it
    df = qdisc_lab.sweep(short, grid=grid, seeds=[1], metrics=METRICS, jobs=1)
    runs = df.drop_duplicates(list(grid))
    assert runs["error"].isna().tolist() == [True, False]
    assert runs["error"].iloc[1].startswith("worker failed twice: BrokenProcessPool")


@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_resume_skips_finished_runs(short, tmp_path, ext):
    out = str(tmp_path / f"sweep.{ext}")
    grid = {"link[0].rate": ["200mbit", "1gbit"]}
    full = qdisc_lab.sweep(short, grid=grid, seeds=[1, 2, 3], metrics=METRICS, out=out, executor=Recording())
    written = pd.read_csv(out) if ext == "csv" else pd.read_parquet(out)
    assert len(written) == len(full) == 2 * 3 * 3
    # An interrupted sweep: only the first 2 runs had finished.
    part = written.iloc[:6]
    part.to_csv(out, index=False) if ext == "csv" else part.to_parquet(out, index=False)
    ex = Recording()
    resumed = qdisc_lab.sweep(short, grid=grid, seeds=[1, 2, 3], metrics=METRICS, out=out, executor=ex)
    assert len(ex.submitted) == 4
    assert {(a[3]) for a in ex.submitted} == {1, 2, 3}
    pd.testing.assert_frame_equal(resumed, full)
    final = pd.read_csv(out) if ext == "csv" else pd.read_parquet(out)
    assert len(final) == len(full)
    # Nothing left to do.
    ex = Recording()
    qdisc_lab.sweep(short, grid=grid, seeds=[1, 2, 3], metrics=METRICS, out=out, executor=ex)
    assert ex.submitted == []


def test_dask_local_cluster_matches_local_pool(short):
    distributed = pytest.importorskip("distributed")
    grid = {"link[0].rate": ["200mbit", "1gbit"], "traffic[0].flows": [1, 4]}
    local = qdisc_lab.sweep(short, grid=grid, seeds=[1, 2], jobs=2)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            distributed.Client(cl) as client:
        via_client = qdisc_lab.sweep(short, grid=grid, seeds=[1, 2], executor=client)
        via_executor = qdisc_lab.sweep(short, grid=grid, seeds=[1, 2], executor=client.get_executor())
        via_address = qdisc_lab.sweep(short, grid=grid, seeds=[1, 2], executor=cl.scheduler_address)
    pd.testing.assert_frame_equal(local, via_client)
    pd.testing.assert_frame_equal(local, via_executor)
    pd.testing.assert_frame_equal(local, via_address)


def qdisc_lab_cmd(*args):
    exe = os.path.join(os.path.dirname(sys.executable), "qdisc-lab")
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=REPO)


def test_cli_sweep(tmp_path):
    out = tmp_path / "s.csv"
    p = qdisc_lab_cmd("sweep", str(BUFFERBLOAT), "--set", "duration=1s", "--set", "link[0].rate=200mbit,1gbit",
                      "--seeds", "1..2", "--jobs", "2", "--metrics", "throughput_mbps,ping_p99_ms", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"4 runs (0 failed), 8 rows: {out}\n"
    df = pd.read_csv(out)
    assert list(df.columns) == ["duration", "link[0].rate", "seed", "metric", "value", "error"]
    assert sorted(set(df["link[0].rate"])) == ["1gbit", "200mbit"] and sorted(set(df["seed"])) == [1, 2]
    p = qdisc_lab_cmd("sweep", str(BUFFERBLOAT), "--set", "link[0].rate=fast")
    assert p.returncode == 2
    assert p.stderr.startswith(f'qdisc-lab sweep: override link[0].rate="fast": {BUFFERBLOAT}:21:8:')
    p = qdisc_lab_cmd("sweep", "--help")
    assert p.returncode == 0 and "--seeds" in p.stdout and "--dask" in p.stdout


def test_cli_passes_other_commands_to_rust():
    p = qdisc_lab_cmd("tc", "-s", "qdisc", "show")
    assert (p.returncode, p.stdout) == (0, "qdisc pfifo_fast 0: dev eth0 root refcnt 2 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\n"
                                           " Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"
                                           " backlog 0b 0p requeues 0\n")
    p = qdisc_lab_cmd("run", "--set", "link[0].rate=fast", str(BUFFERBLOAT))
    assert p.returncode == 2 and "invalid rate" in p.stderr
    p = qdisc_lab_cmd("frobnicate")
    assert p.returncode == 2 and "unrecognized subcommand" in p.stderr


def test_cargo_binary_hands_sweep_to_python(tmp_path):
    binary = REPO / "target" / "release" / "qdisc-lab"
    if not binary.exists():
        pytest.skip("no cargo-built qdisc-lab")
    env = dict(os.environ, QDISC_LAB_PYTHON=sys.executable)
    p = subprocess.run([str(binary), "sweep", "--help"], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stdout.startswith("usage: qdisc-lab sweep")
    env["QDISC_LAB_PYTHON"] = str(tmp_path / "no-python")
    p = subprocess.run([str(binary), "sweep", "x.toml"], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and 'pip install ".[dask,parquet]"' in p.stderr
