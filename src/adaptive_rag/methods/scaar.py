"""SCAAR (semantic-contribution-aware adaptive retrieval): black-box, needs token probabilities only.

When (section 3.2): each word w of the look-ahead sentence gets the threshold exp(r(w)) * theta
(Eq. 3 as printed), r(w) in [0, 1] its leave-one-out semantic contribution (Eq. 1); retrieve if any
word's probability (Eq. 4-5: the geometric mean of its tokens') is below its threshold. This reading
is the default because it reproduces the paper's own Table 2 (SCAAR's N_R next to FLARE's);
`scaling: normalised` uses r'(w) = |s| r / sum r (Eq. 2) in the exponent instead, which puts the mean
threshold at e * theta and fires on every sentence for theta > 1/e.
What (section 3.3, Algorithm 1, PFQ): the words sorted by contribution descending, the top alpha
kept, the hallucinated ones (below their own threshold) removed, appended to the question in that
order (`pfq_order: original` keeps sentence order).
Then (section 3.4): the regenerated sentence, made with only this step's passages, replaces the fired
one (`keep: first-sentence`), and the loop looks ahead and judges again.
Any weighting x query cell of the paper's ablation is the same method with `weighting:` / `query:`.
"""

from __future__ import annotations

from .registry import register
from .weighted_threshold import WeightedThreshold


@register("scaar")
class SCAAR(WeightedThreshold):
    when = "any word with p < exp(r(w)) · `theta` (Eq. 3), r(w) its leave-one-out semantic contribution (SCW)"
    what = "PFQ: the top-`alpha` contributing words, minus hallucinated ones, appended to the question by contribution"
    default_weighting, default_query = "scw", "pfq"
