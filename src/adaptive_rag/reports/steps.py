"""One answered question as terminal text: what was used, then each step of its trace, the answer
and the counters (`adaptive-rag ask`; `--json` prints the trace record itself).

Why it reads the trace rather than the method: the trace is what every method already records of
each call and decision (`Answer.steps`), so one reader serves every method type, present and future.
Keys it knows get a line made for them (the text, the trigger's scores with the flagged units marked,
queries, passages with their first words, sampled answers, candidates); any other key is printed as it
is, clipped to the width, so nothing a method records is hidden (the whole record: `--json`).
"""

from __future__ import annotations

import json
import textwrap
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..ask import Asked

WIDTH = 100  # characters per line
LABEL = 11  # the label column
FIRST_WORDS = 10  # words of a passage shown after its title
INDENT = " " * (LABEL + 3)


def number(value: Any, none: str = "null") -> str:
    """A score as people read it: at most four significant digits; None (what traces store for an
    undefined or infinite value) as `none`."""
    if value is None:
        return none
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def visible(text: str) -> str:
    """Text on one line with nothing a terminal would act on: whitespace runs become one space, other
    control characters their escape (a random model's tokens hold them)."""
    return "".join(ch if ch.isprintable() else json.dumps(ch)[1:-1] for ch in " ".join(str(text).split()))


def clip(text: str, width: int) -> str:
    text = visible(text)
    return text if len(text) <= width else text[:width - 1] + "…"


def first_words(text: str, count: int = FIRST_WORDS) -> str:
    words = text.split()
    return " ".join(words[:count]) + (" …" if len(words) > count else "")


def head(label: str) -> str:
    """The label column: a label longer than it pushes the text right, never into it."""
    return f"  {label:<{LABEL}} "


def labelled(label: str, text: str, width: int = WIDTH) -> list[str]:
    """`label` in its column, `text` wrapped beside it."""
    return textwrap.wrap(visible(text), width, initial_indent=head(label),
                         subsequent_indent=INDENT, break_on_hyphens=False) or [head(label).rstrip()]


def listed(label: str, rows: list[str], width: int = WIDTH) -> list[str]:
    """`label` beside the first of `rows`, one row a line, each clipped to the width."""
    return [clip_line(head(label if i == 0 else ""), row, width) for i, row in enumerate(rows)]


def clip_line(start: str, text: str, width: int) -> str:
    return start + clip(text, max(8, width - len(start)))


def step_facts(step: dict) -> list[str]:
    """A call's facts as `ask` and the trace explorer show them: its tokens, why it ended, how much of it
    was kept, which sentence the trigger judged."""
    facts = []
    tokens = step.get("tokens")
    if tokens and isinstance(tokens[0], list):
        facts.append(f"{len(tokens)} tokens")
    if "finish" in step:
        facts.append(f"finish {step['finish']}")
    if isinstance(step.get("kept"), int) and not isinstance(step.get("kept"), bool):
        facts.append(f"kept {step['kept']} chars")
    if "sentence" in step:
        facts.append(f"judged sentence {step['sentence']}")
    return facts


