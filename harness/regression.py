"""Regression checks against stored scores (expected numbers next to the command that makes them).

Expectation files live in ``suites/expected/<suite>.yaml`` (format in that folder's
README).  Each entry names a ``harness`` command with an ``{out}`` placeholder for
its result directory, the expected aggregate metrics, and who recorded them, when
and at which commit.  :func:`check_entry` runs the command (or reuses a complete
result directory) and compares every metric under one central tolerance policy:

========  =================================================================
OK        equal when both are rounded to ``EXACT_DECIMALS`` (4) decimals
OKish     not OK, but ``|actual - expected| <= tolerance``
IMPROVED  better than expected by more than the tolerance: reported and
          treated as a failure until re-recorded or explicitly accepted
FAIL      worse than expected by more than the tolerance, or the protocol
          card changed (fingerprint differs)
ERROR     the command failed, wrote no result, or lacks a metric
========  =================================================================

The tolerance of a metric is, in order: the entry's ``tolerance`` for it,
``METRIC_TOLERANCES`` (this module, by full name such as ``recall@1000`` or by
family such as ``recall``), else ``DEFAULT_TOLERANCE``.  Every metric the harness
reports is higher-is-better, so "better" means larger.
"""
from __future__ import annotations

import datetime as _dt
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError, InputError
from harness.io import OutputExistsError, atomic_write
from harness.io.paths import check_component, child_of
from harness.io.results_layout import MANIFEST_FILE
from harness.method.portable import shared_root
from harness.store import git_commit, is_result_dir, load_result

EXACT_DECIMALS = 4
DEFAULT_TOLERANCE = 0.002
# Per-metric overrides of the default (full name or family).  Empty: no metric has
# earned a wider band yet; add one here, with the reason, rather than in an entry.
METRIC_TOLERANCES: dict[str, float] = {}

OK, OKISH, IMPROVED, FAIL, ERROR = "OK", "OKish", "IMPROVED", "FAIL", "ERROR"
_SEVERITY = {OK: 0, OKISH: 1, IMPROVED: 2, FAIL: 3, ERROR: 4}
FILE_VERSION = 1
_ENTRY_KEYS = {"id", "command", "result", "metrics", "tolerance", "card_fingerprint", "card", "recorded",
               "environment", "note"}
_RECORDED_KEYS = ("by", "at", "commit")
OUT, SHARED = "{out}", "{shared}"


def expected_dir() -> Path:
    """The project's expectation folder, ``suites/expected`` (beside the ``harness`` package)."""
    return Path(__file__).resolve().parents[1] / "suites" / "expected"


def default_shared_root() -> Path:
    """The real-data root substituted for ``{shared}``: ``$HARNESS_SHARED_DATA`` or ``../shared/data`` (the one
    definition, :func:`harness.method.portable.shared_root`)."""
    return shared_root()


