"""The ``echo-splade`` method on a tiny random Llama decoder with an *untied* LM head: its loss recomputed by
hand from the LM logits of the second occurrence, LoRA and full fine-tuning leave the input embeddings and
the LM head bit-identical while the trained weights move, the saved run evaluates through the echo sparse
encoder with the same weights as training, the interpretability share is recorded, and bad input is
refused at plan time."""
from __future__ import annotations

import json
import random

import pytest
import torch
from safetensors.torch import load_file
from trainutil import plain_step

from harness.encoders.tiny import TINY_WORDS, make_tiny_decoder
from harness.errors import ConfigError
from methods.echo_splade import EchoSplade, frozen_modules, is_tied, top_terms_in_text

pytestmark = pytest.mark.usefixtures("one_thread")
CONTENT = [w for w in TINY_WORDS if len(w) > 3]


def make_data(rows: int = 12, seed: int = 0):
    """Two sources of short sentences in the tiny decoder's vocabulary."""
    from harness.data.collections import TrainingData, TrainingSource
    from harness.data.training import TrainingRow

    rng = random.Random(seed)

    def sentence(n: int) -> str:
        return " ".join(rng.choice(CONTENT) for _ in range(n))

    sources = [TrainingSource(name=f"src{s}", rows=[TrainingRow(sentence(4), [sentence(8)], [sentence(8)])
                                                    for _ in range(rows)],
                              language="en", task="retrieval", symmetric=False, prompt="", fingerprint=f"tiny-{s}")
               for s in range(2)]
    return TrainingData(sources)


@pytest.fixture(scope="module")
def untied(tmp_path_factory) -> str:
    return str(make_tiny_decoder(tmp_path_factory.mktemp("untied") / "decoder", lm_head="untied"))


def spec_for(model: str, **overrides):
    base = dict(model=model, batch_size=6, steps=3, warmup_steps=0, save_every=0, query_max_length=12,
                doc_max_length=16, lr=5e-3, method_options={"lambda_warmup_steps": 4, "lambda_q": 0.01,
                                                            "lambda_d": 0.02, "interpretability_texts": 12})
    merged = {**base, **overrides}
    merged["method_options"] = {**base["method_options"], **overrides.get("method_options", {})}
    return EchoSplade.spec("tiny", **merged)


def test_tiny_decoder_lm_head_options(tmp_path):
    from transformers import AutoModelForCausalLM

    untied = AutoModelForCausalLM.from_pretrained(make_tiny_decoder(tmp_path / "u", lm_head="untied"))
    tied = AutoModelForCausalLM.from_pretrained(make_tiny_decoder(tmp_path / "t", lm_head="tied"))
    assert not is_tied(untied) and is_tied(tied)
    assert torch.equal(untied.lm_head.weight, untied.model.embed_tokens.weight)      # starts out aligned
    with pytest.raises(ConfigError, match="lm_head"):
        make_tiny_decoder(tmp_path / "x", lm_head="loose")


