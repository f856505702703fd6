"""SCAAR: semantic-contribution-aware adaptive retrieval (black-box).

When: each word of the look-ahead sentence gets the threshold exp(r'(w)) * theta, r' its normalised
leave-one-out semantic contribution (SCW); retrieve if any word's probability (the geometric mean of
its tokens') is below its threshold. What: the top-alpha most contributing words, hallucinated ones
dropped, appended to the question (PFQ). Needs only token probabilities, so it runs against an API
model. Any weighting x query pair of the ablation is the same method with `weighting:` / `query:` set.
"""

from __future__ import annotations

from .registry import register
from .weighted_threshold import WeightedThreshold


@register("scaar")
class SCAAR(WeightedThreshold):
    when = "any word with p < exp(r'(w)) · `theta`, r' its normalised leave-one-out semantic contribution (SCW)"
    what = 'PFQ: the top-`alpha` contributing words, hallucinated ones dropped, appended to the question'
    default_weighting, default_query = "scw", "pfq"
