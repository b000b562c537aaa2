"""Training-data builders: ``harness data build <recipe>`` turns a paper's public sources into a training folder.

A :class:`DataRecipe` names its paper, its :class:`Source` files (a hub dataset file or a URL, the local
file name, a SHA-256 where one is published, a licence note) and the *subsets* it produces (one
``<subset>.jsonl`` of ``{"query","pos","neg"}`` rows each, plus a ``domains.json`` entry: language,
task, prompt).  Recipes are plug-ins (``suites/training_data``) registered with :func:`register_recipe`;
the engine only knows this interface.

:func:`build` drives a recipe:

1. **Sources.**  Every source must be at ``<sources>/<file>``.  A missing one is downloaded (hub:
   ``huggingface_hub``; URL: streamed with its SHA-256 computed), unless offline (``offline=True`` or
   ``HF_HUB_OFFLINE``/``HARNESS_OFFLINE`` set): then the error names each missing file, where it comes
   from and where to place it.
2. **Verification.**  A source with a published SHA-256 must match it.  Every other source's SHA-256
   is recorded on first use in ``<sources>/checksums.json`` and checked on every later build, so a file
   that changed under a build (a corrupted copy, a new upstream version) fails naming it; delete its
   entry to accept a new version on purpose.  Malformed rows fail in the recipe's reader with
   ``file:line``.
3. **Resume.**  Subsets are built one by one into a staging folder beside the output
   (``.<out>.parts``), each written atomically with a record of its key (recipe, version, options and
   the hashes of the sources it reads).  A build that is interrupted and run again keeps every finished
   subset whose key still matches and builds only the rest.  Concurrent builds of one output take turns
   (a claim on ``<out>.claim``, :mod:`harness.io.claims`): the second finds the first's build up to date.
4. **Output.**  The folder is assembled with :func:`harness.io.atomic_dir`: ``<subset>.jsonl`` files,
   ``domains.json`` per folder (what :func:`harness.data.collections.load_training_data` reads) and
   ``build.json`` (recipe, sources with hashes, counts per subset and language, options, harness
   version).  Readers see either the previous complete folder or the new one, never a half-written one.
   An output whose ``build.json`` already has this build's key is left as it is.
"""
from __future__ import annotations

import abc
import contextlib
import datetime as _dt
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from harness.errors import ConfigError, HarnessError, InputError
from harness.io import atomic_dir, atomic_write, atomic_write_json, sha256_file
from harness.io.claims import claim
from harness.io.readers import iter_input_lines
from harness.registry import Registry

BUILD_FILE = "build.json"
CHECKSUMS_FILE = "checksums.json"
BUILD_FORMAT = 1
OFFLINE_ENV = ("HARNESS_OFFLINE", "HF_HUB_OFFLINE")
USER_AGENT = "retrieval-harness/0.1 (+training data build)"


class SourceError(HarnessError):
    """A source is missing (offline), failed to download, or does not match its checksum."""


# ----------------------------------------------------------------------------- the interface

@dataclass(frozen=True)
class Source:
    """One input file of a recipe.

    ``file`` is its path under the sources folder.  ``hub`` (``owner/name`` of a hub *dataset*) with
    ``hub_file`` (the file in it; default ``file``) and ``revision``, or ``url``, say where it is
    downloaded from; with neither the user places it by hand (``note`` says how).  With ``archive``
    (a file name under the sources folder) the download is that tar/zip archive, kept there, and
    ``file`` is extracted from it (the member whose path ends with ``file``'s name).  ``sha256``: the
    published checksum of ``file`` where one is known.
    """

    file: str
    hub: str | None = None
    hub_file: str | None = None
    revision: str | None = None
    url: str | None = None
    sha256: str | None = None
    licence: str = ""
    note: str = ""
    archive: str | None = None

    def __post_init__(self) -> None:
        rel = PurePosixPath(self.file)
        if not self.file or rel.is_absolute() or ".." in rel.parts:
            raise ConfigError(f"source file {self.file!r} must be a relative path inside the sources folder")

    @property
    def origin(self) -> str:
        """Where the file comes from, in words."""
        inside = f" (member of {self.archive})" if self.archive else ""
        if self.hub:
            rev = f"@{self.revision}" if self.revision else ""
            return f"hub dataset {self.hub}{rev} : {self.hub_file or self.file}{inside}"
        if self.url:
            return self.url + inside
        return f"placed by hand ({self.note})" if self.note else "placed by hand"

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}