class StepPrinter:
    """The lines of one trace's steps; `passages` gives the title and text of each passage id searched."""

    def __init__(self, passages: dict[str, dict], width: int = WIDTH):
        self.passages, self.width = passages, width
        # key -> its printer; None: shown in the step's heading or by the printer of another key
        self.keys: dict[str, Callable[[dict], list[str]] | None] = {
            "phase": None, "finish": None, "kept": None, "sentence": None, "tokens": None, "text": self.text,
            "detection": self.detection,  # the loop family's trigger
            "judged": self.judged,  # its verdicts on the sentences before, which did not fire
            "u": self.uncertainty, "delta": None,  # SeaKR
            "probability": self.early, "threshold": None, "fire": None, "attribution": None,  # DioR's early detection
            "value": self.routing, "thresholds": None, "branch": None, "signal": None,  # SUGAR
            "samples": self.samples, "answers": None, "loglik": None, "clusters": None,
            "query": self.query, "queries": self.queries, "retrieved": self.retrieved,
            "candidates": self.candidates, "chosen": self.chosen, "rationale": None, "knowledge": None,
            "keywords": self.keywords, "rounds": self.rounds,  # DioR's query and stepwise retrieval
        }

    def step(self, index: int, step: dict) -> list[str]:
        lines = [self.heading(index, step)]
        for key in step:
            if key not in self.keys:
                lines += self.other(step, key)
            elif self.keys[key] is not None:
                lines += self.keys[key](step)
        return lines

    def heading(self, index: int, step: dict) -> str:
        """`step N: phase` and the call's facts (`step_facts`; the tokens' probabilities: `--json`)."""
        facts = step_facts(step)
        return f"step {index}: {step.get('phase', '?')}" + (f" ({', '.join(facts)})" if facts else "")

    # ---- keys with a line of their own ---------------------------------------------------------

    def text(self, step: dict) -> list[str]:
        return labelled("text", json.dumps(step["text"], ensure_ascii=False), self.width)

    def marked(self, units: list[str], scores: list, flagged, thresholds=None) -> str:
        flagged = set(flagged)
        parts = []
        for k, (unit, score) in enumerate(zip(units, scores)):
            part = f"{unit}={number(score)}" + (f"/{number(thresholds[k])}" if thresholds else "")
            parts.append(f"[{part}]" if k in flagged else part)
        return " ".join(parts)

    def detection(self, step: dict) -> list[str]:
        d = step["detection"]
        units, scores, flagged = d.get("units", []), d.get("scores", []), d.get("flagged", [])
        how = "score/threshold" if "thresholds" in d else "score"
        detector = f" ({d['detector']})" if "detector" in d else ""
        lines = labelled("trigger", f"{how} per unit{detector}, {len(flagged)} flagged in [ ]: "
                         f"{self.marked(units, scores, flagged, d.get('thresholds'))}", self.width)
        for key, value in d.items():
            if key in ("units", "scores", "flagged", "thresholds", "detector", "flagged_text"):
                continue
            if isinstance(value, list) and len(value) == len(units):
                lines += labelled(key, " ".join(f"{u}={number(v)}" for u, v in zip(units, value)), self.width)
            else:
                lines += labelled(key, json.dumps(value, ensure_ascii=False), self.width)
        return lines

    def judged(self, step: dict) -> list[str]:
        """The trigger's scores of each sentence it judged and passed before the step's outcome."""
        rows = []
        for d in step["judged"]:
            units, scores = d.get("units", []), d.get("scores", [])
            rows.append(f"sentence {d.get('sentence', '?')}: "
                        f"{self.marked(units, scores, d.get('flagged', []), d.get('thresholds')) or 'no unit scored'}")
        return [line for row in rows for line in labelled("passed", row, self.width)]

    def uncertainty(self, step: dict) -> list[str]:
        """SeaKR's U of one judged context; against delta when it decided whether to retrieve."""
        u = step["u"]
        if "delta" not in step:
            return labelled("U", number(u), self.width)
        verdict = ("undefined" if u is None else "[uncertain]" if u > step["delta"] else "sure")
        if "kept" in step:
            verdict += "; step kept" if step["kept"] else "; step not kept: retrieve"
        return labelled("trigger", f"U={number(u)} vs delta {number(step['delta'])}: {verdict}", self.width)

    def early(self, step: dict) -> list[str]:
        """DioR's early detection: p(hallucination) of the question against its threshold."""
        fire = step.get("fire")
        verdict = "[fires]: retrieve before generating" if fire else "does not fire"
        lines = labelled("trigger", f"p(hallucination)={number(step['probability'])} vs threshold "
                                    f"{number(step.get('threshold'))}: {verdict}", self.width)
        if "attribution" in step:
            tokens = [t.strip() or repr(t) for t in step.get("tokens", [])]
            lines += labelled("attribution", self.marked(tokens, step["attribution"], ()), self.width)
        return lines

    def routing(self, step: dict) -> list[str]:
        """SUGAR's signal against its two thresholds, and the branch it chose."""
        t1, t2 = (step.get("thresholds") or [None, None])[:2]
        return labelled("trigger", f"{step.get('signal', 'value')}={number(step['value'])} vs thresholds "
                                   f"t1 {number(t1, 'inf')}, t2 {number(t2, 'inf')}: [{step.get('branch', '?')}]",
                        self.width)

    def query(self, step: dict) -> list[str]:
        return labelled("query", step["query"], self.width)

    def queries(self, step: dict) -> list[str]:
        return listed("queries", [f"{i + 1}. {q}" for i, q in enumerate(step["queries"])], self.width)

    def passage(self, pid: str, pad: int = 0, words: bool = True) -> str:
        """A passage id with its title and (`words`) its first words."""
        p = self.passages.get(pid)
        if p is None:
            return pid
        return f"{pid:<{pad}} {p['title']}" + (f": {first_words(p['text'])}" if words else "")

    def retrieved(self, step: dict) -> list[str]:
        ids = step["retrieved"]
        pad = max(map(len, ids), default=0)
        return listed("retrieved", [self.passage(pid, pad) for pid in ids] or ["nothing"], self.width)

    def samples(self, step: dict) -> list[str]:
        """Sampled continuations, each with what was read off it: its answer, cluster, log-likelihood."""
        samples = step["samples"]
        per_sample = {name: step[key] for key, name in (("answers", "answer"), ("clusters", "cluster"),
                                                        ("loglik", "loglik"))
                      if isinstance(step.get(key), list) and len(step[key]) == len(samples)}
        answers = per_sample.pop("answer", None)
        rows = []
        for i, sample in enumerate(samples):
            row = f"{i + 1}. {json.dumps(sample, ensure_ascii=False)}"
            if answers is not None:
                row += f" -> {json.dumps(answers[i], ensure_ascii=False)}"
            facts = ", ".join(f"{name} {number(values[i])}" for name, values in per_sample.items())
            rows.append(row + (f" ({facts})" if facts else ""))
        return listed(f"samples ({len(samples)})", rows or ["none"], self.width)

    def candidates(self, step: dict) -> list[str]:
        """Passages judged against each other (SeaKR's re-ranking): the chosen one marked."""
        rows = []
        for c in step["candidates"]:
            if not isinstance(c, dict):
                rows.append(str(c))
                continue
            mark = "[chosen] " if c.get("id") is not None and c.get("id") == step.get("chosen") else ""
            rest = ", ".join(json.dumps(v, ensure_ascii=False) if k == "text" else f"{k} {number(v)}"
                             for k, v in c.items() if k != "id")
            rows.append(f"{mark}{self.passage(str(c.get('id')), words=False)}: {rest}")
        return listed("candidates", rows, self.width)

    def chosen(self, step: dict) -> list[str]:
        """SeaKR's final choice between its two answers (its re-ranking's choice is marked among the
        candidates)."""
        if "candidates" in step:
            return []
        rows = [f"{'[chosen] ' if step['chosen'] == name else ''}{name}: answer {step[name]['answer']!r}, "
                f"U {number(step[name]['u'])}" for name in ("rationale", "knowledge") if step.get(name)]
        return listed("chosen", rows or [str(step["chosen"])], self.width)

    def keywords(self, step: dict) -> list[str]:
        """DioR's keyword candidates with their scores, the ones the query kept marked."""
        k = step["keywords"]
        candidates = [c for c in k.get("candidates", []) if isinstance(c, dict)]
        kept = [i for i, c in enumerate(candidates) if c.get("kept")]
        text = self.marked([c.get("text", "?") for c in candidates], [c.get("score") for c in candidates], kept)
        pre = f" (pre {k['pre']})" if "pre" in k else ""
        return labelled("keywords", f"score per candidate{pre}, {len(kept)} kept in [ ]: {text}", self.width)

    def rounds(self, step: dict) -> list[str]:
        """DioR's stepwise retrieval: each search's pool and the passages it took from it."""
        rows = [f"{i + 1}. took {', '.join(r.get('chosen', [])) or 'nothing'} of {len(r.get('pool', []))}"
                + (" (fallback)" if r.get("fallback") else "") for i, r in enumerate(step["rounds"])]
        return listed("rounds", rows, self.width)

    def other(self, step: dict, key: str) -> list[str]:
        value = step[key]
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return [clip_line(head(key), text, self.width)]


