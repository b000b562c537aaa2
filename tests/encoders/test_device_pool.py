"""Multi-device encoding (harness.encoders.devices): one spawned worker process per device gives the
vectors and the cache entry of a single process; a killed worker's finished shards are reused; devices
that do not exist are refused naming torch.cuda.device_count()."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.data import Corpus
from harness.encoders.cache import encode_corpus
from harness.encoders.devices import check_devices, describe_devices, parse_devices
from harness.encoders.hf import HFEncoder, encoding_options
from harness.errors import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class KillOnceEncoder(HFEncoder):
    """Dies (``os._exit``, as a killed process would) on the shard that holds ``marker``, once: the flag
    file is removed first, so the run that resumes encodes that shard normally."""

    def __init__(self, *args, flag: Path, marker: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.flag, self.marker = flag, marker

    def encode_docs(self, texts, **kwargs):
        if self.flag.exists() and any(self.marker in t for t in texts):
            self.flag.unlink()
            os._exit(9)
        return super().encode_docs(texts, **kwargs)


def _entry_files(emb) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(emb.path.glob("shard-*.npy"))}


def test_device_spelling_and_refusal_of_missing_gpus():
    assert parse_devices("cpu, CPU") == ("cpu", "cpu")
    assert parse_devices(["cuda", "cuda:1"]) == ("cuda:0", "cuda:1")
    assert parse_devices("auto") == ("auto",)
    for bad, message in (("tpu:0", "unknown device 'tpu:0'"), ("cuda:x", "unknown device"), ("cpu,,cpu", "empty"),
                         ("auto,cpu", "'auto' stands alone"), (3, "comma-separated")):
        with pytest.raises(ConfigError, match=message):
            parse_devices(bad)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    missing = f"cuda:{count}"
    refusal = rf"device '{missing}' does not exist: torch.cuda.device_count\(\) is {count}"
    with pytest.raises(ConfigError, match=refusal):
        check_devices(("cpu", missing))
    assert check_devices(("auto",)) == (tuple(f"cuda:{i}" for i in range(count)) or ("cpu",))
    assert describe_devices(("cpu", "cpu")) == "cpu, cpu (2 worker processes, one per device)"
    # Suite files: the spelling is checked at parse time, existence only when encoding.
    assert encoding_options({"devices": "cuda:0,cuda:1"}) == {"devices": ("cuda:0", "cuda:1")}
    with pytest.raises(ConfigError, match="unknown device"):
        encoding_options({"devices": ["gpu0"]})


def test_device_list_is_not_part_of_the_identity(tiny_bert_dir):
    one = HFEncoder(str(tiny_bert_dir), pooling="mean")
    two = HFEncoder(str(tiny_bert_dir), pooling="mean", devices="cpu,cpu")
    assert two.devices == ("cpu", "cpu") and two.device == torch.device("cpu")
    assert one.identity() == two.identity() == two.for_device("cpu").identity()
    clone = two.for_device("cpu")
    assert clone.devices is None and clone._model is None and clone.settings == two.settings
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="device 'cuda:0' does not exist: torch.cuda.device_count"):
            HFEncoder(str(tiny_bert_dir), devices="cuda:0,cuda:1")
    assert HFEncoder(str(tiny_bert_dir), backend="int8", devices="cpu,cpu").identity()["backend"]

def test_two_cpu_workers_give_the_single_process_entry_and_resume_after_a_killed_worker(
        tiny_bert_dir, tiny_corpus, tmp_path, monkeypatch):
    """One test, two pool starts (spawning workers costs seconds): the first pooled run loses a worker on its
    last shard, the second encodes only what is missing; the entry is byte-identical to one process's."""
    monkeypatch.setenv("HARNESS_NUM_THREADS", "1")
    torch.set_num_threads(1)
    settings = {"pooling": "mean", "normalize": True}
    texts = [t + " — naïve café" if i % 2 else t for i, t in enumerate(tiny_corpus.texts)]   # some non-ASCII
    tiny_corpus = Corpus(tiny_corpus.ids, tiny_corpus.titles, texts)
    sizes = [sys.getsizeof(t) for t in texts]
    reference = encode_corpus(HFEncoder(str(tiny_bert_dir), **settings), tiny_corpus, tmp_path / "ref",
                              shard_size=5, progress=False)
    flag = tmp_path / "kill-once"
    flag.touch()
    last = texts[-1][:-1]                 # (a new str) in shard 5 of 6, handed out only after 4 shards finished
    encoder = KillOnceEncoder(str(tiny_bert_dir), devices="cpu,cpu", flag=flag, marker=last, **settings)
    with pytest.raises(ConfigError, match=r"worker process died .* shard\(s\) [0-9, ]*5 .*run again"):
        encode_corpus(encoder, tiny_corpus, tmp_path / "cache", shard_size=5, progress=False)
    assert not flag.exists()
    entry = tmp_path / "cache" / "embeddings" / reference.key
    written = sorted(p.name for p in entry.glob("shard-*.npy"))
    assert 4 <= len(written) <= 5 and "shard-00005.npy" not in written
    assert not json.loads((entry / "meta.json").read_text())["complete"]

    resumed = encode_corpus(encoder, tiny_corpus, tmp_path / "cache", shard_size=5, progress=False)
    assert resumed.key == reference.key and resumed.encoded_shards == 6 - len(written)   # only the missing ones
    assert _entry_files(resumed) == _entry_files(reference)                            # byte-identical shards
    np.testing.assert_array_equal(resumed.as_array(), reference.as_array())
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["complete"] and meta["dim"] == 32 and meta["encode_seconds"] > 0
    again = encode_corpus(HFEncoder(str(tiny_bert_dir), devices="cpu,cpu", **settings), tiny_corpus,
                          tmp_path / "cache", shard_size=5, progress=False)
    assert again.skipped                                                                # no worker started
    assert [sys.getsizeof(t) for t in texts] == sizes      # sending shards to workers kept no UTF-8 copy on them


