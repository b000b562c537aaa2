"""``synthetic:<preset>/tiny-bert`` model references: the tiny model of a synthetic world preset.

Suite files and the encoders both accept these names, so resolving them is part of the engine
(the suite runner's path resolution re-uses it).
"""
from __future__ import annotations

from harness.errors import ConfigError
from harness.synthetic.spec import WorldSpec

SYNTHETIC_PREFIX = "synthetic:"
TINY_MODEL_KINDS = {"tiny-bert": "bert", "tiny-decoder": "decoder"}


def world_spec(preset: str) -> WorldSpec:
    """``WorldSpec.<preset>()``, or a ConfigError naming the unknown preset."""
    factory = getattr(WorldSpec, preset, None)
    if factory is None or not callable(factory):
        raise ConfigError(f"unknown synthetic world preset {preset!r} (WorldSpec has no {preset}() preset)")
    return factory()


def resolve_synthetic_model(name: str) -> str:
    """The path of the tiny model ``synthetic:<preset>/<kind>`` names (generated into the cache on first use)."""
    preset, _, kind = name[len(SYNTHETIC_PREFIX):].partition("/")
    if kind not in TINY_MODEL_KINDS:
        raise ConfigError(f"synthetic model {name!r}: expected synthetic:<preset>/tiny-bert or .../tiny-decoder")
    from harness.synthetic import tiny_model_dir  # heavy (tokenizers): only when a model is needed

    return str(tiny_model_dir(world_spec(preset), kind=TINY_MODEL_KINDS[kind]))