@dataclass(frozen=True)
class RecipeOption:
    """A setting of a recipe: its default, type and where the number comes from (paper section or code)."""

    default: Any
    help: str
    source: str = ""
    kind: type = str

    def parse(self, name: str, raw: Any) -> Any:
        if isinstance(raw, self.kind) and not (self.kind is int and isinstance(raw, bool)):
            return raw
        text = str(raw).strip()
        try:
            if self.kind is bool:
                if text.lower() in ("1", "true", "yes", "on"):
                    return True
                if text.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(text)
            return self.kind(text)
        except ValueError:
            raise ConfigError(f"option {name}={raw!r}: expected {self.kind.__name__}") from None


@dataclass
class SubsetResult:
    """What a recipe returns for one subset.

    ``rows`` is iterated once by the driver (a generator keeps memory flat); ``stats`` may be filled
    while the rows are produced (e.g. duplicates removed) and is read after the last row.  Each row is
    a ``{"query","pos","neg", ...}`` dict; a ``language`` key, when present, is counted per language.
    ``metadata`` is the subset's ``domains.json`` entry (language, task, prompt, symmetric, ...).
    """

    rows: Iterable[dict[str, Any]]
    metadata: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class BuildContext:
    """What a recipe's methods see: the parsed options and the verified source paths."""

    recipe: DataRecipe
    options: dict[str, Any]
    sources_dir: Path
    source_paths: dict[str, Path]
    source_hashes: dict[str, str]
    cache: dict[str, Any] = field(default_factory=dict)   # shared between subsets of one build (a plan)

    def path(self, file: str) -> Path:
        """The verified local path of source ``file``."""
        try:
            return self.source_paths[file]
        except KeyError:
            raise ConfigError(f"recipe {self.recipe.name!r} reads {file!r}, which it did not declare as a "
                              f"source") from None