def test_eval_devices_option_reaches_the_encoder_and_refuses_missing_gpus(dataset, tmp_path, capsys, monkeypatch):
    import harness.pipeline as pipeline
    from harness.cli import build_parser, main
    from harness.cli.eval import encoding_overrides

    args = build_parser().parse_args(["eval", "--model", "minilm", "--dataset-dir", str(dataset),
                                      "--devices", "cpu, cpu", "--dtype", "fp32"])
    assert encoding_overrides(args) == {"dtype": "float32", "devices": ("cpu", "cpu")}
    seen: list = []

    def spy(spec, loaded, out, **kwargs):                 # the encoder options, without encoding anything
        seen.append(pipeline.build_encoder(spec, loaded.card))
        raise SystemExit(0)

    monkeypatch.setattr(pipeline, "evaluate_model", spy)
    with pytest.raises(SystemExit):
        main(["eval", "--model", "minilm", "--dataset-dir", str(dataset), "--devices", "cpu,cpu",
              "--out", str(tmp_path / "r")])
    assert seen[0].devices == ("cpu", "cpu") and "devices" not in json.dumps(seen[0].identity())
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--model", "minilm", "--dataset-dir", str(dataset), "--devices", f"cuda:{count}",
              "--out", str(tmp_path / "never")])
    assert exit_info.value.code == 2 and not (tmp_path / "never").exists()
    assert f"device 'cuda:{count}' does not exist: torch.cuda.device_count() is {count}" in capsys.readouterr().err


def test_doctor_lists_the_encoding_devices(capsys):
    from harness.cli import main

    assert main(["doctor", "--format", "json", "--devices", "cpu,cpu"]) == 0
    check = json.loads(capsys.readouterr().out)["checks"][-1]
    assert check["name"] == "encoding devices" and check["ok"]
    assert check["detail"] == "cpu, cpu (2 worker processes, one per device)"
    assert main(["doctor", "--format", "json", "--devices", "cuda:99"]) == 0
    check = json.loads(capsys.readouterr().out)["checks"][-1]
    assert not check["ok"] and "device 'cuda:99' does not exist: torch.cuda.device_count()" in check["why_not"]
    assert main(["doctor", "--format", "json"]) == 0                    # without --devices: no such section
    assert "encoding devices" not in capsys.readouterr().out


def test_suite_encoding_devices_are_parsed_and_change_no_key(tmp_path):
    """``encoding: {devices: ...}`` in a suite file: spelling checked with file and line (GPUs named need not
    exist where the suite is planned), neither the protocol card nor any cell key changes."""
    import yaml

    from harness.ablation.runner import SuiteRun
    from harness.ablation.spec import encoding_kwargs
    from harness.ablation.validate import load_validated

    fixture = Path(__file__).resolve().parents[1] / "ablation" / "fixtures" / "mini.yaml"

    def keys(name: str, scale: dict | None = None, variant: dict | None = None) -> tuple[SuiteRun, dict[str, str]]:
        raw = yaml.safe_load(fixture.read_text())
        raw["scales"]["tiny"].update(scale or {})
        raw["variants"][1].update(variant or {})
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        run = SuiteRun(load_validated(path, "tiny"), "tiny", tmp_path / "r", progress=False)
        return run, {f"{c.id} x {c.benchmark.id}": c.key for c in run.eval_cells}

    plain, plain_keys = keys("plain")
    scale, scale_keys = keys("scale", scale={"encoding": {"devices": "cuda:0,cuda:1", "batch_size": 8}})
    _, variant_keys = keys("variant", variant={"encoding": {"devices": ["cuda:0", "cuda:1"]}})
    assert scale_keys == plain_keys == variant_keys
    assert scale.benchmark("latin_qa").card.fingerprint() == plain.benchmark("latin_qa").card.fingerprint()
    assert encoding_kwargs(scale.train_cells[0].evaluation["encoding"]) == {"devices": ("cuda:0", "cuda:1"),
                                                                            "batch_size": 8}
    _, bf16_keys = keys("bf16", variant={"encoding": {"devices": "cpu", "dtype": "bf16"}})
    for name, key in bf16_keys.items():                       # the dtype does change the variant's keys
        assert (key == plain_keys[name]) == name.startswith("uniform ")
    with pytest.raises(ConfigError) as refused:
        keys("bad", variant={"encoding": {"devices": "cuda:0,tpu"}})
    path = tmp_path / "bad.yaml"
    line = next(i for i, row in enumerate(path.read_text().splitlines(), start=1) if "cuda:0,tpu" in row)
    assert f"bad.yaml:{line}:" in str(refused.value) and "unknown device 'tpu'" in str(refused.value)