def cache_line(stats: dict | None) -> str:
    """How many of the question's calls the call cache answered, per operation used."""
    if stats is None:
        return "off (generation.cache: null): every call ran on the model"
    if stats.get("disabled"):
        return f"{stats.get('path')}: unusable, so off: every call ran on the model"
    used = {op: c for op, c in stats.items() if isinstance(c, dict) and c.get("hits", 0) + c.get("misses", 0)}
    hits = sum(c["hits"] for c in used.values())
    total = sum(c["hits"] + c["misses"] for c in used.values())
    ops = ", ".join(f"{op} {c['hits']} of {c['hits'] + c['misses']}" for op, c in used.items())
    return f"{stats.get('path')}: {hits} of {total} calls answered from the cache" + (f" ({ops})" if ops else "")


def settings_text(settings: dict) -> str:
    if not settings:
        return "no settings"
    return ", ".join(f"{key} {json.dumps(value, ensure_ascii=False)}" for key, value in settings.items())


def model_text(asked: "Asked") -> str:
    model = dict(asked.model)
    name = model.pop("model", "?")
    where = f" at {asked.model_dir}" if asked.model_dir else ""
    weights = model.pop("weights_sha256", None)
    facts = [str(model.pop("backend", "?")), *(f"{k} {v}" for k, v in model.items()),
             f"prompt format {asked.prompt_format}"]
    if isinstance(weights, dict):
        facts += [f"{file} sha256 {digest[:12]}…" for file, digest in weights.items()]
    return f"{name}{where} ({', '.join(facts)})"


