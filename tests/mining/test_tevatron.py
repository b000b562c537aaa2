"""Paper 004's Tevatron recipe per backbone (methods/mining/tevatron.py) and its 12 fastText topics
(methods/mining/topics.py): hand-computed step counts, every field's source, the named modes, and the
Table 11 merge."""
from __future__ import annotations

import pytest
from optional_extras import require_extra

from harness.data.collections import TrainingSource
from harness.data.training import TrainingRow
from harness.errors import ConfigError
from harness.method import get_method
from harness.train.spec import TrainSpec
from methods.mining.tevatron import BACKBONES, TEVATRON_PRESETS, TRAIN_QUERIES, epoch_steps, tevatron_recipe
from methods.mining.tevatron import MIRACL_TRAIN_QUERIES as TEVATRON_TRAIN_TOTAL
from methods.mining.topics import DBPEDIA_14, MERGED_TOPICS, YAHOO_10, merged_topic, topic_labels


def test_training_queries_and_epoch_steps_by_hand():
    # Table 10: 40,203 train queries; 10% validation (4,020) leaves 36,183
    assert TRAIN_QUERIES == 36183
    # ceil(36183 / 24) = 1508 batches per epoch (1507 full + one of 15)
    assert epoch_steps(1, 24) == 1508
    assert epoch_steps(20, 24) == 30160 and epoch_steps(16, 24) == 24128
    assert epoch_steps(20, 48) == 20 * 754        # 36183 / 48 = 753.8
    assert epoch_steps(2, 10, queries=21) == 6
    with pytest.raises(ConfigError):
        epoch_steps(0, 24)


@pytest.mark.parametrize("key,lr,epochs,steps", [("mbert", 3e-6, 16, 24128), ("mdpr", 3e-6, 16, 24128),
                                                 ("me5", 2e-6, 20, 30160), ("bge-m3", 2e-6, 20, 30160)])
def test_backbone_presets(key, lr, epochs, steps):
    p = TEVATRON_PRESETS[f"tevatron-{key}"]
    assert p["model"] == BACKBONES[key].model and p["lr"] == lr and BACKBONES[key].epochs == epochs
    assert p["steps"] == steps and p["warmup_steps"] == -(-steps // 10)
    assert (p["pooling"], p["append_eos"], p["query_max_length"], p["doc_max_length"]) == ("cls", False, 64, 256)
    assert (p["batch_size"], p["n_hard_negatives"], p["precision"]) == (24, 7, "fp16")
    assert (p["weight_decay"], p["schedule"], p["min_lr_ratio"]) == (0.0, "linear", 0.0)       # Adam, HF linear
    assert (p["similarity"], p["normalize"], p["temperature"]) == ("dot", False, 1.0)          # the code's default
    # every field names a paper section or a code file, none a harness default
    for name in p:
        src = p.source(name)
        assert src.startswith(("paper 004", "xir_BDUMDR", "Hugging Face")), (name, src)
    TrainSpec(**dict(p))          # a valid spec


def test_named_modes():
    cos = tevatron_recipe("bge-m3", similarity="cos")
    assert (cos["similarity"], cos["normalize"], cos["temperature"]) == ("cos", True, 1.0)
    assert cos.source("similarity").startswith("paper 004 §3.5")
    code = tevatron_recipe("bge-m3", hardware="4x12")
    assert code["batch_size"] == 48 and code["steps"] == epoch_steps(20, 48)
    assert "README" in code.source("batch_size")
    assert TEVATRON_PRESETS["tevatron-bge-m3-cos"]["similarity"] == "cos"
    assert TEVATRON_PRESETS["tevatron-mbert-4x12"]["steps"] == 16 * 754
    with pytest.raises(ConfigError, match="hardware"):
        tevatron_recipe("bge-m3", hardware="8x3")
    with pytest.raises(ConfigError, match="backbone"):
        tevatron_recipe("xlmr")


def test_mined_paper_preset_is_the_tevatron_bge_m3_recipe():
    mined = get_method("mined")
    assert dict(mined.presets["paper"]) == dict(TEVATRON_PRESETS["tevatron-bge-m3"])
    assert dict(mined.presets["tiny"]) == dict(get_method("uniform").presets["tiny"])    # tiny/small unchanged


def test_merged_topics_table11():
    # every classifier label lands in at most one topic, 12 topics
    members = [m for ms in MERGED_TOPICS.values() for m in ms]
    assert len(MERGED_TOPICS) == 12 and len(members) == len(set(members))
    assert set(members) <= set(DBPEDIA_14) | set(YAHOO_10)
    assert merged_topic("Village", "Sports") == "SP"                    # Yahoo first
    assert merged_topic("Film", "Society & Culture") == "AE"            # Yahoo label of no topic -> DBpedia's
    assert merged_topic("WrittenWork", "Family & Relationships") == "BL"
    assert merged_topic("Unknown", "Society & Culture") == "OT"
    assert merged_topic("Company", "Health") == "LH"


def test_fasttext12_labels_first_positive(tmp_path):
    fasttext = require_extra("fasttext")

    def model(name, pairs):
        f = tmp_path / f"{name}.txt"
        f.write_text("".join(f"__label__{lab} {text}\n" for lab, text in pairs * 6))
        out = tmp_path / f"{name}.bin"
        fasttext.train_supervised(str(f), epoch=60, lr=1.0, dim=8, minCount=1, thread=1, seed=0).save_model(str(out))
        return out

    # DBpedia ids: 10 Animal, 7 Building; Yahoo ids: 6 Sports, 1 Society & Culture
    db = model("db", [("10", "lion tiger zebra"), ("7", "tower bridge castle")])
    ya = model("ya", [("6", "football goal match"), ("1", "culture society custom")])
    rows = [TrainingRow(query="q1", pos=["lion zebra culture society"], neg=[]),  # Animal + Society -> LH
            TrainingRow(query="q2", pos=["castle football goal match"], neg=[]),  # Sports wins -> SP
            TrainingRow(query="lion", pos=["tower bridge culture custom"], neg=[])]  # the positive, not the query
    src = TrainingSource(name="s", path=tmp_path, rows=rows)
    labels = topic_labels(src, ["en"] * 3, f"fasttext12:{db},{ya}")
    assert labels == ["LH", "SP", "GE"]
    with pytest.raises(ConfigError, match="two models"):
        topic_labels(src, ["en"] * 3, f"fasttext12:{db}")


def test_table10_and_table13_counts():
    from suites.training_data.mining import TABLE10_TRAIN_QUERIES, TABLE13_TRAIN_QUERIES

    assert sum(TABLE10_TRAIN_QUERIES.values()) == 40203 == TEVATRON_TRAIN_TOTAL
    assert sum(TABLE13_TRAIN_QUERIES.values()) == 40197
    diff = {k: (v, TABLE13_TRAIN_QUERIES[k]) for k, v in TABLE10_TRAIN_QUERIES.items() if v != TABLE13_TRAIN_QUERIES[k]}
    assert diff == {"id": (4071, 4066), "ja": (3477, 3476)}