@dataclass
class Expectation:
    """One expected result: the command that produces it and the numbers it must reproduce."""

    suite: str
    id: str
    command: list[str]
    metrics: dict[str, float]
    result: str | None = None
    tolerance: dict[str, float] = field(default_factory=dict)
    card_fingerprint: str | None = None
    # The recorded protocol card's scoring fields: when the fingerprint differs, the check names the fields.
    card: dict[str, Any] = field(default_factory=dict)
    recorded: dict[str, str] = field(default_factory=dict)
    # Library versions the recorded result was produced under (its manifest's ``versions``): when a number
    # moves, `harness check` prints how today's environment differs from this one.
    environment: dict[str, str] = field(default_factory=dict)
    note: str | None = None
    source: Path | None = None
    line: int | None = None

    @property
    def key(self) -> str:
        return f"{self.suite}/{self.id}"

    def to_yaml_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "command": list(self.command)}
        if self.result:
            out["result"] = self.result
        out["metrics"] = dict(self.metrics)
        for name in ("tolerance", "card_fingerprint", "card", "note"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        out["recorded"] = dict(self.recorded)
        if self.environment:
            out["environment"] = dict(self.environment)
        return out


def tolerance_for(metric: str, overrides: dict[str, float] | None = None) -> float:
    """The tolerance of ``metric`` under the central policy (see the module docstring)."""
    if overrides and metric in overrides:
        return float(overrides[metric])
    family = metric.split("@", 1)[0]
    for key in (metric, family):
        if key in METRIC_TOLERANCES:
            return METRIC_TOLERANCES[key]
    return DEFAULT_TOLERANCE


def classify(expected: float, actual: float, tolerance: float) -> str:
    """OK, OKish, IMPROVED or FAIL for one metric (higher is better)."""
    if f"{actual:.{EXACT_DECIMALS}f}" == f"{expected:.{EXACT_DECIMALS}f}":
        return OK
    diff = actual - expected
    if abs(diff) <= tolerance + 1e-12:
        return OKISH
    return IMPROVED if diff > 0 else FAIL


# ------------------------------------------------------------------ reading expectation files

def _number(value: Any, path: Path, line: int, what: str, nonneg: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (nonneg and value < 0):
        raise InputError(path, f"{what} must be a {'non-negative ' if nonneg else ''}number, got {value!r}", line)
    return float(value)


def _entry(raw: Any, suite: str, path: Path, line: int) -> Expectation:
    if not isinstance(raw, dict):
        raise InputError(path, "each entry must be a mapping", line)
    unknown = sorted(set(raw) - _ENTRY_KEYS)
    if unknown:
        raise InputError(path, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_ENTRY_KEYS))}", line)
    ident = raw.get("id")
    if not isinstance(ident, str) or not ident.strip():
        raise InputError(path, "entry needs a non-empty string 'id'", line)
    try:  # the id names the entry's folder under the results root: it must stay inside it
        check_component(ident, "entry id")
    except ConfigError as exc:
        raise InputError(path, str(exc), line) from None
    command = raw.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        raise InputError(path, f"entry {ident!r}: 'command' must be a non-empty list of strings", line)
    if not any(OUT in a for a in command):
        raise InputError(path, f"entry {ident!r}: 'command' must write its result to {OUT}", line)
    metrics = raw.get("metrics")
    if not isinstance(metrics, dict) or not metrics:
        raise InputError(path, f"entry {ident!r}: 'metrics' must map metric names to expected values", line)
    tolerance = raw.get("tolerance") or {}
    if not isinstance(tolerance, dict):
        raise InputError(path, f"entry {ident!r}: 'tolerance' must map metric names to numbers", line)
    recorded = raw.get("recorded")
    if not isinstance(recorded, dict) or any(not recorded.get(k) for k in _RECORDED_KEYS):
        raise InputError(path, f"entry {ident!r}: 'recorded' must give by, at and commit "
                               "(store expectations with `harness check record`)", line)
    environment = raw.get("environment") or {}
    if not isinstance(environment, dict) or not all(isinstance(v, str) for v in environment.values()):
        raise InputError(path, f"entry {ident!r}: 'environment' must map package names to version strings", line)
    card = raw.get("card") or {}
    if not isinstance(card, dict):
        raise InputError(path, f"entry {ident!r}: 'card' must map protocol card fields to their values", line)
    result = raw.get("result")
    if result is not None:
        if not isinstance(result, str) or not result or result.startswith("/"):
            raise InputError(path, f"entry {ident!r}: 'result' must be a relative path inside {OUT}", line)
        try:  # a relative path below {out}: every part one safe component
            for part in result.split("/"):
                check_component(part, f"entry {ident!r}: a part of 'result'")
        except ConfigError as exc:
            raise InputError(path, f"{exc} ('result' is a relative path inside {OUT})", line) from None
    return Expectation(
        suite=suite, id=ident, command=list(command),
        metrics={str(m): _number(v, path, line, f"expected {m}") for m, v in metrics.items()},
        result=result, tolerance={str(m): _number(v, path, line, f"tolerance of {m}", True)
                                  for m, v in tolerance.items()},
        card_fingerprint=raw.get("card_fingerprint"), card=dict(card),
        recorded={k: str(v) for k, v in recorded.items()},
        environment={str(k): v for k, v in environment.items()}, note=raw.get("note"), source=path, line=line)


