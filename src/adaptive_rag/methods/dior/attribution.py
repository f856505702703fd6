"""What DioR's early detector reads from an Integrated-Gradients attribution (Guo et al. 2025, §3.1.1,
Eq. 1 and App. A.1.1 Eq. 6-10): the per-token scores, normalised to a distribution over the question's
tokens, and the scalar attribution entropy of that distribution.

- Scores (`aggregate`): `l2` (default, the reference's `normalize_attributes`): a_j = ||IG_j||_2 /
  sum_k ||IG_k||_2, non-negative and summing to 1; `dot`: the signed sum over the embedding dimension,
  sum_d IG_j,d, unnormalised (these add up to F(x) - F(0)); signed values form no distribution, so
  the entropy refuses them.
- Entropy (`reading`): `eq6` (default) is the paper's definition, H = -sum_j p_j log p_j >= 0 (App. A.1.1:
  log n for uniform attributions, 0 for one-hot), with 0 log 0 := 0. The paper's Eq. 1 as printed,
  sum_j (-p_j) log(1/p_j), equals sum_j p_j log p_j = -H: a sign slip, since the text and A.1.1 say a
  dispersed attribution has the *high* entropy. `eq1-printed` evaluates the printed formula literally
  (<= 0), for anyone checking what it gives.
- Detector input (`features`): `attribution-sequence` (default): the reference RNN's input, the score
  sequence as [n, 1] (one feature per time step); `attribution-entropy`: the paper's text, the scalar
  entropy as [1].

Pure numpy, no model: the attribution itself comes from `lm.attribution` (lm/integrated_gradients.py).
"""

from __future__ import annotations

import numpy as np

from ...lm.base import Attribution, Prompt

AGGREGATES = ("l2", "dot")
READINGS = ("eq6", "eq1-printed")
FEATURES = ("attribution-sequence", "attribution-entropy")


BARE_FORMATS = ("raw", "chat")


def bare_question(question: str, prompt_format: str = "raw") -> Prompt:
    """The prompt both the early detector's data and DioR's early detection attribute: the question alone
    as raw text (the reference's `get_ig` input: no exemplars, no chat template; the tokenizer's BOS,
    where it adds one, is a token too). One function, so the detector is applied to exactly the input
    it was trained on.

    `prompt_format="chat"`: the question alone as the user turn of the model's chat template (no
    exemplars; the template's own default system turn, where it has one, is part of the prompt). For
    instruct models that answer raw text with an end of turn: SmolLM2-135M-Instruct answered 0 of 24
    demo early-detection questions from raw text (16 began with `<|im_end|>`, 8 with a blank line and
    no answer) and 13 of 24 in chat. A
    trained early detector records the format it was trained on (`header["source"]["prompt_format"]`)."""
    if _choice(prompt_format, BARE_FORMATS, "bare question prompt_format") == "chat":
        return Prompt.chat([{"role": "user", "content": question.strip()}])
    return Prompt(text=question.strip())


def _choice(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def normalise(values) -> np.ndarray:
    """p_j = v_j / sum_k v_k for non-negative per-token values (the L2 norms), float64."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"attribution scores must be a non-empty 1-D array; got shape {v.shape}")
    if not np.all(np.isfinite(v)) or np.any(v < 0):
        raise ValueError("attribution scores must be finite and non-negative to form a distribution "
                         "(use aggregate: l2; signed dot-product attributions cannot be normalised)")
    total = v.sum()
    if total <= 0:
        raise ValueError("every attribution score is 0: there is no distribution to normalise")
    return v / total


def token_scores(attribution: Attribution, aggregate: str = "l2") -> np.ndarray:
    """Per prompt token: the normalised L2 norms (`l2`, the reference) or the signed sums (`dot`)."""
    if _choice(aggregate, AGGREGATES, "aggregate") == "l2":
        return normalise(attribution.l2)
    return np.asarray(attribution.dot, dtype=np.float64)


def attribution_entropy(values, reading: str = "eq6") -> float:
    """The attribution entropy of non-negative per-token values, normalised here first (as Eq. 1 does
    with sum_k IG_k), in nats. `eq6`: H >= 0; `eq1-printed`: the printed Eq. 1, which is -H."""
    _choice(reading, READINGS, "entropy reading")
    p = normalise(values)
    nonzero = p[p > 0]  # 0 log 0 := 0 (and the printed form's 0 log(1/0), its limit, 0)
    if reading == "eq6":
        return float(-(nonzero * np.log(nonzero)).sum())
    return float((-nonzero * np.log(1.0 / nonzero)).sum())


def early_features(attribution: Attribution, features: str = "attribution-sequence", aggregate: str = "l2",
                   reading: str = "eq6") -> np.ndarray:
    """The early detector's input for one question, float32: the score sequence [n, 1] (the reference
    GRU reads one value per time step, prompt order, BOS included where the tokenizer adds one), or
    the scalar entropy [1]."""
    if _choice(features, FEATURES, "early_features") == "attribution-sequence":
        return token_scores(attribution, aggregate).astype(np.float32)[:, None]
    if aggregate != "l2":
        raise ValueError("attribution-entropy needs aggregate: l2 (signed dot-product attributions form no "
                         "distribution)")
    return np.array([attribution_entropy(attribution.l2, reading)], dtype=np.float32)