@pytest.mark.parametrize("echo", [True, False])
def test_loss_is_infonce_plus_flops_on_the_second_occurrence(untied, echo):
    from harness.train.context import TrainContext
    from harness.train.model import build_model

    method = EchoSplade()
    spec = spec_for(untied, lora=None, method_options={"lambda_q": 0.3, "lambda_d": 0.1, "lambda_warmup_steps": 10,
                                                       "echo": echo})
    model, tok, _ = build_model(spec, head=method.representation_head(spec))
    data = make_data()
    ctx = TrainContext(spec=spec, data=data, model=model, tokenizer=tok, device=torch.device("cpu"),
                       options=method.resolve_options(dict(spec.method_options)))
    method.configure(ctx)
    ctx.batch = method.make_batch([(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)], ctx, 0)

    def weights(view: str) -> torch.Tensor:
        feats = ctx.batch.features[view]
        mask = feats["attention_mask"]
        logits = model.backbone(input_ids=feats["input_ids"], attention_mask=(mask > 0).long(),
                                logits_to_keep=0).logits
        act = torch.log1p(torch.relu(logits)) * (mask == 2).unsqueeze(-1)       # second occurrence only
        words = {"query": 4, "passage": 8}[view]
        assert (mask == 2).sum(1).tolist() == [words] * len(mask)               # the text's words, once
        # "<s>", "Document"/"Query", ":" ... "again", ":" ... "</s>" around the text (read twice with echo)
        assert (mask > 0).sum(1).tolist() == [2 * words + 7 if echo else words + 4] * len(mask)
        # the marked mask makes the backbone compute logits from the first pooled column on only
        first = int((mask == 2).any(0).nonzero()[0])
        cut = model.backbone(input_ids=feats["input_ids"], attention_mask=mask).logits
        assert cut.shape[1] == mask.shape[1] - first and torch.allclose(cut, logits[:, first:], atol=1e-6)
        return act.amax(dim=1)

    with torch.no_grad():
        q, p = weights("query"), weights("passage")
        infonce = torch.nn.functional.cross_entropy(q @ p.T, torch.arange(len(q)))     # in-batch negatives only
        flops = (q.mean(0) ** 2).sum(), (p.mean(0) ** 2).sum()
        expected = float(infonce + 0.3 / 100 * flops[0] + 0.1 / 100 * flops[1])         # first call: lambda / T^2
    result = plain_step(model, ctx, method)
    assert result.loss == pytest.approx(expected, rel=1e-5)
    assert method.scalars()["nnz_q"] > 0
    # the same under the gradient cache (the marked masks are split with the features)
    again = plain_step(model, ctx, method, gradcache_chunk=2)
    assert again.loss == pytest.approx(expected, rel=1e-5)


def _train(model: str, workdir, **overrides):
    from harness.train.trainer import Trainer

    spec = spec_for(model, **overrides)
    method = EchoSplade()
    trainer = Trainer(spec, make_data(), workdir, method=method)
    trainer.run()
    return trainer, json.loads((workdir / "method" / "echo_splade.json").read_text())