def load_expectations(path: str | Path) -> list[Expectation]:
    """Parse and validate one expectation file; errors name the file and line."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(path, f"invalid YAML: {getattr(exc, 'problem', exc)}",
                         mark.line + 1 if mark else None) from None
    if data is None:
        return []
    if not isinstance(data, dict) or not isinstance(data.get("entries", []), list):
        raise InputError(path, "expected a mapping with 'version', optional 'suite' and a list 'entries'", 1)
    if data.get("version", FILE_VERSION) != FILE_VERSION:
        raise InputError(path, f"unsupported version {data.get('version')!r} (this harness reads {FILE_VERSION})", 1)
    suite = data.get("suite") or path.stem
    assert isinstance(root, yaml.MappingNode)   # the same text loaded as a dict above
    lines = {}
    suite_line = 1
    for key_node, value_node in root.value:
        if key_node.value == "entries" and isinstance(value_node, yaml.SequenceNode):
            lines = {i: item.start_mark.line + 1 for i, item in enumerate(value_node.value)}
        if key_node.value == "suite":
            suite_line = key_node.start_mark.line + 1
    try:  # the suite names a folder under the results root
        check_component(suite, "suite")
    except ConfigError as exc:
        raise InputError(path, str(exc), suite_line) from None
    entries, seen = [], set()
    for i, raw in enumerate(data.get("entries") or []):
        entry = _entry(raw, suite, path, lines.get(i, 1))
        if entry.id in seen:
            raise InputError(path, f"duplicate entry id {entry.id!r}", entry.line)
        seen.add(entry.id)
        entries.append(entry)
    return entries


def load_all(directory: str | Path | None = None, suite: str | None = None,
             ident: str | None = None) -> list[Expectation]:
    """Every expectation in ``directory`` (default ``suites/expected``), optionally filtered."""
    directory = Path(directory) if directory else expected_dir()
    files = sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml")) if directory.is_dir() else []
    out = [e for f in files for e in load_expectations(f)]
    if suite is not None:
        out = [e for e in out if e.suite == suite]
    if ident is not None:
        out = [e for e in out if e.id == ident]
    return out


# ------------------------------------------------------------------ running and checking

@dataclass
class MetricCheck:
    metric: str
    expected: float
    actual: float | None
    tolerance: float
    status: str


@dataclass
class CheckResult:
    expectation: Expectation
    status: str
    metrics: list[MetricCheck] = field(default_factory=list)
    result_dir: Path | None = None
    reused: bool = False
    message: str = ""


Runner = Callable[[list[str]], "tuple[int, str]"]


def run_harness(argv: list[str]) -> tuple[int, str]:
    """Run ``python -m harness ARGV`` in a subprocess; returns (exit status, combined output)."""
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    proc = subprocess.run([sys.executable, "-m", "harness", *argv], capture_output=True, text=True, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def expand(command: list[str], out: Path, shared: Path) -> list[str]:
    return [a.replace(OUT, str(out)).replace(SHARED, str(shared)) for a in command]


def _manifest_stamp(result_dir: Path) -> int | None:
    manifest = result_dir / MANIFEST_FILE
    return manifest.stat().st_mtime_ns if manifest.exists() else None


def _check_marker(out: Path) -> Path:
    """A sibling file saying ``out`` was made by a regression check (inside ``out`` it would make the
    folder look foreign to the command that writes there)."""
    return out.with_name(f".{out.name}.harness-check")


def _clear_check_output(out: Path) -> None:
    """Remove ``out`` for a fresh run, but only if a previous check made it (its marker) or it is a
    bare harness result; anything else there is refused, never deleted.  Then mark the place ours."""
    marker = _check_marker(out)
    if os.path.lexists(out):
        if out.is_symlink() or not out.is_dir():
            raise OutputExistsError(f"{out} exists and is not a directory; refusing to replace it")
        if any(out.iterdir()) and not (marker.is_file() or is_result_dir(out)):
            raise OutputExistsError(f"{out} holds files the regression check did not write; refusing to delete "
                                    "it (choose another --results-root, or remove it yourself)")
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("the folder beside this file was written by `harness check` and is replaced by the next "
                      "check\n", encoding="utf-8")


def check_entries(entries: list[Expectation], *, results_root: str | Path, shared: str | Path | None = None,
                  reuse: bool = False, runner: Runner = run_harness) -> list[CheckResult]:
    """:func:`check_entry` for each entry, running each distinct command once: an entry whose command equals an
    earlier one's ({out} aside; e.g. two tables of one suite run) reads its result from that run's folder."""
    results: list[CheckResult] = []
    ran: dict[tuple[str, ...], tuple[Path, Expectation]] = {}
    for entry in entries:
        earlier = ran.get(tuple(entry.command))
        own = child_of(results_root, entry.suite, entry.id, what="suite or entry id")
        if reuse and is_result_dir(child_of(own, *entry.result.split("/")) if entry.result else own):
            earlier = None                  # --reuse with its own complete result: read that one
        if earlier is None:
            results.append(check_entry(entry, results_root=results_root, shared=shared, reuse=reuse, runner=runner))
            if results[-1].status != ERROR or results[-1].metrics:
                ran.setdefault(tuple(entry.command), (own, entry))
        else:
            out, first = earlier
            results.append(check_entry(entry, results_root=results_root, shared=shared, runner=runner,
                                       out=out, same_as=first.key))
    return results


def check_entry(entry: Expectation, *, results_root: str | Path, shared: str | Path | None = None,
                reuse: bool = False, runner: Runner = run_harness, out: Path | None = None,
                same_as: str | None = None) -> CheckResult:
    """Produce (or reuse) the entry's result and compare its metrics with the expected ones.  ``out`` and
    ``same_as``: the folder an earlier entry's identical command wrote, read instead of running it again."""
    out = out or child_of(results_root, entry.suite, entry.id, what="suite or entry id")
    result_dir = child_of(out, *entry.result.split("/"), what="part of 'result'") if entry.result else out
    reused = (reuse or same_as is not None) and is_result_dir(result_dir)
    if same_as is not None and not reused:
        return CheckResult(entry, ERROR, result_dir=result_dir,
                           message=f"same command as {same_as}, whose run wrote no result directory at {result_dir}")
    if not reused:
        # A fresh {out}: commands that cache their work (suite runs) must produce the result again.
        _clear_check_output(out)
        before = _manifest_stamp(result_dir)
        code, output = runner(expand(entry.command, out, Path(shared) if shared else default_shared_root()))
        if code != 0:
            tail = " | ".join(output.strip().splitlines()[-3:])
            return CheckResult(entry, ERROR, result_dir=result_dir, message=f"command exited with {code}: {tail}")
        if not is_result_dir(result_dir) or _manifest_stamp(result_dir) == before:
            return CheckResult(entry, ERROR, result_dir=result_dir,
                               message=f"command succeeded but did not write a result directory at {result_dir}")
    stored = load_result(result_dir)
    checks: list[MetricCheck] = []
    problems: list[str] = []
    for metric, expected in entry.metrics.items():
        tol = tolerance_for(metric, entry.tolerance)
        actual = stored.evaluation.aggregate.get(metric)
        if actual is None:
            checks.append(MetricCheck(metric, expected, None, tol, ERROR))
            problems.append(f"result has no {metric!r}")
        else:
            checks.append(MetricCheck(metric, expected, float(actual), tol, classify(expected, float(actual), tol)))
    status = max((c.status for c in checks), key=_SEVERITY.__getitem__)
    if entry.card_fingerprint and stored.card.fingerprint() != entry.card_fingerprint:
        problems.append(card_change(entry, stored.card))
        status = max(status, FAIL, key=_SEVERITY.__getitem__)
    if status in (FAIL, IMPROVED, ERROR) and checks:
        problems.append(environment_difference(entry.environment, stored.manifest.get("versions")))
    if same_as is not None:
        problems.insert(0, f"same command as {same_as}: its run reused")
    return CheckResult(entry, status, checks, result_dir, reused, "; ".join(p for p in problems if p))