class DataRecipe(abc.ABC):
    """A paper's training-data recipe: sources, options and how each output subset is made."""

    name: str = ""
    paper: str = ""
    description: str = ""
    version: int = 1                                  # bump when the processing changes the output
    options: dict[str, RecipeOption] = {}

    @abc.abstractmethod
    def sources(self, options: dict[str, Any]) -> list[Source]:
        """Every input file this build needs."""

    @abc.abstractmethod
    def subsets(self, options: dict[str, Any]) -> list[str]:
        """Output subsets in order: ``name`` -> ``name.jsonl`` (``folder/name`` puts it in a sub-folder)."""

    def subset_sources(self, subset: str, options: dict[str, Any]) -> list[str]:
        """The source files one subset reads (its resume key); default: all of them."""
        return [s.file for s in self.sources(options)]

    @abc.abstractmethod
    def build_subset(self, subset: str, ctx: BuildContext) -> SubsetResult:
        """The rows and metadata of one subset."""

    def parse_options(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Defaults overlaid with ``raw`` (strings from the command line are converted)."""
        unknown = sorted(set(raw) - set(self.options))
        if unknown:
            known = ", ".join(sorted(self.options)) or "(none)"
            raise ConfigError(f"recipe {self.name!r}: unknown option(s) {', '.join(unknown)}; known: {known}")
        parsed = {name: opt.default for name, opt in self.options.items()}
        for name, value in raw.items():
            parsed[name] = self.options[name].parse(name, value)
        self.check_options(parsed)
        return parsed

    def check_options(self, options: dict[str, Any]) -> None:
        """Refuse inconsistent option values (ConfigError); default: nothing to check."""
        return None

    def preview(self, options: dict[str, Any]) -> dict[str, Any]:
        """What ``--dry-run`` can say about the output without reading the sources (e.g. planned row
        counts per subset); default: nothing."""
        return {}

    def inputs(self, options: dict[str, Any]) -> list[Path]:
        """Local files named by options (never downloaded, e.g. evaluation queries to deduplicate
        against); their hashes join every subset's key and the manifest.  Default: none."""
        return []


RECIPES: Registry[type[DataRecipe]] = Registry(
    "data recipe", builtins=("suites.training_data",), group="retrieval_harness.data_recipes",
    check=lambda obj: isinstance(obj, type) and issubclass(obj, DataRecipe),
    on_register=lambda name, cls: setattr(cls, "name", name))


def register_recipe(name: str) -> Callable[[type[DataRecipe]], type[DataRecipe]]:
    """Class decorator: ``@register_recipe("tdro")``."""
    return RECIPES.decorator(name)


def get_recipe(name: str) -> DataRecipe:
    """A fresh instance of the recipe registered as ``name`` (or a ``module:Class`` reference)."""
    return RECIPES.create(name)


def list_recipes() -> list[str]:
    return RECIPES.names()


# ----------------------------------------------------------------------------- sources

def offline_requested() -> bool:
    return any(os.environ.get(var, "").strip() not in ("", "0") for var in OFFLINE_ENV)


def _read_ledger(sources_dir: Path) -> dict[str, str]:
    path = sources_dir / CHECKSUMS_FILE
    if not path.is_file():
        return {}
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(path, f"unreadable checksum ledger ({exc}); delete it to record the checksums again"
                         ) from None
    if not isinstance(obj, dict) or not all(isinstance(v, str) for v in obj.values()):
        raise InputError(path, "checksum ledger must be a JSON object of file -> sha256")
    return obj


def _copy_into_place(stream: IO[bytes], dest: Path) -> None:
    """Copy bytes to a temporary sibling, then rename: a killed download leaves no partial file at ``dest``
    (not :func:`atomic_write`, which would gzip a ``.gz`` name again)."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(stream, out, 1 << 20)
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def _extract(archive: Path, member: str, dest: Path) -> None:
    """Copy the archive member whose path ends with ``member`` to ``dest``."""
    def matches(name: str) -> bool:
        return name == member or name.endswith("/" + member)

    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                names = [n for n in zf.namelist() if matches(n)]
                if names:
                    with zf.open(names[0]) as handle:
                        _copy_into_place(handle, dest)
                    return
        else:
            with tarfile.open(archive) as tf:
                for info in tf:
                    if info.isfile() and matches(info.name):
                        member_file = tf.extractfile(info)
                        if member_file is not None:
                            _copy_into_place(member_file, dest)
                            return
    except (OSError, tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
        raise SourceError(f"{archive}: cannot read the archive ({exc}); delete it to download it again") from None
    raise SourceError(f"{archive}: no member named {member!r}")


def _download(source: Source, dest: Path, sources_dir: Path) -> None:
    """Fetch ``source`` to ``dest`` (written atomically); an archive source is extracted from its archive,
    downloaded first when it is not in the sources folder yet."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if source.archive:
        archive = sources_dir / source.archive
        if not archive.is_file():
            _download(Source(source.archive, hub=source.hub, hub_file=source.hub_file, revision=source.revision,
                             url=source.url, note=source.note), archive, sources_dir)
        _extract(archive, PurePosixPath(source.file).name, dest)
        return
    if source.hub:
        try:
            # lazy (start-up speed): huggingface_hub imports requests and more
            import huggingface_hub
        except ImportError:  # pragma: no cover - a dependency of transformers
            raise SourceError(f"{source.file}: huggingface_hub is not installed; place the file at {dest}") from None
        remote = source.hub_file or source.file
        try:
            got = Path(huggingface_hub.hf_hub_download(source.hub, remote, repo_type="dataset",
                                                       revision=source.revision))
            infos = huggingface_hub.HfApi().get_paths_info(source.hub, [remote], repo_type="dataset",
                                                           revision=source.revision)
        except Exception as exc:  # the hub client raises many kinds; each must name the file
            raise SourceError(f"{source.file}: download from {source.origin} failed ({type(exc).__name__}: "
                              f"{exc}); place the file at {dest}") from None
        # The hub publishes the SHA-256 of every LFS file: check the bytes against it before they are used.
        lfs = getattr(infos[0], "lfs", None) if infos else None
        published = lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)
        if published and sha256_file(got) != published:
            raise SourceError(f"{source.file}: the downloaded file does not match the SHA-256 the hub publishes "
                              f"for {source.origin} ({published}); try again")
        with open(got, "rb") as handle:
            _copy_into_place(handle, dest)
        return
    if source.url:
        request = urllib.request.Request(source.url, headers={"User-Agent": USER_AGENT})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
                _copy_into_place(response, dest)
        except (urllib.error.URLError, OSError) as exc:
            raise SourceError(f"{source.file}: download from {source.url} failed "
                              f"({getattr(exc, 'reason', exc)}); place the file at {dest}") from None
        return
    raise SourceError(f"{source.file} is missing: place it at {dest} ({source.origin})")