def index_text(index: dict | None) -> str:
    if index is None:
        return "none (the method does not retrieve)"
    rest = {k: v for k, v in index.items() if k not in ("index", "type", "documents")}
    facts = [str(index.get("type", "?")), f"{index['documents']} passages" if "documents" in index else "",
             *(f"{k} {number(v)}" for k, v in rest.items())]
    return f"{index.get('index', '?')} ({', '.join(f for f in facts if f)})"


def render(asked: "Asked", width: int = WIDTH) -> str:
    """The whole report of one `ask`: what was used, each step, the answer, the counters."""
    lines = labelled("params", asked.params, width)
    lines += labelled("dataset", f"{asked.dataset}: exemplars {asked.exemplars}, template {asked.template}", width)
    lines += labelled("model", model_text(asked), width)
    lines += labelled("index", index_text(asked.index), width)
    lines += labelled("method", f"{asked.method} (type {asked.method_type}): {settings_text(asked.settings)}", width)
    for name, path in asked.inputs.items():
        lines += labelled(name, path, width)
    lines += labelled("call cache", cache_line(asked.call_cache), width)
    lines += labelled("question", asked.prediction["question"], width)
    printer = StepPrinter(asked.passages, width)
    for i, step in enumerate(asked.trace["steps"]):
        lines += ["", *printer.step(i + 1, step)]
    found = "" if asked.prediction["answer_found"] else " (no answer phrase: the whole output)"
    lines += ["", *labelled("output", json.dumps(asked.prediction["output"], ensure_ascii=False), width)]
    lines += labelled("answer", f"{asked.prediction['prediction']}{found}", width)
    lines += labelled("passages", ", ".join(p["id"] for p in asked.trace["passages"]) or "none", width)
    lines += labelled("counters", ", ".join(f"{k} {number(v)}" for k, v in asked.trace["counters"].items()), width)
    return "\n".join(lines) + "\n"
