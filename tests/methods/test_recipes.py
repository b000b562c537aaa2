"""Typed recipes (harness.recipe): every method's options declared with types, docs, choices and the
source of each default; validation from the declaration; presets with sources; the listing."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from harness.errors import ConfigError
from harness.method import Method, get_method, list_methods
from harness.recipe import NoOptions, Preset, defaults, option, option_infos, option_problems, preset, validate_options

# The default options of every method as plain dicts, captured before the declarations replaced them:
# the declarations must give exactly these (run keys hash the options as given, so nothing else moves).
OLD_DEFAULTS = {
    "coco": {"corpora": [], "early_close": 0.1, "mlm_probability": 0.15, "mlm_weight": 0.0,
             "span_max_length": 128, "span_tokens": 30},
    "dro-erm": {"ance_depth": 200, "ance_keep": 30, "ance_refresh_steps": 0, "ance_warmup": "data", "blocks": 3,
                "coco": None, "episode_every": 0, "k": 50, "loss": "triplet", "niter": 500, "nredo": 5,
                "params": ""},
    "echo-splade": {"doc_template": None, "echo": True, "eval_top_k": None, "include_eos": False,
                    "interpretability_k": 20, "interpretability_texts": 64, "lambda_d": 0.0001, "lambda_q": 0.0003,
                    "lambda_schedule": "splade", "lambda_warmup_steps": 50000, "pooling": "max",
                    "quantization": None, "query_prompt": "", "query_template": None, "regularizer": "flops",
                    "candidates": "official"},
    "groupdro": {"adjustment": 0.0, "alpha": 0.2, "ance_depth": 200, "ance_keep": 30, "ance_refresh_steps": 0,
                 "ance_warmup": "data", "blocks": 3, "coco": None, "ema": 0.1, "episode_every": 0, "eps": 0.01,
                 "eta": 0.01, "k": 50, "loss": "triplet", "niter": 500, "nredo": 5, "params": "",
                 "variant": "sagawa"},
    "idro": {"ance_depth": 200, "ance_keep": 30, "ance_refresh_steps": 0, "ance_warmup": "data", "beta": 0.25,
             "blocks": 3, "cluster_grads": "auto", "coco": None, "ema": 0.1, "episode_every": 0, "eps": 0.01,
             "k": 50, "loss": "triplet", "mode": "code", "niter": 500, "nredo": 5, "params": "", "rho": 0.05,
             "tau": None},
    "mined": {"batches": "sampler", "bm25_language": None, "corpus": None, "depth": 40, "filter_mode": "keep_zero",
              "fusion": "mean", "generate": "none", "generate_max_tokens": 64, "judge": "none",
              "judge_batch_size": 16, "judge_depth": None, "judge_max_tokens": None, "judge_mode": None,
              "judge_rows": None, "k": 30, "language_weight": 0.45, "languages": "source", "margin": 0.15,
              "mine": True, "mining_seed": 0, "n_topics": 12, "percent": 0.9, "plan_docs": None,
              "plan_queries": None, "pos_agg": "min", "retrievers": ["minilm"], "shift": 10,
              "strategy": "perc_pos", "threshold": 0.6, "topic_model": None, "topic_threshold": 0.5,
              "topic_weight": 0.4, "topics": "kmeans", "truth": None, "weighting": "batch", "weights": "none",
              "window": None},
    "peg": {"a_mode": "pos", "alpha": 0.5, "beta": 0.1, "record_query_weights": False, "scale_negatives": True,
            "statistics": "global", "t_init": 0.0, "t_mode": "momentum", "tau": None, "weight_queries": True},
    # candidates (issue 28): a deliberate change, the ranking loss's candidates made explicit with naver's
    # InBatchPairwiseNLL ('official') as the default; before it the method scored every passage ('all').
    "splade": {"lambda_d": 0.0001, "lambda_q": 0.0003, "lambda_schedule": "splade", "lambda_warmup_steps": 50000,
               "pooling": "max", "regularizer": "flops", "candidates": "official"},
    "tdro": {"lr_alpha": 0.02, "max_norm": 1.0, "measure": "relative", "mode": "code", "percent": 70,
             "proxy_model": None, "reference": {}, "source": "final",
             "stage1": {"grad_accum": 4, "n_hard_negatives": 7}, "transfer": "ratio", "weights": None},
    "tdro-weights": {"lr_alpha": 0.02, "max_norm": 1.0, "measure": "relative", "mode": "code", "reference": None,
                     "reference_model": None},
    "uniform": {},
}
# Options added since whose default is a named value of what the method did before (not None/empty): the
# default must stay that value, so existing cells keep their keys and numbers.
NEUTRAL_ADDITIONS = {
    "kmeans_metric": "l2",          # faiss L2 k-means: the clustering ClusterDRO always ran (paper 001's code)
    "optimizer": "adamw",           # the trainer's AdamW, as before LAMB became a named mode
    "judge_reference": "positive",  # the judge compares with the positive, as before the w/o-ground-truth mode
    "judge_error": 0.0,             # the oracle judge errs never unless asked (tiny-scale stand-in)
    "generate_mode": "pdbg",        # positive-document-based generation, the only mode before 'direct'
    "episode_lr": "single",         # one schedule and optimizer over the run, as before the per-episode restart
    "restart_horizon": 60000,       # read only under episode_lr restart
    "restart_total": 300000,        # read only under episode_lr restart
    "restart_floor": 0.2,           # read only under episode_lr restart
}

# A paper (section, table), the spec, an official code file (owner/repo path) or the harness's own choice and why.
SOURCE_MARKS = ("paper ", "Sec.", "§", "Table", "METHODS.md", "/")


@dataclass(frozen=True)
class _Demo:
    rate: float = option(0.5, doc="a rate", bounds="(0, 1]", source="paper 000 §1")
    mode: str = option("a", doc="a mode", choices=("a", "b"), source="harness default: the simpler one")
    names: list[str] = option(["x"], doc="names", source="harness default: one")
    limit: int | None = option(None, doc="a cap", bounds="[1, inf)", source="harness default: no cap")


def test_every_method_is_declared_and_its_defaults_are_the_old_ones():
    assert set(OLD_DEFAULTS) <= set(list_methods())
    for name in list_methods():
        cls = type(get_method(name))
        assert cls.Options.__module__ != "types", name          # a typed declaration, not one made from a dict
        if name not in OLD_DEFAULTS:                            # a method added since: declared is enough
            continue
        # Options added later (e.g. the composable-loss ``base``) must default to what changes nothing.
        added = {k: v for k, v in defaults(cls.Options).items() if k not in OLD_DEFAULTS[name]}
        assert all(v in (None, {}, "", ()) or (k in NEUTRAL_ADDITIONS and v == NEUTRAL_ADDITIONS[k])
                   for k, v in added.items()), (name, added)
        old = {k: v for k, v in defaults(cls.Options).items() if k in OLD_DEFAULTS[name]}
        assert old == OLD_DEFAULTS[name], name
        resolved = get_method(name).resolve_options({})
        assert {k: v for k, v in resolved.items() if k in OLD_DEFAULTS[name]} == OLD_DEFAULTS[name], name


def test_every_default_and_preset_value_has_a_source():
    for name in list_methods():
        cls = type(get_method(name))
        for info in option_infos(cls.Options):
            assert info.source.strip() and not info.source.startswith("undeclared"), (name, info.name)
            ok = (info.source.startswith("harness default: ") or any(mark in info.source for mark in SOURCE_MARKS))
            assert ok, (name, info.name, info.source)
            assert info.doc, (name, info.name)
        for scale, p in cls.presets.items():
            assert isinstance(p, Preset)
            for key in p:
                assert p.source(key) and not p.source(key).startswith("undeclared"), (name, scale, key)


def test_unknown_option_is_refused_with_did_you_mean_and_the_list():
    with pytest.raises(ConfigError) as exc:
        get_method("peg").resolve_options({"alpah": 0.3})
    message = str(exc.value)
    assert "method 'peg': unknown option(s) alpah" in message and "did you mean 'alpha'?" in message
    assert "options: a_mode, alpha, base, base_options, beta" in message


def test_wrong_choice_type_and_range_are_refused():
    with pytest.raises(ConfigError, match="method 'peg': unknown a_mode 'both': a_mode must be one of pos, neg"):
        get_method("peg").resolve_options({"a_mode": "both"})
    with pytest.raises(ConfigError, match="weight_queries must be true or false, got 'yes'"):
        get_method("peg").resolve_options({"weight_queries": "yes"})
    with pytest.raises(ConfigError, match=r"alpha must lie in \[0, 1\], got 1.5"):
        get_method("peg").resolve_options({"alpha": 1.5})
    problems = option_problems(_Demo, {"rate": 0, "mode": "c", "names": "x", "limit": 0, "lmit": 2})
    assert [key for key, _ in problems] == ["lmit", "rate", "mode", "names", "limit"]
    assert validate_options(_Demo, {"rate": "1e-1", "limit": 3}) == {"rate": 0.1, "mode": "a", "names": ["x"],
                                                                    "limit": 3}


def test_validate_options_prefixes_every_problem_with_where():
    with pytest.raises(ConfigError) as exc:
        validate_options(get_method("peg"), {"a_mode": "both", "beta": "high"}, where="suite.yaml:12: ")
    lines = str(exc.value).splitlines()
    assert len(lines) == 2 and all(line.startswith("suite.yaml:12: method 'peg': ") for line in lines)
    validate_options(type(get_method("peg")), {"beta": 0.2})          # a class works as well as an instance


def test_defaults_are_fresh_copies_and_read_only_on_the_class():
    first, second = defaults(_Demo), defaults(_Demo)
    first["names"].append("y")
    assert second["names"] == ["x"]
    with pytest.raises(TypeError):
        get_method("tdro").default_options["percent"] = 1          # type: ignore[index]


def test_a_plugin_with_a_plain_default_options_dict_still_works():
    class Plugin(Method):
        default_options = {"gain": 2, "tags": ["a"]}
        presets = {"tiny": {"steps": 3}}

    assert Plugin().resolve_options({"gain": 3}) == {"gain": 3, "tags": ["a"]}
    with pytest.raises(ConfigError, match="unknown option"):
        Plugin().resolve_options({"gian": 3})
    assert Plugin.presets["tiny"].source("steps").startswith("undeclared")
    assert NoOptions is Method.Options


def test_presets_carry_sources_and_stay_plain_mappings():
    base = preset({"lr": 1e-4, "steps": 10}, "paper 000 Table 6", {"steps": "harness default: short"})
    assert dict(base) == {"lr": 1e-4, "steps": 10} and base.source("lr") == "paper 000 Table 6"
    assert base.source("steps") == "harness default: short"
    small = base.derive({"lr": 2e-5}, default_source="harness default: MiniLM")
    assert small.source("lr") == "harness default: MiniLM" and small.source("steps") == "harness default: short"
    with pytest.raises(TypeError):
        small["lr"] = 1.0                                                # type: ignore[index]
    for name in list_methods():                                         # Method.spec still reads them
        cls = type(get_method(name))
        for scale in cls.presets:
            assert cls.spec(scale).steps > 0


def test_harness_list_methods_options(capsys):
    from harness.cli.list import lines

    plain = lines("methods")
    assert len(plain) == len(list_methods()) and not any("source:" in line for line in plain)
    detailed = "\n".join(lines("methods", with_options=True))
    assert "alpha: float = 0.5; in [0, 1]; source: paper 002 §3.1" in detailed
    assert "a_mode: str = 'pos'; one of pos, neg; source:" in detailed

    from harness.cli import main

    assert main(["list", "methods", "--options", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    peg = {o["name"]: o for o in next(m for m in data if m["name"] == "peg")["options"]}
    assert peg["alpha"]["default"] == 0.5 and peg["alpha"]["source"].startswith("paper 002")
    assert peg["a_mode"]["choices"] == ["pos", "neg"]
    presets = next(m for m in data if m["name"] == "peg")["presets"]
    assert presets["paper"]["lr"] == {"value": 1e-5, "source": "paper 002 (METHODS.md 3.1)"}