def fetch_sources(recipe: DataRecipe, options: dict[str, Any], sources_dir: Path, *,
                  offline: bool | None = None) -> tuple[dict[str, Path], dict[str, str]]:
    """Make every source present and verified; returns (file -> path, file -> sha256)."""
    sources_dir = Path(sources_dir)
    offline = offline_requested() if offline is None else offline
    sources = recipe.sources(options)
    files = [s.file for s in sources]
    if len(set(files)) != len(files):
        twice = sorted({f for f in files if files.count(f) > 1})
        raise ConfigError(f"recipe {recipe.name!r} declares source file(s) {', '.join(twice)} twice")
    missing = [s for s in sources if not (sources_dir / s.file).is_file()]
    # Offline, a member of an archive already in the sources folder can still be extracted.
    unreachable = [s for s in missing if not (s.archive and (sources_dir / s.archive).is_file())]
    if unreachable and offline:
        lines = [f"  {sources_dir / s.file}  <- {s.origin}" for s in unreachable]
        raise SourceError(f"recipe {recipe.name!r}: {len(unreachable)} source file(s) missing and downloads are "
                          f"off (offline); place them here:\n" + "\n".join(lines))
    for src in missing:
        _download(src, sources_dir / src.file, sources_dir)
    ledger = _read_ledger(sources_dir)
    paths: dict[str, Path] = {}
    hashes: dict[str, str] = {}
    changed = False
    for src in sources:
        path = sources_dir / src.file
        digest = sha256_file(path)
        if src.sha256 and digest != src.sha256.lower():
            raise SourceError(f"{path}: SHA-256 {digest} does not match the published {src.sha256} "
                              f"({src.origin}); the file is corrupt or a different version")
        recorded = ledger.get(src.file)
        if recorded is not None and recorded != digest:
            raise SourceError(f"{path}: SHA-256 {digest} differs from the one recorded at its first use "
                              f"({recorded}, in {sources_dir / CHECKSUMS_FILE}); the file changed or is "
                              f"corrupt (delete its entry there to accept this version)")
        if recorded is None:
            ledger[src.file] = digest
            changed = True
        paths[src.file] = path
        hashes[src.file] = digest
    if changed:
        atomic_write_json(sources_dir / CHECKSUMS_FILE, dict(sorted(ledger.items())))
    return paths, hashes


# ----------------------------------------------------------------------------- the driver

def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:24]