def _card_fields(card: Any) -> dict[str, Any]:
    """The card's scoring fields as YAML-friendly values (tuples as lists), as ``record`` stores them."""
    return yaml.safe_load(yaml.safe_dump(_plain(card.scoring_fields())))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def card_change(entry: Expectation, card: Any) -> str:
    """What changed in the protocol card since the entry was recorded: the fields by name, with their recorded
    and current values (entries recorded before cards were stored: the two fingerprints)."""
    head = f"protocol card changed (fingerprint {card.fingerprint()}, recorded {entry.card_fingerprint})"
    if not entry.card:
        return head + "; re-record the entry to store the card's fields, so a check can name what changed"
    current = _card_fields(card)
    changed = [f"{name}: {entry.card.get(name)!r} -> {current.get(name)!r}"
               for name in sorted(set(entry.card) | set(current)) if entry.card.get(name) != current.get(name)]
    return head + ": " + ("; ".join(changed) if changed else "no field differs (the fingerprint rule changed)")


def environment_difference(recorded: dict[str, str], current: Any) -> str:
    """How the library versions of a result differ from those its expectation was recorded under."""
    if not recorded:
        return ("environment: the expectation stores none (recorded before environments were kept; "
                "`harness check record --replace` stores it)")
    if not isinstance(current, dict):
        return "environment: the result's manifest records no library versions"
    changes = [f"{pkg} {recorded.get(pkg, 'absent')} -> {current.get(pkg, 'absent')}"
               for pkg in sorted(set(recorded) | set(current)) if recorded.get(pkg) != current.get(pkg)]
    return ("environment differs from the recording: " + ", ".join(changes) if changes
            else "environment: same library versions as the recording")


def exit_status(results: list[CheckResult], accept_improved: bool = False) -> int:
    """0 when every entry is OK/OKish (or IMPROVED and accepted), else 1."""
    allowed = {OK, OKISH} | ({IMPROVED} if accept_improved else set())
    return 0 if all(r.status in allowed for r in results) else 1


