"""Every shipped suite file parses to the same AblationSuite as before the typed schema replaced the
hand-written readers: ``data/suites_parsed.json`` holds the parse captured before the change (dataclasses,
mappings, lists and tuples tagged, so that a list turned tuple or a reordered mapping is a difference).

Regenerate (only when a suite file or the parsed form changes on purpose)::

    python tests/ablation/test_suite_parse_snapshot.py > tests/ablation/data/suites_parsed.json
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from harness.ablation.spec import list_suite_files, load_suite

SNAPSHOT = Path(__file__).parent / "data" / "suites_parsed.json"


def plain(obj: Any) -> Any:
    """A JSON form of a parsed suite that keeps types: dataclass names, tuples vs lists, mapping order."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__type__": type(obj).__name__,
                **{f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.compare}}
    if isinstance(obj, dict):
        return {"__dict__": [[plain(k), plain(v)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return {f"__{type(obj).__name__}__": [plain(x) for x in obj]}
    if isinstance(obj, Path):
        return {"__path__": obj.name}
    return obj


def snapshot() -> dict[str, Any]:
    return {name: plain(load_suite(path)) for name, path in list_suite_files().items()}


def _stored() -> dict[str, Any]:
    return json.loads(SNAPSHOT.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(list_suite_files()))
def test_shipped_suite_parses_as_before(name):
    stored = _stored()
    assert name in stored, f"suite {name!r} is new: regenerate {SNAPSHOT.name} (see the module docstring)"
    assert plain(load_suite(list_suite_files()[name])) == stored[name]


def test_snapshot_covers_every_shipped_suite():
    assert sorted(_stored()) == sorted(list_suite_files())


if __name__ == "__main__":
    data = snapshot()
    print("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(data.items()))
          + "\n}")