def _harness_version() -> str:
    """The installed harness's version (from its distribution: the engine does not import the package root,
    which exposes the application's Python API)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("retrieval-harness")
    except PackageNotFoundError:       # a source tree used without installing it
        return "unknown"


def _staging_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.parts"


def _check_subset_name(name: str) -> PurePosixPath:
    rel = PurePosixPath(name)
    if not name or rel.is_absolute() or ".." in rel.parts or len(rel.parts) > 2:
        raise ConfigError(f"bad subset name {name!r}: 'name' or 'folder/name' expected")
    return rel


@dataclass
class BuildReport:
    """What :func:`build` did: the manifest written, and which subsets were built or reused."""

    out: Path
    manifest: dict[str, Any]
    built: list[str]
    reused: list[str]
    up_to_date: bool = False


def plan(recipe: DataRecipe, options: dict[str, Any], sources_dir: Path) -> dict[str, Any]:
    """What a build would fetch and produce (``--dry-run``); reads nothing but file existence."""
    sources_dir = Path(sources_dir)
    return {
        "recipe": recipe.name, "paper": recipe.paper, "options": options,
        "sources": [{**s.describe(), "origin": s.origin, "present": (sources_dir / s.file).is_file(),
                     "path": str(sources_dir / s.file)} for s in recipe.sources(options)],
        "inputs": {str(p): p.exists() for p in recipe.inputs(options)},
        "subsets": [f"{s}.jsonl" for s in recipe.subsets(options)],
        "expected": recipe.preview(options),
    }


def _is_build(path: Path) -> bool:
    return (path / BUILD_FILE).is_file()


def build(recipe: DataRecipe, out: str | Path, sources_dir: str | Path, raw_options: dict[str, Any] | None = None,
          *, offline: bool | None = None, log: Callable[[str], None] | None = None) -> BuildReport:
    """Build ``recipe`` into ``out`` from ``sources_dir`` (module docstring: verified, resumable, atomic)."""
    out, sources_dir = Path(out), Path(sources_dir)
    say = log or (lambda _msg: None)
    options = recipe.parse_options(dict(raw_options or {}))
    paths, hashes = fetch_sources(recipe, options, sources_dir, offline=offline)
    inputs = {str(p): _input_hash(Path(p)) for p in recipe.inputs(options)}
    subsets = recipe.subsets(options)
    for name in subsets:
        _check_subset_name(name)
    if len(set(subsets)) != len(subsets):
        raise ConfigError(f"recipe {recipe.name!r} lists a subset twice")
    build_key = _key(recipe.name, recipe.version, BUILD_FORMAT, options, sorted(hashes.items()),
                     sorted(inputs.values()))
    # One builder per output at a time: a second waits, then finds the build up to date (harness.io.claims).
    with claim(out, f"training-data build {recipe.name}"):
        return _build_claimed(recipe, out, sources_dir, options, paths, hashes, inputs, subsets, build_key, say)


def _build_claimed(recipe: DataRecipe, out: Path, sources_dir: Path, options: dict[str, Any],
                   paths: dict[str, Path], hashes: dict[str, str], inputs: dict[str, str], subsets: list[str],
                   build_key: str, say: Callable[[str], None]) -> BuildReport:
    """The part of :func:`build` done under the output's claim: resume, build the rest, assemble."""
    version = _harness_version()
    existing = out / BUILD_FILE
    if existing.is_file():
        with contextlib.suppress(OSError, ValueError):
            old = json.loads(existing.read_text(encoding="utf-8"))
            if isinstance(old, dict) and old.get("key") == build_key:
                say(f"{out}: up to date (build key {build_key})")
                return BuildReport(out, old, [], list(subsets), up_to_date=True)
    ctx = BuildContext(recipe, options, sources_dir, paths, hashes)
    staging = _staging_dir(out)
    staging.mkdir(parents=True, exist_ok=True)
    built: list[str] = []
    reused: list[str] = []
    records: dict[str, dict[str, Any]] = {}
    for name in subsets:
        used = recipe.subset_sources(name, options)
        key = _key(recipe.name, recipe.version, BUILD_FORMAT, options, name, [(f, hashes[f]) for f in used],
                   sorted(inputs.values()))
        data_file = staging / f"{name}.jsonl"
        record_file = staging / f"{name}.build.json"
        record = _read_subset_record(record_file)
        if record is not None and record.get("key") == key and (
                record["rows"] == 0 or (data_file.is_file() and sha256_file(data_file) == record.get("sha256"))):
            reused.append(name)
            records[name] = record
            say(f"  {name}: finished earlier, kept ({record['rows']} rows)")
            continue
        result = recipe.build_subset(name, ctx)
        rows, languages = _write_rows(data_file, result.rows)
        if rows == 0:       # e.g. a language with no validation query: recorded, but no file and no domain
            data_file.unlink()
        record = {"key": key, "subset": name, "rows": rows, "languages": dict(sorted(languages.items())),
                  "bytes": data_file.stat().st_size if rows else 0, "sha256": sha256_file(data_file) if rows else None,
                  "sources": used, "stats": result.stats, "metadata": result.metadata}
        atomic_write_json(record_file, record)          # written last: the subset is finished
        built.append(name)
        records[name] = record
        say(f"  {name}: {rows} rows")
    if not any(rec["rows"] for rec in records.values()):
        raise InputError(sources_dir, f"recipe {recipe.name!r} produced no rows from these sources")
    manifest = _manifest(recipe, options, paths, hashes, records, build_key, version)
    manifest["inputs"] = inputs
    with atomic_dir(out, is_ours=_is_build, what="a harness training-data build",
                    record={"training_data_build": recipe.name}) as tmp:
        domains: dict[str, dict[str, Any]] = {}
        for name in subsets:
            rel = _check_subset_name(name)
            if not records[name]["rows"]:
                continue
            target = tmp / f"{name}.jsonl"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(staging / f"{name}.jsonl", target)
            folder = str(rel.parent)
            domains.setdefault(folder, {})[rel.name] = {"file": f"{rel.name}.jsonl", **records[name]["metadata"]}
        for folder, entries in domains.items():
            atomic_write_json(tmp / folder / "domains.json", entries)
        atomic_write_json(tmp / BUILD_FILE, manifest)
    shutil.rmtree(staging, ignore_errors=True)
    return BuildReport(out, manifest, built, reused)


