"""Checking a whole suite plan before any compute.

``harness run`` (and its ``--dry-run``) calls :func:`validate_plan` before the first
cell trains, so that a typo in the last variant or a missing dataset of the last
benchmark fails in seconds, not after an hour of training.  Everything is checked and
every problem reported in one :class:`~harness.ablation.problems.SuitePlanError`:

* method names (registered, or ``none``), method options (unknown names with the closest
  known one, values the method refuses) and the resolved TrainSpec of every variant;
* metric names (:func:`harness.metrics.names.parse_metric`);
* benchmark suite names (the benchmark registry) and dataset folders (they exist;
  ``synthetic:`` specs resolve to a world);
* training data entries (they exist) and models (:func:`harness.encoders.model_check.check_model`:
  files present, no weights loaded);
* table layouts;
* the cell ids the axes generate (``<variant>@<param>=<value>@seed=<s>@step=<n>``): each names a
  result folder, so each must be one safe path component, like the declared ids
  (:func:`harness.io.paths.check_component`, checked when the file was read).

The file-level checks (unknown keys, types, stats settings) already ran when the suite
was parsed.  With ``check_resources=False`` (the dry run of a GPU-only scale, planned on
a machine without the user's data or models) folders and models are not checked.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.ablation.axes import apply_axes, keep_checkpoints, replicates, systems_of
from harness.ablation.cells import method_preset, variant_train_overrides
from harness.ablation.layout import layout_kind, load_layout, table_section
from harness.ablation.problems import KeyPath, Problems
from harness.ablation.resolve import SYNTHETIC_PREFIX, resolve_data_entry, resolve_path, substitute, unresolved
from harness.ablation.spec import NO_TRAINING, AblationSuite, closest, load_suite
from harness.benchmark import get_suite, list_suites
from harness.errors import ConfigError, HarnessError
from harness.io.paths import check_component
from harness.method import get_method, list_methods
from harness.method.compose import compose
from harness.method.stages import flatten_stages
from harness.metrics.names import parse_metric
from harness.pipeline import LEXICAL_MODELS
from harness.recipe import option_problems
from harness.train.stages import Stage


def load_validated(name_or_path: str | Path, scale: str, *, dry_run: bool = False) -> AblationSuite:
    """Load a suite and validate its plan at ``scale``: the file's problems and the plan's in one error.
    A dry run of a GPU-only scale checks no folders or models (they are on the machines it is planned for)."""
    problems = Problems()
    suite = load_suite(name_or_path, problems)
    if scale not in suite.scales:
        hint = closest(scale, suite.scales)
        problems.add(("scales",), f"suite {suite.name!r} has no scale {scale!r}"
                     + (f" (did you mean {hint!r}?)" if hint else "") + f"; scales: {', '.join(suite.scales)}")
        problems.raise_if_any()
    check_resources = not (dry_run and suite.scale(scale).dry_run_only)
    # Specs are built only from a clean file: their errors would repeat the file's type problems.
    validate_plan(suite, scale, check_resources=check_resources, problems=problems, build_specs=not problems)
    return suite


def validate_plan(suite: AblationSuite, scale: str, *, check_resources: bool = True,
                  problems: Problems | None = None, build_specs: bool = True) -> None:
    """Raise one SuitePlanError listing every problem of ``suite`` at ``scale`` (and those already in
    ``problems``); return quietly otherwise."""
    cfg = suite.scale(scale)
    if problems is None:
        problems = Problems(suite.path, suite.lines or _lines(suite), suite.columns)
    _metrics(suite, problems)
    _names(suite, scale, problems)
    models: dict[str, KeyPath] = {cfg.model: ("scales", scale, "model")}
    for i, variant in enumerate(suite.variants):
        where: KeyPath = ("variants", i)
        own_model = variant.model_at(scale)
        if own_model:
            at = ("scales", scale, "model") if variant.scales.get(scale, {}).get("model") else ("model",)
            models.setdefault(own_model, where + at)
        _cell_ids(suite, scale, i, problems)
        if variant.method != NO_TRAINING:
            _variant(suite, scale, i, problems, build_specs)
    for j, bench in enumerate(cfg.benchmarks):
        _benchmark(bench, ("scales", scale, "benchmarks", j), problems, check_resources)
    if check_resources:
        for j, entry in enumerate(cfg.data):
            _data_entry(entry, ("scales", scale, "data", j), problems)
        for model, where in models.items():
            _model(model, where, problems)
    _layouts(suite, scale, problems)
    problems.raise_if_any()


def _lines(suite: AblationSuite) -> dict:
    """The key lines of the suite file (read again: cheap, and AblationSuite stays plain data)."""
    if suite.path is None or not Path(suite.path).exists():
        return {}
    from harness.ablation.yamlsafe import load_yaml  # lazy (start-up speed): imports yaml

    try:
        return load_yaml(suite.path)[1]
    except HarnessError:
        return {}


def _metrics(suite: AblationSuite, problems: Problems) -> None:
    for i, name in enumerate(suite.metrics):
        try:
            parse_metric(name)
        except HarnessError as exc:
            problems.add(("metrics", i), str(exc))


def _names(suite: AblationSuite, scale: str, problems: Problems) -> None:
    """The names that become folders (suite, scale, variant and benchmark ids): the file's reader checked
    them already (the same problems, added once), a suite built in code is checked here."""
    checks: list[tuple[KeyPath, object, str]] = [(("name",), suite.name, "suite name"),
                                                  (("scales", scale), scale, "scale name")]
    checks += [(("variants", i, "id"), v.id, "variant id") for i, v in enumerate(suite.variants)]
    checks += [(("scales", scale, "benchmarks", j, "id"), b.id, "benchmark id")
               for j, b in enumerate(suite.scale(scale).benchmarks)]
    for keypath, name, what in checks:
        try:
            check_component(name, what)
        except ConfigError as exc:
            problems.add(keypath, str(exc))


def _cell_ids(suite: AblationSuite, scale: str, i: int, problems: Problems) -> None:
    """The ids of variant ``i``'s cells at ``scale`` (sweep points, seeds, listed checkpoint steps) must be
    safe folder names: a sweep over ``options.a/b``, or a long id whose ``@seed=...`` suffix crosses the length
    cap, is a problem at the line of the variant's axis (``checkpoints: {every: n}`` steps depend on the run's
    length: :mod:`harness.ablation.paths` refuses a bad one before anything is written)."""
    variant = suite.variants[i]
    where: KeyPath = ("variants", i)
    if not _is_component(variant.id):
        return      # the declared id itself: reported where the file was read
    for system in systems_of(variant):
        for replicate in replicates(suite, system, scale):
            ids = [replicate.id]
            steps = replicate.checkpoints.steps if replicate.checkpoints is not None else ()
            if steps:
                ids.append(f"{replicate.id}@step={max(steps)}")
            for cid in ids:
                try:
                    check_component(cid, f"cell id of variant {variant.id!r}")
                except ConfigError as exc:
                    at = ("sweep",) if not _is_component(system.id) else \
                         ("seeds",) if not _is_component(replicate.id) and variant.seeds is not None else \
                         ("checkpoints",) if _is_component(replicate.id) and variant.checkpoints is not None else \
                         ("id",)
                    problems.add(where + at, str(exc))
                    return      # one problem per variant: its other cells share the cause


def _is_component(name: str) -> bool:
    try:
        check_component(name, "name")
    except ConfigError:
        return False
    return True


def _variant(suite: AblationSuite, scale: str, i: int, problems: Problems, build_spec: bool) -> None:
    variant = suite.variants[i]
    where: KeyPath = ("variants", i)
    known = list_methods()
    if ":" in variant.method:   # a package.module:Class reference (a method from another package)
        try:
            get_method(variant.method)
        except HarnessError as exc:
            problems.add(where + ("method",), f"variant {variant.id!r}: {exc}")
            return
    elif variant.method not in known:
        hint = closest(variant.method, [*known, NO_TRAINING])
        problems.add(where + ("method",), f"variant {variant.id!r}: unknown method {variant.method!r}"
                     + (f" (did you mean {hint!r}?)" if hint else "") + f"; methods: {', '.join(known)}, {NO_TRAINING}")
        return
    method = get_method(variant.method)
    option_names = list(method.default_options)
    layers: list[tuple[KeyPath, dict[str, Any]]] = [(where + ("options",), variant.options)]
    layers += [(where + ("scales", s, "options"), c.get("options") or {}) for s, c in variant.scales.items()]
    unknown_found = False
    for keypath, options in layers:
        for name in options:
            if name not in option_names:
                unknown_found = True
                hint = closest(str(name), option_names)
                problems.add(keypath, f"variant {variant.id!r}: method {variant.method!r} has no option {name!r}"
                             + (f" (did you mean {hint!r}?)" if hint else "")
                             + f"; options: {', '.join(option_names) or '(none)'}", at=keypath + (name,))
        # types, choices and ranges from the method's typed recipe, each at its option's own line
        known_options = {k: v for k, v in options.items() if k in option_names}
        for name, message in option_problems(method, known_options):
            unknown_found = True
            problems.add(keypath, f"variant {variant.id!r}: {message}", at=keypath + (name,))
    sweep = variant.sweep
    if sweep is not None and sweep.section == "options" and sweep.name not in option_names:
        unknown_found = True
        hint = closest(sweep.name, option_names)
        problems.add(where + ("sweep", "param"), f"variant {variant.id!r}: method {variant.method!r} has no option "
                     f"{sweep.name!r} to sweep" + (f" (did you mean {hint!r}?)" if hint else "")
                     + f"; options: {', '.join(option_names) or '(none)'}")
    own_model = variant.model_at(scale)
    if own_model and own_model.lower() in LEXICAL_MODELS:
        problems.add(where + ("model",), f"variant {variant.id!r}: {own_model!r} is a lexical model and cannot "
                     f"be trained by method {variant.method!r}; evaluate it as a baseline row with method "
                     f"{NO_TRAINING!r}")
        return
    cfg = suite.scale(scale)
    try:
        preset = method_preset(method, scale, cfg.preset_scale)
    except ConfigError as exc:      # reported at the scale's 'preset' key, else at the scale itself
        at = ("scales", scale, "preset") if cfg.preset else ("scales", scale)
        problems.add(at, f"variant {variant.id!r}: {exc}")
        return
    if unknown_found or not build_spec:
        return

    for system in systems_of(variant):
        replicate = replicates(suite, system, scale)[0]   # seeds change only the spec's seed
        overrides = apply_axes(variant_train_overrides(suite, variant, scale), replicate)
        point = f" ({system.sweep.name}={system.value!r})" if system.sweep is not None else ""
        try:
            # a ``base`` method and its options are checked too (harness.method.compose)
            compose(method, method.resolve_options(dict(overrides.get("method_options", {}))))
            # The model name stands in for the resolved path: resolving a synthetic model would build it.
            spec = method.spec(preset, **{**overrides, "model": own_model or suite.scale(scale).model})
            keep_checkpoints(spec, replicate.checkpoints)
            for planned in flatten_stages(method, spec, None):   # a stage's options are checked like a variant's
                if isinstance(planned.stage, Stage):
                    get_method(planned.stage.method).resolve_options(dict(planned.stage.spec.method_options))
        except HarnessError as exc:
            problems.add(where + (("sweep",) if point else ()), f"variant {variant.id!r}{point} at scale "
                                                                f"{scale!r}: {exc}")


def _benchmark(bench: Any, where: tuple, problems: Problems, check_resources: bool) -> None:
    known = list_suites()
    if ":" in bench.suite:   # a package.module:Class reference (a suite from another package)
        try:
            get_suite(bench.suite)
        except HarnessError as exc:
            problems.add(where + ("suite",), f"benchmark {bench.id!r}: {exc}")
    elif bench.suite not in known:
        hint = closest(bench.suite, known)
        problems.add(where + ("suite",), f"benchmark {bench.id!r}: unknown benchmark suite {bench.suite!r}"
                     + (f" (did you mean {hint!r}?)" if hint else "") + f"; suites: {', '.join(known)}")
    if ":" in bench.suite or bench.suite in known:    # the suite's declared options: types and choices
        try:
            declared = type(get_suite(bench.suite))
        except HarnessError:     # reported above
            declared = None
        for key, value in bench.options.items():
            try:
                if declared is not None:
                    declared.check_options({key: value})
            except ConfigError as exc:
                problems.add(where + ("options", key), f"benchmark {bench.id!r}: {exc}")
    if check_resources:
        _folder(bench.dataset_dir, where + ("dataset_dir",), f"benchmark {bench.id!r}: dataset_dir", problems)


def _data_entry(entry: Any, where: tuple, problems: Problems) -> None:
    text = entry.get("path") if isinstance(entry, dict) else entry
    if text is None:
        return
    if str(text).startswith(SYNTHETIC_PREFIX):
        try:
            resolve_data_entry(text)
        except HarnessError as exc:
            problems.add(where, f"training data {text!r}: {exc}")
        return
    _folder(str(text), where, "training data", problems, directory=False)


def _folder(text: str, where: tuple, what: str, problems: Problems, directory: bool = True) -> None:
    """A dataset folder (or file) that must exist; ``synthetic:`` specs must resolve."""
    substituted = substitute(text)
    names = unresolved(substituted)
    if names:
        variable = f"HARNESS_{names[0].upper()}"
        problems.add(where, f"{what} {text!r} uses the placeholder {{{names[0]}}}: set {variable} to the folder "
                            "it stands for")
        return
    try:
        path = resolve_path(substituted)
    except HarnessError as exc:
        problems.add(where, f"{what} {text!r}: {exc}")
        return
    if not path.exists():
        problems.add(where, f"{what}: {path} does not exist")
    elif directory and not path.is_dir():
        problems.add(where, f"{what}: {path} is not a folder")


def _model(model: str, where: tuple, problems: Problems) -> None:
    from harness.encoders.model_check import check_model  # lazy (start-up speed): imports torch, tqdm

    name = substitute(model)
    names = unresolved(name)
    if names:
        problems.add(where, f"model {model!r} uses the placeholder {{{names[0]}}}: set "
                            f"HARNESS_{names[0].upper()} to the folder it stands for")
        return
    try:
        check_model(name)
    except HarnessError as exc:
        message = str(exc)
        problems.add(where, message if model in message or name in message else f"model {model!r}: {message}")


def _gathers(kind: str) -> bool:
    """Whether layouts of ``kind`` show another layout's columns (so have none of their own to skip on)."""
    try:
        return layout_kind(kind).columns == "layout"
    except HarnessError:
        return False        # an unknown kind: load_layout names it below


def _layouts(suite: AblationSuite, scale: str, problems: Problems) -> None:
    try:
        table = table_section(suite)
    except HarnessError:
        return      # the table: section's own problems were recorded where the file was read, with the others
    for name, entry in table.layouts.items():
        if scale not in entry.scales and not entry.columns and not _gathers(entry.kind):
            # A layout whose columns exist only at other scales (a paper's table over its real benchmarks) is
            # not drawn at this one: `harness table --layout` says so when asked for it.  A smoke scale's table
            # is the plain comparison table for the same reason.
            continue
        try:
            load_layout(suite, scale, name, table)
        except HarnessError as exc:
            problems.add(("table", "layouts", name), str(exc))
