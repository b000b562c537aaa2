"""The transformers judge backend with a tiny random Llama and a character tokenizer with a chat
template (plumbing only: chat formatting, left-padded batches, per-call seeded sampling, the
label-token scoring mode, parse failures recorded as -1)."""
from __future__ import annotations

import string

import pytest
import torch

from harness.errors import ConfigError
from methods.mining.judge import SAMPLINGS, Sampling, Triple, judge_triples
from methods.mining.judge_cache import VoteCache
from methods.mining.judge_hf import TransformersJudge, _nucleus
from methods.mining.judge_spec import make_judge

TEMPLATE = ("{% for m in messages %}<|user|>{{ m['content'] }}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def make_tiny_chat_model(path, seed=0, template=True):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<eos>", "<|user|>", "<|assistant|>"]
    vocab = {t: i for i, t in enumerate(specials + list(string.printable))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")   # one token per character
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>",
                                   additional_special_tokens=["<|user|>", "<|assistant|>"])
    if template:
        fast.chat_template = TEMPLATE
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, intermediate_size=32, max_position_embeddings=4096,
                         pad_token_id=0, eos_token_id=2, bos_token_id=None)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(path)
    fast.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_chat_model(tmp_path_factory.mktemp("judge") / "tiny")


def triples(n=5):
    return [Triple(f"question {i}?", f"answer {i}", f"candidate text {'x' * i}") for i in range(n)]


def boost(judge, char, amount=50.0):
    """Make the model prefer one character (a hook on the LM head)."""
    tid = judge.tokenizer.convert_tokens_to_ids(char)

    def hook(module, inputs, output):
        output[..., tid] += amount
        return output

    return judge.model.lm_head.register_forward_hook(hook)


def test_nucleus():
    p = torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]], dtype=torch.float64)
    assert torch.allclose(_nucleus(p, 0.7), torch.tensor([[0.625, 0.375, 0.0], [0.0, 0.375, 0.625]],
                                                         dtype=torch.float64))
    assert torch.allclose(_nucleus(p, 0.4), torch.tensor([[1.0, 0, 0], [0, 0, 1.0]], dtype=torch.float64))


def test_generate_mode_is_seeded_batch_independent_and_records_parse_failures(tiny):
    judge = TransformersJudge(str(tiny), max_new_tokens=4, batch_size=2)
    a, stats = judge_triples(judge, triples(), seed=0, samplings=SAMPLINGS[:2])
    judge.batch_size = 5
    b, _ = judge_triples(judge, triples(), seed=0, samplings=SAMPLINGS[:2])
    assert [v.votes for v in a] == [v.votes for v in b]                 # batch composition does not matter
    assert all(x in (-1, 0, 1, 2) for v in a for x in v.votes)
    # a random model over 100 characters rarely says 0/1/2: its replies are recorded as -1, not raised
    assert stats.asked == 10 and stats.unlabelled == sum(x == -1 for v in a for x in v.votes) >= 5
    assert stats.problems and "without a label" in stats.problems[0]
    replies = judge.complete(["hello"] * 2, SAMPLINGS[0], [1, 2])
    assert replies[0].text != replies[1].text and all(len(r.text) <= 4 for r in replies)


def test_generate_mode_reads_the_label(tiny):
    judge = TransformersJudge(str(tiny), max_new_tokens=6, batch_size=3)
    handle = boost(judge, "2")
    try:
        verdicts, stats = judge_triples(judge, triples(4))
        stopped = judge.complete(["p"], SAMPLINGS[0], [0])[0].text
    finally:
        handle.remove()
    assert [v.votes for v in verdicts] == [[2] * 4] * 4 and stats.unlabelled == 0
    assert stopped == "2"                                                # stops once the label is there
    handle = boost(judge, "z")
    try:
        replies = judge.complete(["p"], SAMPLINGS[0], [0])
    finally:
        handle.remove()
    assert replies[0].text == "zzzzzz" and replies[0].label == -1        # max_new_tokens, no label


def test_score_mode_samples_only_labels_and_follows_the_logits(tiny):
    judge = TransformersJudge(str(tiny), mode="score", batch_size=4)
    verdicts, stats = judge_triples(judge, triples(6), samplings=SAMPLINGS)
    assert all(x in (0, 1, 2) for v in verdicts for x in v.votes) and stats.unlabelled == 0
    # near-zero temperature: the argmax of the model's next-token logits over "0", "1", "2"
    cold = Sampling(1.0, 1e-4)
    got = [r.text for r in judge.complete(["first", "a longer second prompt"], cold, [0, 1])]
    for prompt, text in zip(["first", "a longer second prompt"], got):
        chat = judge.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                   tokenize=False)
        ids = judge.tokenizer(chat, return_tensors="pt", add_special_tokens=False).input_ids
        with torch.no_grad():
            logits = judge.model(ids).logits[0, -1, judge.label_ids]
        assert text == str(int(logits.argmax()))


def test_identity_cache_and_refusals(tiny, tmp_path):
    judge = make_judge(f"transformers:{tiny}", mode="score", batch_size=None)
    assert isinstance(judge, TransformersJudge)
    ident = judge.identity()
    assert ident["backend"] == "transformers" and len(ident["fingerprint"]) == 64 and ident["mode"] == "score"
    other = TransformersJudge(str(make_tiny_chat_model(tmp_path / "other", seed=1)), mode="score")
    assert other.identity()["fingerprint"] != ident["fingerprint"]
    first, _ = judge_triples(judge, triples(3), cache=VoteCache(tmp_path / "c"))
    judge.model = None                                                   # a rerun must not touch the model
    again, stats = judge_triples(judge, triples(3), cache=VoteCache(tmp_path / "c"))
    assert [v.votes for v in again] == [v.votes for v in first] and stats.asked == 0
    with pytest.raises(ConfigError, match="no chat template"):
        TransformersJudge(str(make_tiny_chat_model(tmp_path / "plain", template=False)))
    with pytest.raises(ConfigError, match="unknown transformers judge mode"):
        TransformersJudge(str(tiny), mode="beam")
