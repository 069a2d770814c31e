"""Scenarios from Python: load a TOML file, build one from a dict, modify one with
override paths (``"link[0].rate"``, ``"tc.router.script"``), validate it with the
loader's located errors. A Scenario is immutable: ``set`` and ``with_`` return a new
one. The text is edited in place (crates/qdisc-scenario/src/overrides.rs), so
lines an override does not touch keep their text and errors still point into it."""

import json
import os

from . import _native
from .errors import ScenarioError


class Scenario:
    """A scenario's TOML text and the name errors give it (``file``)."""

    __slots__ = ("_text", "file")

    def __init__(self, text, file="<string>"):
        self._text = text
        self.file = file

    @classmethod
    def load(cls, path):
        """Read a scenario file (not validated yet: see :meth:`validate`)."""
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ScenarioError(f"{path}: cannot read: {e.strerror}") from None
        try:
            return cls(data.decode("utf-8"), path)
        except UnicodeDecodeError as e:
            line = data[: e.start].count(b"\n") + 1
            raise ScenarioError(f"{path}:{line}: not UTF-8") from None

    @classmethod
    def from_toml(cls, text, file="<string>"):
        return cls(text, file)

    @classmethod
    def from_dict(cls, d, file="<dict>"):
        """A scenario from the dict form of its TOML (``to_dict``'s inverse):
        ``{"duration": "10s", "host": [{"name": "a"}, ...], "link": [...], ...}``."""
        return cls(_native.json_to_toml(json.dumps(d)), file)

    def set(self, path, value):
        """A copy with ``path`` set to ``value`` (bool, int, float, str, list, dict),
        validated: raises :class:`ScenarioError` naming the override."""
        return self.with_({path: value})

    def with_(self, overrides=None, **keys):
        """A copy with several overrides at once (validated together):
        ``s.with_({"link[0].rate": "10mbit"}, seed=3)`` — keyword arguments for
        top-level keys."""
        pairs = list((overrides or {}).items()) + list(keys.items())
        return Scenario(_native.load_scenario(self._text, self.file, pairs), self.file)

    def validate(self):
        """Check it with the loader; raises :class:`ScenarioError`. Returns self."""
        _native.load_scenario(self._text, self.file, [])
        return self

    def to_toml(self):
        return self._text

    def to_dict(self):
        return json.loads(_native.toml_to_json(self._text, self.file))

    @property
    def name(self):
        return self.to_dict().get("name")

    def __eq__(self, other):
        return isinstance(other, Scenario) and self._text == other._text

    def __hash__(self):
        return hash(self._text)

    def __repr__(self):
        return f"Scenario(file={self.file!r}, {len(self._text)} bytes)"


def as_scenario(s):
    """A Scenario from a Scenario, a path or a dict."""
    if isinstance(s, Scenario):
        return s
    if isinstance(s, dict):
        return Scenario.from_dict(s)
    if isinstance(s, (str, os.PathLike)):
        return Scenario.load(s)
    raise TypeError(f"{s!r}: not a Scenario, a path or a dict")