def test_lora_leaves_embeddings_and_head_bit_identical(untied, tmp_path):
    from transformers import AutoModelForCausalLM

    trainer, record = _train(untied, tmp_path / "run")
    base = AutoModelForCausalLM.from_pretrained(untied)
    trained = frozen_modules(trainer.model.backbone)
    assert torch.equal(trained["input_embeddings"].weight, base.get_input_embeddings().weight)
    assert torch.equal(trained["lm_head"].weight, base.get_output_embeddings().weight)
    lora = {n: p for n, p in trainer.model.named_parameters() if "lora_B" in n}
    assert lora and all(p.requires_grad for p in lora.values())
    assert sum(float(p.detach().abs().sum()) for p in lora.values()) > 0     # initialised at 0, moved by training
    trainable = {n.split(".")[-3] for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable == {"lora_A", "lora_B"}
    targets = {n.split(".")[-4] for n in lora}
    assert targets == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert record["tuning"] == "lora" and record["tied_head"] is False
    assert record["frozen_unchanged"] == {"input_embeddings": True, "lm_head": True}
    share = record["interpretability"]
    assert share["before"]["texts"] == 12 and 0 <= share["before"]["mean_share"] <= 1
    assert 0 <= share["after"]["mean_share"] <= 1


def test_full_finetuning_keeps_the_head_frozen_and_evaluates_like_training(untied, tmp_path):
    from harness.encoders.echo_inputs import build_echo_inputs, marked_mask
    from harness.encoders.sparse import EchoSparseEncoder, is_sparse_model, load_sparse_encoder

    run = tmp_path / "run"
    trainer, record = _train(untied, run, lora=None)
    before, after = load_file(f"{untied}/model.safetensors"), load_file(str(run / "final" / "model.safetensors"))
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert torch.equal(before[name], after[name]), name
    moved = [n for n in before if "layers" in n and not torch.equal(before[n], after[n])]
    assert any("q_proj" in n for n in moved) and any("down_proj" in n for n in moved)
    assert record["tuning"] == "full-frozen-head" and record["frozen_unchanged"]["lm_head"] is True

    # harness eval's sparse path: the run is a sparse model read through its echo settings
    assert is_sparse_model(str(run))
    encoder = load_sparse_encoder(str(run))
    assert isinstance(encoder, EchoSparseEncoder)
    identity = encoder.identity()
    assert identity["echo"] is True and identity["include_eos"] is False
    assert identity["doc_template"] == "<s>Document:{!%%text%%}\nDocument again:{%%text%%}{</s>}"
    assert (identity["query_max_length"], identity["doc_max_length"]) == (12, 16)
    texts = [" ".join(CONTENT[i:i + 6]) for i in range(0, 30, 6)]
    got = torch.from_numpy(encoder.encode_docs(texts, progress=False).to_dense())
    ids, attention, pooling = build_echo_inputs(trainer.tokenizer, texts, identity["doc_template"], 16)
    trainer.model.eval()
    with torch.no_grad():
        expected = trainer.model(input_ids=ids, attention_mask=marked_mask(attention, pooling))
    assert torch.allclose(got, expected, atol=1e-5)
    # another template or include_eos is another cache entry
    other = load_sparse_encoder(str(run), include_eos=True)
    assert other.identity() != identity
    plain = load_sparse_encoder(str(run), echo=False)
    assert plain.identity()["doc_template"] == "<s>Document:{%%text%%}{</s>}"
    # a protocol's query prompt goes into the instructed echo template
    prompted = load_sparse_encoder(str(run), query_prompt="find the passage").identity()
    assert prompted["query_template"].startswith("<s>Instruct:{!%%prompt%%,}")
    assert prompted["query_prompt"] == "find the passage"
    with pytest.raises(ConfigError, match="no %%prompt%% piece"):
        load_sparse_encoder(str(run), query_prompt="x", query_template="<s>Q:{!%%text%%}\nQ:{%%text%%}")


def test_lora_run_evaluates_through_its_adapter(untied, tmp_path):
    from harness.encoders.echo_inputs import build_echo_inputs, marked_mask
    from harness.encoders.sparse import load_sparse_encoder

    run = tmp_path / "run"
    trainer, _ = _train(untied, run)
    assert (run / "final" / "adapter_config.json").is_file()
    encoder = load_sparse_encoder(str(run))
    texts = ["cat dog bird", "river city house road"]
    got = torch.from_numpy(encoder.encode_queries(texts, progress=False).to_dense())
    ids, attention, pooling = build_echo_inputs(trainer.tokenizer, texts, encoder.query_template, 12)
    trainer.model.eval()
    with torch.no_grad():
        expected = trainer.model(input_ids=ids, attention_mask=marked_mask(attention, pooling))
    assert torch.allclose(got, expected, atol=1e-4)       # the adapter merged into the base weights


def test_top_terms_in_text():
    weights = torch.zeros(10)
    weights[[1, 2, 3, 7]] = torch.tensor([0.5, 3.0, 2.0, 1.0])
    assert top_terms_in_text(weights, [2, 7, 9], k=2) == 0.5            # top-2 = {2, 3}: 2 is in the text
    assert top_terms_in_text(weights, [2, 7, 9], k=20) == 0.5           # only 4 positive terms: 2 of them
    assert top_terms_in_text(weights.numpy(), [1, 2, 3, 7], k=3) == 1.0
    assert top_terms_in_text(torch.zeros(10), [1], k=3) != top_terms_in_text(torch.zeros(10), [1], k=3)   # NaN
    with pytest.raises(ConfigError):
        top_terms_in_text(weights, [1], k=0)


# ---------------------------------------------------------------------- bad input
def test_a_decoder_without_lm_head_is_refused(tmp_path):
    bare = str(make_tiny_decoder(tmp_path / "bare"))                # LlamaModel: no LM head
    with pytest.raises(ConfigError, match="LlamaModel without a causal-LM head"):
        EchoSplade().representation_head(spec_for(bare))


def test_a_bert_encoder_is_refused(tmp_path):
    from trainutil import make_tiny_bert

    bert = str(make_tiny_bert(tmp_path / "bert", mlm=True))
    with pytest.raises(ConfigError, match="BertForMaskedLM without a causal-LM head"):
        EchoSplade().representation_head(spec_for(bert))


def test_splade_refuses_a_model_without_mlm_head(untied):
    from methods.splade import Splade

    spec = Splade.spec("tiny", model=untied)
    with pytest.raises(ConfigError, match="LlamaForCausalLM without a masked-LM head"):
        Splade().representation_head(spec)


@pytest.mark.parametrize("options, message", [
    ({"doc_template": "<s>Document:{!%%text%%}{</s>}"}, "document template.*no braced"),
    ({"query_template": "<s>Query: %%text%%"}, "query template.*outside braces"),
    ({"quantization": "8bit"}, "unknown quantization '8bit'"),
    ({"echo": "yes"}, "echo must be true or false"),
    ({"query_prompt": "find", "query_template": "<s>Q:{%%text%%}"}, "no %%prompt%% piece"),
])
def test_bad_options_are_refused_at_plan_time(untied, options, message):
    from harness.train.plan import training_plan

    spec = spec_for(untied, method_options=options)
    with pytest.raises(ConfigError, match=message):
        EchoSplade().resolve_options(dict(spec.method_options))
    with pytest.raises(ConfigError, match=message):
        training_plan(spec, make_data(), EchoSplade())


def test_lora_outside_the_projections_and_instructions_are_refused(untied, tmp_path):
    with pytest.raises(ConfigError, match="projection layers only"):
        EchoSplade().representation_head(spec_for(untied, lora={"r": 4, "alpha": 8, "target_modules": ["lm_head"]}))
    with pytest.raises(ConfigError, match="use_instructions"):
        _train(untied, tmp_path / "run", use_instructions=True)


def test_qlora_is_planned_anywhere_but_refused_without_gpu_and_bitsandbytes(untied, tmp_path):
    from harness.train.plan import training_plan
    from methods.echo_splade import qlora_unavailable

    spec = spec_for(untied, method_options={"quantization": "4bit"})
    plan = training_plan(spec, make_data(), EchoSplade())
    assert plan["model"]["head"]["quantization"] == "4bit" and plan["model"]["lora"]["r"] == 8
    paper = EchoSplade.spec("paper")
    assert paper.method_options["quantization"] == "4bit" and (paper.lora.r, paper.lora.alpha) == (16, 8)
    with pytest.raises(ConfigError, match="needs lora"):
        EchoSplade().representation_head(spec_for(untied, lora=None, method_options={"quantization": "4bit"}))
    if qlora_unavailable() is None:
        pytest.skip("bitsandbytes and a GPU are present: QLoRA would run")
    with pytest.raises(ConfigError, match=r"quantization 4bit \(QLoRA\) needs"):
        EchoSplade().train(spec, make_data(), tmp_path / "run")
    assert not (tmp_path / "run").exists()                    # refused before anything was written


def test_echo_corpus_weights_are_cached_under_template_and_include_eos(untied, tmp_path):
    import shutil

    from harness.data import Corpus
    from harness.encoders.sparse import load_sparse_encoder
    from harness.encoders.sparse_cache import encode_corpus_sparse
    from harness.encoders.sparse_echo import EchoSettings, write_echo_settings

    model = str(shutil.copytree(untied, tmp_path / "decoder"))
    write_echo_settings(model, EchoSettings())             # the untrained decoder read with the echo templates
    texts = [" ".join(CONTENT[i:i + 5]) for i in range(0, 40, 5)]
    corpus = Corpus([f"d{i}" for i in range(len(texts))], [""] * len(texts), texts)
    cache = tmp_path / "cache"
    first = encode_corpus_sparse(load_sparse_encoder(model), corpus, cache, progress=False)
    again = encode_corpus_sparse(load_sparse_encoder(model), corpus, cache, progress=False)
    assert again.key == first.key and again.skipped and not first.skipped
    keys = {first.key}
    for overrides in ({"include_eos": True}, {"echo": False},
                      {"doc_template": "<s>Passage:{!%%text%%}\nPassage again:{%%text%%}{</s>}"}):
        entry = encode_corpus_sparse(load_sparse_encoder(model, **overrides), corpus, cache, progress=False)
        assert not entry.skipped and entry.key not in keys, overrides
        keys.add(entry.key)
    echo = first.vectors().to_dense()
    plain = encode_corpus_sparse(load_sparse_encoder(model, echo=False), corpus, cache, progress=False)
    assert plain.skipped and echo.shape == plain.vectors().to_dense().shape
    assert not (echo == plain.vectors().to_dense()).all()


def test_echo_settings_file_is_validated(tmp_path):
    from harness.encoders.sparse_echo import read_echo_settings
    from harness.errors import InputError

    (tmp_path / "harness_echo.json").write_text('{"echo": true, "templat": "x"}')
    with pytest.raises(InputError, match="unknown key"):
        read_echo_settings(tmp_path)
    (tmp_path / "harness_echo.json").write_text('{"doc_template": "<s>{!%%text%%}"}')
    with pytest.raises(InputError, match="no braced"):
        read_echo_settings(tmp_path)


def test_saved_top_k_prunes_unless_overridden(untied, tmp_path):
    import shutil

    from harness.encoders.sparse import load_sparse_encoder
    from harness.encoders.sparse_echo import EchoSettings, write_echo_settings

    model = str(shutil.copytree(untied, tmp_path / "decoder"))
    write_echo_settings(model, EchoSettings(top_k=3))
    texts = ["cat dog bird fish tree", "river city house"]
    pruned = load_sparse_encoder(model)
    assert (pruned.query_top_k, pruned.doc_top_k) == (3, 3) and pruned.identity()["doc_top_k"] == 3
    full = load_sparse_encoder(model, doc_top_k=1000).encode_docs(texts, progress=False)
    kept = pruned.encode_docs(texts, progress=False)
    assert kept.nnz.tolist() == [3, 3] and full.nnz.min() > 3
    dense = full.to_dense()
    for i in range(2):                                   # the three largest weights of the full vector
        top = sorted(range(dense.shape[1]), key=lambda j: -dense[i, j])[:3]
        assert sorted(kept.row(i)[0].tolist()) == sorted(top)
    with pytest.raises(ConfigError, match="eval_top_k"):
        EchoSplade().resolve_options({"eval_top_k": 0})


@pytest.mark.parametrize("lora", [True, False])
def test_kill_and_resume_reproduces_the_run(untied, tmp_path, lora):
    from harness.train.logs import read_log

    class Killed(Exception):
        pass

    class KilledAfterStep3(EchoSplade):
        name = "echo-splade"

        def on_step_end(self, ctx):
            super().on_step_end(ctx)
            if ctx.step == 3:
                raise Killed

    overrides = {} if lora else {"lora": None}
    spec, data = spec_for(untied, steps=5, save_every=2, **overrides), make_data()
    EchoSplade().train(spec, data, tmp_path / "straight")
    with pytest.raises(Killed):
        KilledAfterStep3().train(spec, data, tmp_path / "resumed")
    EchoSplade().train(spec, data, tmp_path / "resumed")                 # from the step-2 checkpoint
    straight, resumed = (read_log(tmp_path / run / "train_log.jsonl") for run in ("straight", "resumed"))
    assert [r["step"] for r in resumed] == list(range(1, 6))
    assert [r["loss"] for r in straight] == [r["loss"] for r in resumed]              # bit-exact, step for step
    assert [r["method"] for r in straight] == [r["method"] for r in resumed]
    records = [json.loads((tmp_path / run / "method" / "echo_splade.json").read_text())
               for run in ("straight", "resumed")]
    assert records[0]["interpretability"] == records[1]["interpretability"]
    assert records[1]["frozen_unchanged"] == {"input_embeddings": True, "lm_head": True}


def test_trained_splade_and_echo_runs_give_sparse_encoders_to_suites(untied, tmp_path):
    from trainutil import make_tiny_bert

    from harness.encoders.sparse import EchoSparseEncoder, SparseMLMEncoder
    from harness.train.result import Checkpoint
    from methods.splade import Splade

    mlm = str(make_tiny_bert(tmp_path / "mlm", mlm=True))
    spec = Splade.spec("tiny", model=mlm, batch_size=6, steps=1, warmup_steps=0, save_every=0,
                       query_max_length=12, doc_max_length=16)
    Splade().train(spec, make_data(), tmp_path / "splade")
    encoder = Splade().encoder(Checkpoint.load(tmp_path / "splade"))       # what the suite runner calls
    assert type(encoder) is SparseMLMEncoder and encoder.kind == "sparse"
    assert encoder.encode_queries(["cat dog"], progress=False).nnz[0] > 0
    _train(untied, tmp_path / "echo", steps=1)
    echo = EchoSplade().encoder(Checkpoint.load(tmp_path / "echo"))
    assert isinstance(echo, EchoSparseEncoder) and echo.kind == "sparse"
