"""DioR (Guo et al., ACL 2025): two trained detectors decide when, scored keywords decide what, and
stepwise retrieval with chunked documents decides which passages the model reads.

The loop is the shared `TriggeredRetrieval` (look ahead, judge each sentence, truncate at the first
that fires, retrieve, regenerate), with DioR's parts (engineering spec `../shared/docs/methods/dior.md`,
§1.1-1.5 and §3 item 6; docs/dior.md says where each choice comes from):

- Early detection (ED, `early: on`): once per question, before the first look-ahead, one
  Integrated-Gradients attribution of the bare question (`attribution.bare_question` in the format the
  detector's header records, raw text where it records none; `IGSettings()` at its defaults: the input
  the detector is trained on) and the early detector's p(hallucination).
  Above `early_threshold` (0.5) it retrieves up front (spec §1.1 "On trigger", the reference code):
  the query is pre-retrieval's over the question alone (the reference code's query is the question's
  real words unranked: under `candidates: real-words` with `top_n` above their count that is the
  same words), the documents go through the same post-retrieval as any trigger, and the answer is
  generated from nothing with them (kept per `keep`). Counted Hc += 1, Rc += its searches. The
  attribution also gives the question's Eq. 3 words, the question's candidates under
  `candidates: eq3-entities`, which computes the attribution with `early: off` too (w/o ED removes
  the detector, not the candidates); `early: off` with `candidates: real-words` never asks for one.
- Real-time detection (RD, `realtime:`), per look-ahead sentence:
  - `mlp-hidden` (default): the trained detector on the model's last-layer hidden state of each
    token, a token flagged when p(non-hallucination) < 0.5. It judges the tokens of the sentence's
    named entities only (`realtime_tokens: entities`, default), the only tokens it was trained on
    (the data builder labels entity tokens; spec §1.2); `realtime_tokens: all` judges every token, as
    the paper's Eq. 4 reads;
  - `rind`: DRAGIN's RIND with the reference code's scoring (`reference: dragin-code`: re-encoded
    attention, word units, real-word filter after thresholding), above `theta`;
  - `rind+mlp`: either fires (the reference code's OR of its two detectors, with our MLP);
  - `prob`: any token with p < `prob_theta` (0.5), the paper's "w/o RD" (FLARE at token level).
- The query (`pre:`): the keyword scoring of `dior/keywords.py` over the candidates (`candidates:
  real-words`, default: every real word of the question and the generated text, the reference
  code's; `eq3-entities`: the question's Eq. 3 words and the generated text's entities), the
  flagged tokens left out; `pre: sequential` is "w/o Pre-R".
- Post-retrieval (`post:`, paper §3.3.2: stepwise selection, then chunking): `stepwise`
  (`dior/stepwise.py`: rounds that take part of the documents and grow the query with their new
  keywords; Rc counts every search), each selected document cut into blocks (`chunk:`,
  `chunk_close:`, `dior/chunking.py`) and shown in the paper's "External Knowledge After Chunk"
  layout (`prompt: paper`, the passage and context pieces of `prompts/templates/dior.yaml` over the
  dataset's template); or `single` ("w/o Post-R": one search of `top_k`, the documents whole under
  App. F's "External Knowledge:" header, `prompts/templates/dior-documents.yaml`; `chunk` then
  does not apply). `prompt: dragin` is the project's usual prompt with each block as a passage
  (the reference code's "Context:" list). `max_retrievals` caps the triggers (Hc, ED's included),
  not the searches.

Ours, where the paper and code are silent or disagree (docs/dior.md lists them): `top_k` is the
number of documents (the paper's top-k, App. B.3: the stepwise `docs`); the chunks are scored against
the trigger's query; `tfidf: corpus` needs a BM25 index (its document frequencies): a dense run is
refused at check-params, naming the key (use `tfidf: context`, the reference code's); `keep: all` is
the default, as the project's other methods in their paper form (the reference code keeps the
first sentence: `keep: first-sentence`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...lm.base import ATTENTIONS, ENTROPY, GRADIENTS, HIDDEN_STATES, NO_EXTRAS, Extras, IGSettings
from ...retrieval import Hit
from ..base import step_record
from ..parts.components import Detection
from .detectors import EARLY_DETECTOR, REALTIME_DETECTOR, REALTIME_HIDDEN_LAYER
from .keywords import (CANDIDATES, DEFAULT_WEIGHTS, PRE, SIMILARITY, TERMS, TFIDF, CorpusIdf, KeywordContext,
                       attention_term, context_idf, cosines, entity_candidates, keyword_query, merge, position_term,
                       question_candidates, real_word_candidates, similarity_term, tfidf_term)
from ..parts.lookahead import LookAhead, probability
from ..parts.loop import TriggeredRetrieval
from ..parts.setup import Own, basic_setup
from ..registry import register

SWITCH = ("on", "off")
REALTIME = ("mlp-hidden", "rind", "rind+mlp", "prob")
REALTIME_TOKENS = ("entities", "all")
EARLY_FEATURES = ("attribution-sequence", "attribution-entropy")
POST = ("stepwise", "single")
PROMPTS = ("paper", "dragin")
PAPER_MAX_RETRIEVALS = 5  # App. B.3
PAPER_TEMPLATE = "builtin:dior"  # chunked documents: "External Knowledge After Chunk" (§3.3.2)
DOCUMENTS_TEMPLATE = "builtin:dior-documents"  # whole documents: "External Knowledge" (App. F, w/o Post-R)
MLP = ("mlp-hidden", "rind+mlp")
RIND = ("rind", "rind+mlp")


@dataclass
class QuestionInfo:
    """What DioR keeps of one question beside the loop's state: the question's Eq. 3 words (from the
    question's attribution; None when none is computed) and the record of the trigger in progress."""

    question: list | None = None
    pending: dict = field(default_factory=dict)


def read_switch(section, name: str, default: str) -> str:
    """`on`/`off` (YAML 1.1 reads a bare on/off as true/false: both spellings are accepted)."""
    section.choices[name] = SWITCH
    value = section.raw(name, default)
    value = {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value
    if value not in SWITCH:
        raise section.fail(name, f"must be on or off; got {value!r}")
    return value


def read_weights(section) -> dict[str, float]:
    weights = section.section("weights", {})
    out = {term: weights.float(term, DEFAULT_WEIGHTS[term], minimum=0.0) for term in TERMS}
    weights.done()
    if not any(out.values()):
        raise section.fail("weights", "every weight is 0, so no term ranks the candidates; use pre: sequential "
                                      "for the text-order query")
    return out


@register("dior")
class DioR(TriggeredRetrieval):
    when = ('once before generating if the early detector\'s p(hallucination) > `early_threshold` (IG '
            'attribution of the question); then per look-ahead sentence, the real-time detector (`realtime`)')
    what = ('the top `top_n` keywords by attention + TF-IDF + position + similarity (the real words of the question '
            'and the generated text, flagged tokens removed), retrieved stepwise and chunked')
    needs = frozenset({GRADIENTS, HIDDEN_STATES, ATTENTIONS})

    @classmethod
    def setups(cls, settings) -> dict[str, dict]:
        """DioR's own prompt layout (`prompt: paper`, App. F's knowledge block) and its trigger cap (App.
        B.3: 5 retrievals) are the paper's; `prompt: dragin` is the table's usual layout."""
        setup = basic_setup(cls, settings)
        fields = setup["multi"]
        if settings["prompt"] == "paper":
            fields["prompt"] = Own("dior-paper", "DioR's prompt layout (App. F), part of the method")
        if settings["max_retrievals"] == PAPER_MAX_RETRIEVALS:
            fields["max_retrievals"] = Own(PAPER_MAX_RETRIEVALS, "DioR's cap on triggers (App. B.3)")
        return setup

    @classmethod
    def read_settings(cls, section):
        from .chunking import CHUNKS, CLOSES
        from .stepwise import RELEVANCE, StepwiseSettings

        stepwise = StepwiseSettings()
        return {
            **cls.read_common(section, keep="all"),
            "max_retrievals": section.int("max_retrievals", PAPER_MAX_RETRIEVALS, minimum=0, allow_none=True),
            "early": read_switch(section, "early", "on"),
            "early_threshold": section.float("early_threshold", 0.5, minimum=0.0),
            "early_features": section.str("early_features", EARLY_FEATURES[0], EARLY_FEATURES),
            "early_detector": section.str("early_detector", EARLY_DETECTOR),
            "realtime": section.str("realtime", "mlp-hidden", REALTIME),
            "realtime_tokens": section.str("realtime_tokens", "entities", REALTIME_TOKENS),
            "realtime_detector": section.str("realtime_detector", REALTIME_DETECTOR),
            "theta": section.float("theta", 1.0, minimum=0.0),
            "prob_theta": section.float("prob_theta", 0.5, minimum=0.0),
            "pre": section.str("pre", "scored", PRE),
            "candidates": section.str("candidates", CANDIDATES[0], CANDIDATES),
            "weights": read_weights(section),
            "top_n": section.int("top_n", 35, minimum=1),
            "tfidf": section.str("tfidf", "corpus", TFIDF),
            "similarity": section.str("similarity", "minilm", SIMILARITY),
            "post": section.str("post", "stepwise", POST),
            "step_fraction": _fraction(section, "step_fraction", stepwise.step_fraction),
            "new_keywords": section.int("new_keywords", stepwise.new_keywords, minimum=0),
            "candidate_pool": section.int("candidate_pool", stepwise.candidate_pool, minimum=1),
            "max_rounds": section.int("max_rounds", stepwise.max_rounds, minimum=1),
            "relevance": section.str("relevance", stepwise.relevance, RELEVANCE),
            "chunk": section.str("chunk", "sentence", CHUNKS),
            "chunk_close": section.str("chunk_close", CLOSES[0], CLOSES),
            "prompt": section.str("prompt", "paper", PROMPTS),
        }

    @classmethod
    def needs_for(cls, settings) -> set[str]:
        needs = set()
        if attributes_question(settings):
            needs.add(GRADIENTS)
        if settings["realtime"] in MLP:
            needs.add(HIDDEN_STATES)
        if settings["realtime"] in RIND:
            needs |= {ATTENTIONS, ENTROPY}
        if settings["pre"] == "scored":
            if settings["weights"]["attention"] > 0:
                needs.add(ATTENTIONS)
            if settings["weights"]["similarity"] > 0 and settings["similarity"] == "lm-embeddings":
                needs.add(HIDDEN_STATES)  # the LM's input embedding table: a white-box model's insides
        return needs

    trained_inputs = {"early_detector": (EARLY_DETECTOR, "detectors.early"),
                      "realtime_detector": (REALTIME_DETECTOR, "detectors.realtime")}

    @classmethod
    def inputs(cls, settings, dataset, method) -> dict[str, str]:
        """The detector files the settings use: the workflow builds them before the run. The early
        detector's header says how the question's attribution is prompted, so Eq. 3 candidates read it
        under `early: off` too."""
        files = {}
        if attributes_question(settings):
            files["early_detector"] = settings["early_detector"]
        if settings["realtime"] in MLP:
            files["realtime_detector"] = settings["realtime_detector"]
        return files

    @classmethod
    def retriever_problem(cls, settings, kind):
        uses_idf = settings["pre"] == "scored" and settings["weights"]["tfidf"] > 0
        if uses_idf and settings["tfidf"] == "corpus" and kind != "bm25":
            return ("tfidf", f"corpus takes its document frequencies from the BM25 index, but this "
                             f"configuration searches the {kind} index; use tfidf: context (the reference "
                             f"code's TF-IDF over the context) or retriever: bm25")
        return None

    def __init__(self, settings, context):
        super().__init__(settings, context)
        self._detectors: dict[str, Any] = {}
        self._reencoded: tuple = (None, None)
        self._idf = None
        self._similarity = None
        self._template = None

    # ---- the loop -------------------------------------------------------------------------------

    def capped(self, state) -> bool:
        """`max_retrievals` caps triggers (Hc), ED's included: Rc counts searches, several per trigger."""
        cap = self.settings["max_retrievals"]
        return cap is not None and state.answer.detections >= cap

    def step(self, active) -> None:
        fresh = [s for s in active if not hasattr(s, "dior")]
        for state in fresh:
            state.dior = QuestionInfo()
        if fresh and attributes_question(self.settings):
            fired = self.early_detection(fresh)
            if fired:
                self.retrieve_up_front(fired)
                active = [s for s in active if all(s is not f for f in fired)]
        if active:
            super().step(active)

    def extras(self) -> Extras:
        s = self.settings
        attention = s["pre"] == "scored" and s["weights"]["attention"] > 0
        if not (attention or s["realtime"] in MLP + RIND):
            return NO_EXTRAS
        return Extras(entropy=s["realtime"] in RIND, attention_layer=-1 if attention else None,
                      hidden_layer=REALTIME_HIDDEN_LAYER if s["realtime"] in MLP else None)

    # ---- early detection --------------------------------------------------------------------------

    def early_detection(self, states) -> list:
        """One attribution per question (its Eq. 3 words are the question's candidates under
        `candidates: eq3-entities`) and, with `early: on`, the early detector over all of them; the states
        it fires for (uncapped ones whose p(hallucination) > `early_threshold`)."""
        from .attribution import bare_question, token_scores

        start = time.perf_counter()
        detector = self.detector("early")
        # The detector is applied to the prompt it was trained on: its header records the bare question's
        # format (absent: raw text, the reference's input and `bare_question`'s default).
        fmt = detector.header.get("source", {}).get("prompt_format", "raw")
        prompts = [bare_question(s.example.question, fmt) for s in states]
        attributions = [self.ctx.lm.attribution(prompt, IGSettings()) for prompt in prompts]
        scores = [token_scores(a, "l2") for a in attributions]
        early = self.settings["early"] == "on"
        p = detector.predict(scores) if early else [None] * len(states)
        share = (time.perf_counter() - start) / len(states)
        fired = []
        for state, attribution, a, probability_ in zip(states, attributions, scores, p):
            question = state.example.question.strip()
            state.dior.question = question_candidates(question, attribution.tokens, a)
            state.answer.wall_time_s += share
            record = {"tokens": attribution.tokens, "attribution": [round(float(x), 4) for x in a],
                      "candidates": [c.text for c in state.dior.question]}
            if not early:
                state.answer.steps.append({"phase": "question-attribution", **record})
                continue
            fire = bool(probability_ > self.settings["early_threshold"]) and not self.capped(state)
            state.answer.steps.append({"phase": "early-detection", "probability": round(float(probability_), 4),
                                       "threshold": self.settings["early_threshold"], "fire": fire, **record})
            if fire:
                fired.append(state)
        return fired

    def retrieve_up_front(self, states) -> None:
        """ED fired: retrieve with pre-retrieval's query over the question alone (nothing is generated or
        flagged yet), then generate the answer from nothing with the passages (one batched call), kept as
        any regeneration is."""
        for state in states:
            state.answer.detections += 1
            question = state.example.question.strip()
            query = self.query_for(state, KeywordContext(question)) or question
            hits = self.retrieve(state, query)
            state.answer.steps.append({"phase": "early-retrieval", "query": query, "retrieved": [h.id for h in hits],
                                       **self.trigger_record(state)})
        continuations = self.generate(states, True, [self.remaining(s) for s in states])
        for state, c in zip(states, continuations):
            new = self.keep_regenerated(state, LookAhead(c))
            state.answer.steps.append(step_record("regenerate", c, kept=len(new)))

    # ---- real-time detection ----------------------------------------------------------------------

    def detect(self, state, lookahead, sentence) -> Detection:
        mode = self.settings["realtime"]
        if mode == "prob":
            units = lookahead.token_units(sentence)
            probs = [probability(lookahead.c.logprobs, u) for u in units]
            flagged = [k for k, p in enumerate(probs) if p < self.settings["prob_theta"]]
            return _named(Detection(bool(flagged), units, probs, flagged), "prob")
        parts = []
        if mode in RIND:
            parts.append(self.rind(lookahead, sentence))
        if mode in MLP:
            parts.append(self.mlp(lookahead, sentence))
        return parts[0] if len(parts) == 1 else _either(*parts)

    def rind(self, lookahead, sentence) -> Detection:
        """DRAGIN's RIND as its reference code scores it (`dragin.py`, `reference: dragin-code`)."""
        from ..parts.attention import reencoded_received
        from ..parts.rind import rind_detection

        if self._reencoded[0] is not lookahead:
            ids = lookahead.c.token_ids
            if ids is None:
                raise RuntimeError("realtime: rind needs the continuation's token ids (a white-box model)")
            self._reencoded = (lookahead, self.ctx.lm.received_attention(ids, -1))
        received = reencoded_received(self._reencoded[1], True)
        detection = rind_detection(lookahead, sentence, self.settings["theta"], "generated", True, True, "after",
                                   "word", received)
        return _named(detection, "rind")

    def mlp(self, lookahead, sentence) -> Detection:
        """The real-time detector on the hidden state of each judged token: the sentence's entity tokens
        (`realtime_tokens: entities`) or all of them; flagged when p(non-hallucination) < 0.5."""
        from ..parts.text import entities

        c = lookahead.c
        if c.hidden is None:
            raise RuntimeError("realtime: mlp-hidden needs the look-ahead's hidden states (a white-box model, "
                               "Extras(hidden_layer=-1))")
        units = lookahead.token_units(sentence)
        if self.settings["realtime_tokens"] == "entities":
            spans = [(e.start, e.end) for e in entities(lookahead.text)]
            units = [u for u in units if any(a < u.end and b > u.start for a, b in spans)]
        if not units:
            return _named(Detection(False, [], [], []), "mlp-hidden")
        detector = self.detector("realtime")
        p = detector.predict(c.hidden[[u.tokens[0] for u in units]])
        flagged = [k for k, value in enumerate(p) if value < 0.5]
        return _named(Detection(bool(flagged), units, [float(v) for v in p], flagged), "mlp-hidden")

    def detector(self, kind: str):
        """The trained detector (loaded once), refused if trained for another model, on features computed
        otherwise than this run computes them (`detector_source`: the hidden layer, the IG settings) or,
        for ED, on other features than `early_features`."""
        if kind not in self._detectors:
            from ...errors import InputError
            from .detectors import load

            key = f"{kind}_detector"
            path = Path(self.ctx.inputs.get(key) or self.settings[key])
            detector = load(path, kind, model=self.ctx.lm.identity().get("model"), source=detector_source(kind))
            features = detector.header.get("architecture", {}).get("features")
            if kind == "early" and features != self.settings["early_features"]:
                raise InputError(f"{path}: this early detector reads {features!r}, but the method's "
                                 f"early_features is {self.settings['early_features']!r}; train one for it or "
                                 f"change early_features")
            self._detectors[kind] = detector
        return self._detectors[kind]

    # ---- pre-retrieval: the query -----------------------------------------------------------------

    def build_query(self, state, lookahead, sentence, detection) -> str:
        context = KeywordContext(state.example.question.strip(), state.text, lookahead.text[:sentence.end])
        flagged = sorted({t for k in detection.flagged for t in detection.units[k].tokens})
        return self.query_for(state, context, lookahead, flagged)

    def query_for(self, state, context: KeywordContext, lookahead: LookAhead | None = None, flagged=()) -> str:
        """Pre-retrieval over `context`: the candidates (`candidates:`) minus the `flagged` look-ahead
        tokens, scored (`pre: scored`) or in text order, the top `top_n` joined; recorded for the trace.
        Early detection's trigger has no look-ahead and nothing flagged (its attention term is 0)."""
        spans = [lookahead.spans[t] for t in flagged]
        if self.settings["candidates"] == "real-words":
            candidates = real_word_candidates(context, spans)
        else:
            candidates = merge(state.dior.question, entity_candidates(context, spans))
        terms = self.terms(candidates, context, lookahead, flagged) if self.settings["pre"] == "scored" else {}
        query = keyword_query(candidates, terms, self.settings["weights"], self.settings["top_n"], self.settings["pre"])
        state.dior.pending = {"keywords": query.record()}
        return query.text

    def terms(self, candidates, context, lookahead, flagged) -> dict[str, list[float]]:
        """The raw terms whose weight is not 0 (one left out counts as 0)."""
        w, terms = self.settings["weights"], {}
        if w["attention"] > 0:
            terms["attention"] = attention_term(candidates, context, lookahead, flagged)
        if w["tfidf"] > 0:
            terms["tfidf"] = tfidf_term(candidates, context, self.idf())
        if w["position"] > 0:
            terms["position"] = position_term(candidates, context)
        if w["similarity"] > 0:
            terms["similarity"] = similarity_term(candidates, context.question, self.similarity())
        return terms

    def idf(self):
        if self._idf is None:
            if self.settings["tfidf"] == "context":
                self._idf = context_idf
            else:
                retriever = self.ctx.retriever
                if not hasattr(retriever, "term_statistics"):
                    from ...errors import ConfigError

                    raise ConfigError(f"tfidf: corpus reads document frequencies from a BM25 index, and this run "
                                      f"searches {type(retriever).__name__}; use tfidf: context")
                self._idf = CorpusIdf(retriever.term_statistics, retriever.num_docs)
        return self._idf

    def similarity(self):
        if self._similarity is None:
            if self.settings["similarity"] == "minilm":
                from ..parts.contribution import DEFAULT_SIMILARITY, load_similarity

                self._similarity = load_similarity(DEFAULT_SIMILARITY).similarities
            else:
                lm = self.ctx.lm

                def lm_cosines(anchor, texts):
                    vectors = lm.input_embeddings([anchor, *texts])
                    return cosines(vectors[0], vectors[1:])

                self._similarity = lm_cosines
        return self._similarity

    # ---- post-retrieval and the prompt --------------------------------------------------------------

    def stepwise_settings(self):
        from .stepwise import StepwiseSettings

        s = self.settings
        return StepwiseSettings(docs=s["top_k"], step_fraction=s["step_fraction"], new_keywords=s["new_keywords"],
                                candidate_pool=s["candidate_pool"], max_rounds=s["max_rounds"],
                                relevance=s["relevance"])

    def retrieve(self, state, query: str) -> list[Hit]:
        """Post-retrieval for one trigger: stepwise rounds, each selected document cut into blocks (the
        prompt's passages are the blocks), or one search of whole documents (`post: single`). Rc += the
        searches made."""
        from .chunking import chunk_passage
        from .stepwise import single_retrieve, stepwise_retrieve

        start = time.perf_counter()
        if self.settings["post"] == "stepwise":
            result = stepwise_retrieve(query, self.search, self.stepwise_settings())
        else:
            result = single_retrieve(query, self.search, self.settings["top_k"])
        mode = "none" if self.whole_documents() else self.settings["chunk"]
        chunks = [chunk_passage(h.text, query, mode, close=self.settings["chunk_close"]) for h in result.hits]
        state.hits = self.passages(result.hits, chunks)
        state.answer.retrievals += result.searches
        trigger = state.answer.detections - 1
        state.answer.passages.extend({"id": h.id, "title": h.title, "score": h.score, "retrieval": trigger}
                                     for h in result.hits)
        state.answer.wall_time_s += time.perf_counter() - start
        state.dior.pending.update({"post": self.settings["post"], "searches": result.searches,
                                   "queries": list(result.queries), "rounds": list(result.rounds),
                                   "chunks": [{"id": h.id, "chunks": c} for h, c in zip(result.hits, chunks)]})
        return list(result.hits)

    def whole_documents(self) -> bool:
        """Documents go into the prompt uncut: `post: single` (App. F's w/o Post-R) or `chunk: none`."""
        return self.settings["post"] == "single" or self.settings["chunk"] == "none"

    def passages(self, hits, chunks) -> list[Hit]:
        """`prompt: paper`: one passage per document, its text the numbered block list ("(1).b1 (2).b2",
        the document's own text when whole); `prompt: dragin`: one passage per block."""
        from .chunking import render_chunks

        if self.settings["prompt"] == "dragin":
            return [Hit(h.id, h.title, block, h.score) for h, blocks in zip(hits, chunks) for block in blocks]
        if self.whole_documents():
            return list(hits)
        return [Hit(h.id, h.title, render_chunks(blocks), h.score) for h, blocks in zip(hits, chunks)]

    def trigger_record(self, state) -> dict:
        pending, state.dior.pending = state.dior.pending, {}
        return pending

    def cot_prompt(self, question, passages=(), dataset_template: bool = False, searched: bool = False):
        """With passages and `prompt: paper`, the dataset's template with DioR's knowledge block."""
        if not passages or self.settings["prompt"] != "paper":
            return super().cot_prompt(question, passages, dataset_template, searched)
        from ...prompts.fewshot import build_prompt

        return build_prompt(self.ctx.prompt_format, self.ctx.exemplars, question, passages,
                            template=self.paper_template())

    def paper_template(self):
        """The dataset's template (the project's own when it names none) with the `passage` and `context`
        pieces of `builtin:dior` (chunked documents) or `builtin:dior-documents` (whole ones): DioR's
        knowledge block, the dataset's instruction and exemplars."""
        if self._template is None:
            import dataclasses

            from ...prompts.template import Template, load_template

            base = self.ctx.template or load_template()
            knowledge = DOCUMENTS_TEMPLATE if self.whole_documents() else PAPER_TEMPLATE
            dior = load_template(knowledge).styles["cot"]
            cot = dataclasses.replace(base.styles["cot"], passage=dior.passage, context=dior.context)
            self._template = Template(f"{base.spec} + {knowledge} knowledge", base.path, base.data,
                                      {**base.styles, "cot": cot})
        return self._template


def attributes_question(settings) -> bool:
    """Whether a run computes the question's IG attribution: for the early detector (`early: on`) or for
    the question's Eq. 3 candidates (`candidates: eq3-entities`, with or without ED)."""
    return settings["early"] == "on" or settings["candidates"] == "eq3-entities"


def detector_source(kind: str) -> dict:
    """What the run feeds a detector, as its header's `source` records it (`detector_data` writes the same
    values): the early detector reads the attribution at `IGSettings()`, the real-time one the hidden states
    of `REALTIME_HIDDEN_LAYER`."""
    from dataclasses import asdict

    if kind == "early":
        return {"attribution": asdict(IGSettings())}
    return {"hidden_layer": REALTIME_HIDDEN_LAYER}


def _fraction(section, name: str, default: float) -> float:
    value = section.float(name, default, minimum=0.0)
    if not 0 < value <= 1:
        raise section.fail(name, f"expected a fraction in (0, 1], got {value!r}")
    return value


def _named(detection: Detection, detector: str) -> Detection:
    detection.extra["detector"] = detector
    detection.extra["flagged_text"] = [detection.units[k].text for k in detection.flagged]
    return detection


def _either(first: Detection, second: Detection) -> Detection:
    """`rind+mlp`: fires if either does; the units, scores and flags of both, the second's after the first's."""
    offset = len(first.units)
    flagged = first.flagged + [offset + k for k in second.flagged]
    return Detection(first.fire or second.fire, first.units + second.units, first.scores + second.scores, flagged,
                     extra={"detector": "rind+mlp", "rind_units": offset,
                            "flagged_text": first.extra["flagged_text"] + second.extra["flagged_text"]})