def format_results(results: list[CheckResult], accept_improved: bool = False) -> str:
    """A plain-text status table, one line per metric, then a summary."""
    header = ("entry", "metric", "expected", "actual", "diff", "tol", "status")
    rows: list[tuple[str, ...]] = []
    for r in results:
        if not r.metrics:
            rows.append((r.expectation.key, "-", "-", "-", "-", "-", r.status))
        for c in r.metrics:
            actual = "-" if c.actual is None else f"{c.actual:.4f}"
            diff = "-" if c.actual is None else f"{round(c.actual - c.expected, 4) + 0.0:+.4f}"
            rows.append((r.expectation.key, c.metric, f"{c.expected:.4f}", actual, diff, f"{c.tolerance:g}",
                         c.status))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    for r in results:
        note = f"  ({'reused' if r.reused else 'ran'} {r.result_dir})" if r.result_dir else ""
        lines.append(f"{r.status:8s} {r.expectation.key}{note}" + (f": {r.message}" if r.message else ""))
        if r.status == IMPROVED:
            lines.append(f"         better than recorded beyond tolerance; "
                         f"{'accepted (--accept-improved)' if accept_improved else 'not accepted'}: re-record with "
                         f"`harness check record --suite {r.expectation.suite} --id {r.expectation.id} --replace`")
    counts = {s: sum(r.status == s for r in results) for s in _SEVERITY}
    lines.append("summary: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) if results else "no entries")
    return "\n".join(lines)


# ------------------------------------------------------------------ recording

def git_identity() -> str:
    """``Name <email>`` from git config; an error if git has no identity."""
    values = []
    for key in ("user.name", "user.email"):
        try:
            proc = subprocess.run(["git", "config", key], capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            proc = None
        values.append(proc.stdout.strip() if proc and proc.returncode == 0 else "")
    if not values[0]:
        raise ConfigError("cannot record who stored the expectation: set `git config user.name` (and user.email)")
    return f"{values[0]} <{values[1]}>" if values[1] else values[0]


def record(*, suite: str, ident: str, result_dir: str | Path, command: list[str] | None = None,
           metrics: list[str] | None = None, result: str | None = None, tolerance: dict[str, float] | None = None,
           note: str | None = None, replace: bool = False, directory: str | Path | None = None) -> Expectation:
    """Store the metrics of ``result_dir`` as the expectation ``suite/ident`` (who/when/commit from git)."""
    directory = Path(directory) if directory else expected_dir()
    check_component(suite, "suite")
    check_component(ident, "entry id")
    path = directory / f"{suite}.yaml"
    entries = load_expectations(path) if path.exists() else []
    previous = next((e for e in entries if e.id == ident), None)
    if previous and not replace:
        raise ConfigError(f"{path}: entry {ident!r} is already recorded; pass --replace to overwrite it")
    command = command or (previous.command if previous else None)
    if not command or not any(OUT in a for a in command):
        raise ConfigError(f"give the command that produces the result, with {OUT} for its directory")
    stored = load_result(result_dir)
    available = stored.evaluation.aggregate
    names = metrics or list(available)
    lacking = [m for m in names if m not in available]
    if lacking:
        raise ConfigError(f"{result_dir}: no metric {', '.join(lacking)}; available: {', '.join(available)}")
    commit = git_commit()
    if not commit:
        raise ConfigError("cannot record the commit: not inside a git checkout")
    entry = Expectation(
        suite=suite, id=ident, command=list(command),
        metrics={m: round(float(available[m]), EXACT_DECIMALS) for m in names},
        result=result if result is not None else (previous.result if previous else None),
        tolerance=dict(tolerance or (previous.tolerance if previous else {})),
        card_fingerprint=stored.card.fingerprint(), card=_card_fields(stored.card),
        recorded={"by": git_identity(), "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                  "commit": commit},
        environment={str(k): str(v) for k, v in (stored.manifest.get("versions") or {}).items()},
        note=note if note is not None else (previous.note if previous else None), source=path)
    kept = [e for e in entries if e.id != ident]
    position = entries.index(previous) if previous else len(kept)
    kept.insert(position, entry)
    document = {"version": FILE_VERSION, "suite": suite, "entries": [e.to_yaml_dict() for e in kept]}
    with atomic_write(path) as handle:
        handle.write(f"# Expected scores of suite {suite!r}; written by `harness check record` (see README.md).\n")
        yaml.dump(document, handle, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)
    return entry


class _Dumper(yaml.SafeDumper):
    """Block style, except lists of plain values on one line (a command reads as a command line)."""


def _represent_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flat = all(isinstance(x, (str, int, float)) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


_Dumper.add_representer(list, _represent_list)