def _input_hash(path: Path) -> str:
    """SHA-256 of an input file, or of every file below an input folder (names included)."""
    if path.is_dir():
        digest = hashlib.sha256()
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(f"{f.relative_to(path).as_posix()}\0{sha256_file(f)}\n".encode())
        return digest.hexdigest()
    if not path.is_file():
        raise InputError(path, "input file does not exist")
    return sha256_file(path)


def _read_subset_record(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("rows"), int) else None


def _write_rows(path: Path, rows: Iterable[dict[str, Any]]) -> tuple[int, dict[str, int]]:
    count = 0
    languages: dict[str, int] = {}
    with atomic_write(path, "w") as handle:
        for row in rows:
            lang = row.get("language")
            if isinstance(lang, str):
                languages[lang] = languages.get(lang, 0) + 1
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count, languages


def _manifest(recipe: DataRecipe, options: dict[str, Any], paths: dict[str, Path], hashes: dict[str, str],
              records: dict[str, dict[str, Any]], build_key: str, version: str) -> dict[str, Any]:
    by_file = {s.file: s for s in recipe.sources(options)}
    languages: dict[str, int] = {}
    for rec in records.values():
        for lang, n in rec["languages"].items():
            languages[lang] = languages.get(lang, 0) + n
    return {
        "format": BUILD_FORMAT, "recipe": recipe.name, "recipe_version": recipe.version, "paper": recipe.paper,
        "key": build_key, "harness_version": version,
        "built": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "options": options,
        "option_sources": {name: opt.source for name, opt in recipe.options.items() if opt.source},
        "sources": [{**by_file[f].describe(), "sha256": hashes[f], "bytes": paths[f].stat().st_size}
                    for f in hashes],
        "totals": {"rows": sum(r["rows"] for r in records.values()),
                   "bytes": sum(r["bytes"] for r in records.values()),
                   "languages": dict(sorted(languages.items()))},
        "subsets": {name: {k: rec[k] for k in ("rows", "languages", "bytes", "sha256", "sources", "stats")}
                    for name, rec in records.items()},
    }


# ----------------------------------------------------------------------------- helpers for recipes

def iter_release_jsonl(path: str | Path, what: str = "source file") -> Iterator[tuple[int, Any]]:
    """``(line, value)`` of every non-blank line of a JSON-lines file (``.gz`` allowed); any JSON value
    (release files hold lists as well as objects); malformed JSON raises InputError at file:line."""
    for line_no, raw in iter_input_lines(path, what):
        if not raw.strip():
            continue
        try:
            yield line_no, json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"malformed JSON ({exc.msg} at column {exc.colno})", line_no) from None
        except (RecursionError, ValueError) as exc:
            raise InputError(path, f"malformed JSON ({type(exc).__name__}: {exc})", line_no) from None


def iter_tsv(path: str | Path, columns: int | tuple[int, int], what: str = "source file"
             ) -> Iterator[tuple[int, list[str]]]:
    """``(line, fields)`` of a tab-separated file; a row with the wrong number of fields raises InputError
    at file:line.  ``columns``: the exact count, or (min, max)."""
    low, high = (columns, columns) if isinstance(columns, int) else columns
    for line_no, raw in iter_input_lines(path, what):
        if not raw.strip():
            continue
        fields = raw.split("\t")
        if not low <= len(fields) <= high:
            want = str(low) if low == high else f"{low} to {high}"
            raise InputError(path, f"expected {want} tab-separated fields, got {len(fields)}", line_no)
        yield line_no, fields


__all__ = ["BUILD_FILE", "CHECKSUMS_FILE", "RECIPES", "BuildContext", "BuildReport", "DataRecipe", "RecipeOption",
           "Source", "SourceError", "SubsetResult", "build", "fetch_sources", "get_recipe", "iter_release_jsonl",
           "iter_tsv", "list_recipes", "offline_requested", "plan", "register_recipe"]
