"""Writing a world to disk, and the cached default world for the CLI's main job.

Layout (every file UTF-8, byte-identical for the same spec and seed)::

    world.json                       name, seed, fingerprints, sizes, the full spec
    truth.json                       ground truth per training row and test query
    train/domains.json               metadata per domain (training-collection contract)
    train/<domain>.jsonl             {"query", "pos": [...], "neg": [...], "id"} per line
    eval/<domain>/corpus.jsonl       {"_id", "title", "text"}
    eval/<domain>/queries.jsonl      {"_id", "text"}
    eval/<domain>/qrels/test.tsv     query-id, corpus-id, score (with header)
    eval/<domain>/answers.jsonl      {"_id", "answers": [...]}
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from harness.io import atomic_dir
from harness.synthetic.spec import WorldSpec
from harness.synthetic.tiny import make_tiny_model, tiny_model_fingerprint
from harness.synthetic.world import World, make_world, world_fingerprint

DEFAULT_CACHE = Path("~/.cache/retrieval-harness")


def _dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _write_lines(path: Path, lines) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for line in lines:
            handle.write(line)
            handle.write("\n")


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


# What a world written before folders carried a record of their files holds (harness.io.atomic).
WORLD_FILES = ("world.json", "truth.json", "train/*", "eval/*")


def write_world(world: World, directory: str | Path, overwrite: bool = True) -> Path:
    """Write ``world`` into ``directory`` atomically (built under a temporary name, then renamed)."""
    directory = Path(directory)
    with atomic_dir(directory, overwrite=overwrite, is_ours=lambda p: (p / "world.json").is_file(),
                    what="a synthetic world written by the harness", owned=WORLD_FILES) as tmp:
        for name, data in world.domains.items():
            _write_lines(tmp / "train" / f"{name}.jsonl", (_dumps(row) for row in data.train_rows))
            ev = tmp / "eval" / name
            _write_lines(ev / "corpus.jsonl", (_dumps({"_id": i, "title": t, "text": x}) for i, t, x in data.corpus))
            _write_lines(ev / "queries.jsonl", (_dumps({"_id": i, "text": x}) for i, x in data.queries))
            qrels = ["query-id\tcorpus-id\tscore"]
            qrels += [f"{q}\t{d}\t{r}" for q, docs in data.qrels.items() for d, r in docs.items()]
            _write_lines(ev / "qrels" / "test.tsv", qrels)
            _write_lines(ev / "answers.jsonl", (_dumps({"_id": q, "answers": a}) for q, a in data.answers.items()))
        _write_json(tmp / "train" / "domains.json", world.domain_metadata())
        _write_json(tmp / "truth.json", world.truth())
        _write_json(tmp / "world.json", {**world.summary(), "spec": world.spec.to_dict()})
    return directory


def read_world_info(directory: str | Path) -> dict | None:
    """The ``world.json`` of a written world, or None if absent or unreadable."""
    try:
        return json.loads((Path(directory) / "world.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_truth(directory: str | Path) -> dict:
    """The ground truth (``truth.json``) of a written world."""
    return json.loads((Path(directory) / "truth.json").read_text(encoding="utf-8"))


def resolve_cache_root(cache_root: str | Path | None = None) -> Path:
    """``cache_root``, else ``$HARNESS_CACHE``, else ``~/.cache/retrieval-harness``."""
    return Path(cache_root or os.environ.get("HARNESS_CACHE") or DEFAULT_CACHE).expanduser()


def materialise(directory: Path, fingerprint: str, build) -> Path:
    """Run ``build(directory)`` unless a complete copy with ``fingerprint`` is already there.

    Two processes may race to build the same entry; both build identical content, and
    the loser's rename fails harmlessly once the winner's directory exists.
    """
    info = read_world_info(directory)
    if info is not None and info.get("fingerprint") == fingerprint:
        return directory
    try:
        build(directory)
    except OSError:
        info = read_world_info(directory)
        if info is None or info.get("fingerprint") != fingerprint:
            raise
    return directory


def world_dir(spec: WorldSpec | None = None, seed: int = 0, cache_root_dir: str | Path | None = None) -> Path:
    """Materialise ``make_world(spec, seed)`` once under the cache (keyed by its fingerprint)."""
    spec = spec or WorldSpec.default()
    fingerprint = world_fingerprint(spec, seed)
    directory = resolve_cache_root(cache_root_dir) / "synthetic" / f"{spec.name}-{fingerprint[:16]}"
    return materialise(directory, fingerprint, lambda d: write_world(make_world(spec, seed), d))


def default_world_dir(cache_root: str | Path | None = None) -> Path:
    """The default world (``WorldSpec.default()``, seed 0), written once into the cache; its path."""
    return world_dir(WorldSpec.default(), 0, cache_root)


def tiny_model_dir(spec: WorldSpec | None = None, kind: str = "bert", cache_root: str | Path | None = None,
                   hidden: int = 32, layers: int = 2, heads: int = 2, seed: int = 0, world_seed: int = 0) -> Path:
    """A tiny model over the vocabulary of ``make_world(spec, world_seed)``, written once into the cache.

    The entry is ``<cache>/synthetic/tiny-<spec name>-<kind>-<key>``, keyed by the
    world's fingerprint and the model options (``seed`` seeds the weights).
    """
    spec = spec or WorldSpec.default()
    options = {"kind": kind, "hidden": hidden, "layers": layers, "heads": heads, "seed": seed}
    key = tiny_model_fingerprint(world_fingerprint(spec, world_seed), **options)
    directory = resolve_cache_root(cache_root) / "synthetic" / f"tiny-{spec.name}-{kind}-{key[:16]}"
    if (directory / "harness_encoder.json").exists():
        return directory
    try:
        make_tiny_model(directory, make_world(spec, world_seed), kind=kind, hidden=hidden, layers=layers, heads=heads,
                        seed=seed)
    except OSError:
        if not (directory / "harness_encoder.json").exists():
            raise
    return directory


def default_tiny_model_dir(kind: str = "bert", cache_root: str | Path | None = None, hidden: int = 32,
                           layers: int = 2, heads: int = 2, seed: int = 0) -> Path:
    """A tiny model over the default world's vocabulary, written once into the cache; its path."""
    return tiny_model_dir(WorldSpec.default(), kind, cache_root, hidden=hidden, layers=layers, heads=heads,
                          seed=seed)
