"""Answer normalisation and containment across scripts (MKQA / DPR top-k accuracy)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from harness.data.run import Run
from suites.answers import (
    AnswerMatcher,
    accuracy_at_k,
    contains_normalized,
    has_answer,
    is_unspaced_char,
    normalize_answer,
    normalize_answers,
)


def dpr_style_has_answer(text: str, answer: str) -> bool:
    """The DPR/Contriever rule: token-sequence match with an alnum-run tokenizer (the trap)."""
    tok = re.compile(r"[^\W_]+|[^\w\s]", re.UNICODE)
    t = [x.lower() for x in tok.findall(text)]
    a = [x.lower() for x in tok.findall(answer)]
    return any(t[i:i + len(a)] == a for i in range(len(t) - len(a) + 1))


# ---------------------------------------------------------------- English
def test_english_normalisation_strips_case_punctuation_and_articles():
    assert normalize_answer("The  Beatles!", "en") == "beatles"
    # the lone "a" of U.S.A. is dropped as an article, exactly as SQuAD/DPR normalisation does
    assert normalize_answer("U.S.A.", "en") == "u s"
    assert normalize_answer("U.S.A.", "de") == "u s a"
    assert normalize_answer("an apple, a pear & the fig", "en") == "apple pear fig"


def test_english_containment_respects_word_boundaries():
    passage = "The party was held in Paris; the artist arrived late."
    assert has_answer(passage, ["Paris"], "en")
    assert has_answer(passage, ["the artist"], "en")      # article dropped on both sides
    assert not has_answer(passage, ["art"], "en")          # inside "party"/"artist": no boundary
    assert not has_answer(passage, ["aris"], "en")


def test_english_aliases_any_alias_counts():
    passage = "Sir Ridley Scott directed the film in 1979."
    assert has_answer(passage, ["Ridley Scott", "Sir Ridley Scott"], "en")
    assert has_answer(passage, ["R. Scott", "Ridley Scott"], "en")
    assert not has_answer(passage, ["Tony Scott", "T. Scott"], "en")


# ---------------------------------------------------------------- Chinese
def test_chinese_answer_inside_unsegmented_text():
    passage = "中国的首都是北京，位于华北平原。"
    assert has_answer(passage, ["北京"], "zh")
    # the DPR-style tokenizer sees the whole Han run as one token and misses it
    assert not dpr_style_has_answer(passage, "北京")


def test_chinese_punctuation_fullwidth_and_spaces_are_normalised():
    assert normalize_answer("「北京 市」", "zh") == "北京市"
    assert has_answer("首都：北京市。", ["北京 市"], "zh")
    assert has_answer("他出生于１９８４年。", ["1984年"], "zh")          # NFKC folds full-width digits
    assert not has_answer("中国的首都是北京。", ["上海"], "zh")


def test_chinese_aliases():
    passage = "雷德利·斯科特执导了这部电影。"
    assert has_answer(passage, ["戴维·埃德蒙兹", "雷德利斯科特"], "zh")   # middle dot is punctuation
    assert not has_answer(passage, ["戴维·埃德蒙兹"], "zh")


# ---------------------------------------------------------------- Japanese
def test_japanese_katakana_and_kanji_inside_text():
    passage = "この映画はリドリー・スコットが監督した作品です。"
    assert has_answer(passage, ["リドリー・スコット"], "ja")
    assert has_answer(passage, ["監督"], "ja")
    assert not dpr_style_has_answer(passage, "監督")
    assert not has_answer(passage, ["デイヴ・エドモンズ", "デイブ・エドモンズ"], "ja")


def test_japanese_halfwidth_katakana_matches_fullwidth():
    assert has_answer("ﾘﾄﾞﾘｰ・ｽｺｯﾄの作品", ["リドリー・スコット"], "ja")


# ---------------------------------------------------------------- Thai
def test_thai_answer_inside_unspaced_text():
    passage = "เมืองหลวงของประเทศไทยคือกรุงเทพมหานคร"
    assert has_answer(passage, ["กรุงเทพ"], "th")
    assert has_answer(passage, ["กรุงเทพมหานคร", "บางกอก"], "th")
    assert not dpr_style_has_answer(passage, "กรุงเทพ")
    assert not has_answer(passage, ["เชียงใหม่"], "th")


# ---------------------------------------------------------------- Arabic
def test_arabic_word_match_and_diacritics():
    passage = "عاصمة مصر هي القَاهِرَة، وهي أكبر مدنها."
    assert has_answer(passage, ["القاهرة"], "ar")               # harakat removed on both sides
    assert has_answer(passage, ["القَاهِرَة"], "ar")
    assert has_answer(passage, ["الإسكندرية", "القاهرة"], "ar")  # alias list
    assert not has_answer(passage, ["الإسكندرية"], "ar")
    assert not has_answer(passage, ["قاهر"], "ar")              # spaced script: whole words only


def test_arabic_question_mark_and_tatweel():
    assert normalize_answer("القاهـــرة؟", "ar") == "القاهرة"


# ---------------------------------------------------------------- mixed and edge cases
def test_mixed_script_answers_and_boundaries():
    assert has_answer("iPhone 15は2023年に発売された", ["2023年"], "ja")
    assert has_answer("Apple发布了iPhone 15。", ["iPhone 15"], "zh")
    assert not has_answer("Apple发布了iPhone 150。", ["iPhone 15"], "zh")   # 15 vs 150: digit boundary


def test_empty_and_punctuation_only_answers_never_match():
    assert normalize_answers(["", "  ", "!!!", "the"], "en") == []
    assert not has_answer("anything at all", ["", "?!"], "en")
    assert not contains_normalized("abc", "")


def test_unspaced_char_classification():
    assert all(is_unspaced_char(c) for c in "北京ひらカタก")
    assert not any(is_unspaced_char(c) for c in "aZ9عд ")


# ---------------------------------------------------------------- numbers: decimals, thousands, percent
def squad_style_has_answer(passage: str, answer: str) -> bool:
    """The rule before v2 (SQuAD's remove_punc for every script): all punctuation and symbols dropped."""
    import unicodedata

    def norm(text: str) -> str:
        text = unicodedata.normalize("NFKC", text).casefold()
        return " ".join("".join(" " if unicodedata.category(c)[0] in "PS" else c for c in text).split())

    return f" {norm(answer)} " in f" {norm(passage)} "


@pytest.mark.parametrize("passage, answer", [
    ("She was born on 18 July 2000 in Leeds.", "18%"),
    ("The city has about 10,000 inhabitants.", "10%"),
    ("Scores of 3, 5 and 7 were given.", "3.5"),
    ("The population passed 10,000 in 1950.", "10"),      # a thousands separator is not a boundary
    ("The rate rose to 3.5 percent.", "3"),
    ("It cost 1.999,50 euros.", "999"),
])
def test_numbers_do_not_match_other_numbers(passage, answer):
    assert squad_style_has_answer(passage, answer)          # the old rule matched: the test bites
    assert not has_answer(passage, [answer], "en")


@pytest.mark.parametrize("passage, answer, lang", [
    ("Turnout rose to 18% in 2019.", "18%", "en"),
    ("Le taux atteint 18 % en 2019.", "18%", "fr"),         # space before % (French typography)
    ("Turnout rose to 18 % in 2019.", "18 %", "en"),
    ("The rate was 3.5 percent.", "3.5", "en"),
    ("About 10,000 people came.", "10,000", "en"),
    ("Born in 1984.", "1984", "en"),                        # a sentence-final period is still a boundary
    ("Up to 30% of girls were affected.", "30", "en"),      # a percent sign ends the number token
    ("Values: 3, 5.", "3", "en"),
    ("该市人口增长了18%。", "18%", "zh"),
    ("该市人口增长了１８％。", "18%", "zh"),                 # NFKC: full-width digits and percent sign
    ("利率为3.5%，高于去年。", "3.5%", "zh"),
    ("アップルの売上は10,000台でした", "10,000", "ja"),
    ("อัตราเงินเฟ้อคือ3.5%ในปีนี้", "3.5%", "th"),
    ("بلغت النسبة ٣٫٥٪ هذا العام", "٣٫٥٪", "ar"),           # Arabic decimal separator and percent sign
])
def test_numbers_with_separators_and_percent_still_match(passage, answer, lang):
    assert has_answer(passage, [answer], lang)


def test_number_normalisation():
    assert normalize_answer("18 %", "en") == normalize_answer("18%", "en") == "18%"
    assert normalize_answer("1,000,000.25", "en") == "1,000,000.25"
    assert normalize_answer("3, 5", "en") == "3 5"
    assert normalize_answer("U.S.A.", "en") == "u s"                      # periods between letters: unchanged
    assert normalize_answer("v1.2.3-rc", "en") == "v1.2.3 rc"
    assert normalize_answer("18%", "zh") == normalize_answer("１８％", "zh") == "18%"
    assert not has_answer("中国的首都是北京。", ["18%"], "zh")
    assert not has_answer("Up to 30 of them.", ["30%"], "en")            # ... but is part of the answer
    assert not has_answer("Kenyans aged 9–18. The Ministry", ["18%"], "en")  # measured false hit of v1 (XQuAD)
    from suites.answers import NORMALIZER_ID

    assert NORMALIZER_ID.endswith("/v2")


# ---------------------------------------------------------------- accuracy@k
def test_accuracy_at_k_hand_computed():
    doc_ids = ["d1", "d2", "d3", "d4"]
    passages = ["Paris is in France.", "北京是首都", "Nothing here.", "กรุงเทพมหานคร"]
    matcher = AnswerMatcher(doc_ids, passages, "und")
    run = Run.from_arrays(
        ["q1", "q1", "q1", "q2", "q2", "q3"],
        ["d3", "d1", "d2", "d2", "d4", "d3"],
        [3.0, 2.0, 1.0, 2.0, 1.0, 1.0],
    )
    answers = {"q1": ["paris"], "q2": ["กรุงเทพ"], "q3": ["北京"], "q4": ["France"]}
    qids, acc = accuracy_at_k(run, matcher, answers, [1, 2, 10], "und")
    assert qids == ["q1", "q2", "q3", "q4"]
    np.testing.assert_array_equal(acc["acc@1"], [0, 0, 0, 0])
    np.testing.assert_array_equal(acc["acc@2"], [1, 1, 0, 0])   # q1 hit at rank 2, q2 at rank 2
    np.testing.assert_array_equal(acc["acc@10"], [1, 1, 0, 0])  # q3 retrieved only d3; q4 not in run -> 0


def test_matcher_rejects_unknown_documents():
    matcher = AnswerMatcher(["d1"], ["text"], "en")
    with pytest.raises(KeyError):
        matcher.normalized_passage("nope")


# ---------------------------------------------------------------- parity with DPR's rule on English text
def test_english_containment_agrees_with_dpr_rule(shared_data):
    """On English passages the result equals DPR's has_answer (token-sequence match after NFD and
    lowercasing, tokens = runs of letters/digits/marks or single other characters) except where our
    normalisation is more lenient (articles, punctuation); a DPR hit is ours too on these passages
    (ours is stricter only inside numbers: DPR finds "10" in "10,000", which does not occur here)."""
    regex = pytest.importorskip("regex")
    import unicodedata

    from harness.benchmark import get_suite

    token = regex.compile(r"[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]")

    def tokens(text):
        return [m.group().lower() for m in token.finditer(unicodedata.normalize("NFD", text))]

    def dpr_has(passage, answers):
        pt = tokens(passage)
        for answer in answers:
            at = tokens(answer)
            if at and any(pt[i:i + len(at)] == at for i in range(len(pt) - len(at) + 1)):
                return True
        return False

    loaded = get_suite("mkqa").load(shared_data / "xquad-xling-retrieval")
    corpus = dict(zip(loaded.dataset.corpus.ids, loaded.dataset.corpus.passages()))
    doc_ids = sorted(corpus)
    rng = np.random.default_rng(0)
    judged = loaded.dataset.qrels.to_dict()
    pairs = []
    for qid in [q for q in loaded.dataset.queries.ids if q.startswith("en-")]:
        pairs.append((qid, next(iter(judged[qid]))))
        pairs += [(qid, doc_ids[i]) for i in rng.integers(0, len(doc_ids), size=4)]
    ours = [has_answer(corpus[d], loaded.answers[q], "en") for q, d in pairs]
    dpr = [dpr_has(corpus[d], loaded.answers[q]) for q, d in pairs]
    assert not any(b and not a for a, b in zip(ours, dpr))
    assert np.mean(np.array(ours) == np.array(dpr)) > 0.99
