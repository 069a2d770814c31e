"""qdisc-lab from Python: the Linux packet scheduler in userspace.

* :class:`Tc` — the engine's tc over in-memory devices, and packet stepping.
* :class:`Scenario` — a scenario (TOML), loaded, built or modified, validated.
* :func:`run` — run one on a backend ("sim", "host", "vm") → :class:`Result`.
* :func:`sweep` — a grid × seeds of runs on a process pool or Dask → one DataFrame.

See docs/python.md.
"""

from ._native import __version__
from .errors import RunError, ScenarioError, TcError
from .result import Result, run
from .scenario import Scenario
from .sweep import sweep
from .tc import Tc

__all__ = ["Tc", "Scenario", "Result", "run", "sweep", "TcError", "ScenarioError", "RunError", "__version__"]
