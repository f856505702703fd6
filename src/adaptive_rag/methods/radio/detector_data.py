"""The RaDIO detector's training data (`adaptive-rag detector-data --kind radio`), made with the
project's model from the project's corpus, following the reference's generate_data.py and
src/MLP_train/MLP_train_data.py (github ghh1125/RaDIO; MIND's auto-labelling, Su et al. 2024).

Per passage (the reference reads MIND's Wikipedia articles, `auto-labeled/wiki/*.json`; here a seeded
sample of `detectors.radio.passages`): the original text is its first two sentences joined with a
space, its title the passage's title. Its entities (`cut_entities`, generate_data.py `get_entities`):
spaCy's named entities, each occurrence widened to the whitespace-delimited chunk it sits in, a chunk
dropped when it is part of another, one per start; those at the start of the text or inside the title
are skipped. For each, the text before it is the start of the model's answer (chat: to "Question:
Tell me something about {title}.\\nAnswer: ", `chat_prompt`; raw: the text alone) and
`new_entity` lets the model continue greedily until the token that follows the entity in the
original text is among the `top_k` most likely next tokens, for at most the entity's token count plus
`window` steps (one batched greedy call, cached, and one forward pass for the ranks, `token_ranks`); what it
wrote in between is a "new entity", and the text with it between "@" marks is one of the passage's
`texts`. The label (MLP_train_data.py): 1 when the passage has a new entity, else
0; a passage without one gets the text "Please introduce the {title}:{original text}".

Where this differs, named: the reference's train/valid/test files are MIND's; here the passages are
split by a seeded shuffle (`valid_fraction`, `test_fraction`). The greedy tokens come from the
project's generation path (the reference calls `model.generate` one token at a time).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ...errors import InputError
from ...io import sha256_file, write_json, write_jsonl
from ...lm.base import LOGITS, Prompt, require

if TYPE_CHECKING:
    from ...config import Params

QUESTION = "Question: Tell me something about {title}.\nAnswer: "  # generate_data.py chat_prompt
FALLBACK = "Please introduce the {title}:{text}"  # MLP_train_data.py, a passage without texts
SPLITS = ("train", "valid", "test")


def cut_entities(title: str, text: str, extract: Callable) -> list[tuple[str, int]]:
    """(entity chunk, start) in text order: generate_data.py `get_entities` (find_boundaries,
    delete_substrings, every start) without the starts the main loop skips (0, or inside the title)."""
    widened = set()
    for name in {e.text for e in extract(text)}:
        at = text.find(name)
        while at >= 0:
            start, end = at, at + len(name)
            while start > 0 and text[start - 1] != " ":
                start -= 1
            while end < len(text) and text[end] != " ":
                end += 1
            widened.add(text[start:end])
            at = text.find(name, end)
    kept = sorted(w for w in widened if not any(w in other for other in widened if other != w))
    starts = {}
    for i in range(len(text)):
        for chunk in kept:
            if i not in starts and text.startswith(chunk, i):
                starts[i] = chunk
    return [(chunk, i) for i, chunk in sorted(starts.items()) if i != 0 and chunk not in title]


def entity_target(tokenizer, prefix: str, entity: str, rest: str) -> tuple[int, int] | None:
    """(the id of the token after the entity, the entity's token count), read as the reference does from
    the text with " @" after the entity (`find_first_and_next_token`); None where the reference skips:
    the prefix tokenizes differently inside the longer text, or nothing follows the "@"."""
    marked = f"{prefix} {entity} @{rest}".strip()
    at = len(prefix) + 1 + len(entity) + 1
    base = tokenizer(prefix)["input_ids"]
    encoded = tokenizer(marked, return_offsets_mapping=True)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    if ids[:len(base)] != base:
        return None
    position = next((k for k, (a, b) in enumerate(offsets) if a <= at < b and k >= len(base)), None)
    if position is None or position == len(ids) - 1:
        return None
    return ids[position + 1], position - len(base)


def answer_prompt(title: str, answer: str, prompt_format: str) -> Prompt:
    """The model's prompt with `answer` as the start of its answer."""
    if prompt_format == "chat":
        return Prompt.chat([{"role": "user", "content": QUESTION.format(title=title)}], prefix=answer)
    return Prompt(text=answer)


def new_entities(lm, prompts: list[Prompt], targets: list[tuple[int, int]], top_k: int, window: int) -> list:
    """Per cut: the model's greedy tokens after its prompt, up to the first step after which the entity's
    next token is among the `top_k` likeliest (the reference's loop over `entity_len + windows` steps,
    the first greedy token always kept), decoded; None if it never is. One batched greedy call (a longer
    budget than a cut needs changes none of its first tokens), one forward pass per cut for the ranks."""
    if not prompts:
        return []
    budget = max(max(1, length + window) for _, length in targets)
    out = []
    for prompt, (next_id, length), c in zip(prompts, targets, lm.generate(prompts, budget)):
        ids = list(c.token_ids or [])[:length + window]
        ranks = lm.token_ranks(prompt, ids, next_id) if ids else []
        step = next((k for k, rank in enumerate(ranks) if rank < top_k), None)
        out.append(None if step is None else lm.tokenizer.decode(ids[:step + 1]))
    return out


def passage_cuts(tokenizer, passage, extract: Callable) -> tuple[str, list[tuple]]:
    """A passage's original text (its first two sentences) and its cuts: (entity, start, prefix, rest,
    target) for each entity the reference would rewrite."""
    from ..parts.text import sentences

    original = " ".join(s.text for s in sentences(passage.text)[:2]) if passage.text.strip() else ""
    cuts = []
    for entity, start in cut_entities(passage.title, original, extract) if original else ():
        prefix, rest = original[:start].strip(), original[start + len(entity):]
        target = entity_target(tokenizer, prefix, entity, rest)
        if target is not None:
            cuts.append((entity, start, prefix, rest, target))
    return original, cuts


def passage_records(lm, passages, top_k: int, window: int, prompt_format: str, extract: Callable) -> list[dict]:
    """The records of passages that have text (texts, new entities, label), their cuts' rewrites made
    in one batch."""
    cut = [(p, *passage_cuts(lm.tokenizer, p, extract)) for p in passages]
    cut = [(p, original, cuts) for p, original, cuts in cut if original]
    flat = [(p, c) for p, _, cuts in cut for c in cuts]
    news = iter(new_entities(lm, [answer_prompt(p.title, c[2], prompt_format) for p, c in flat],
                             [c[4] for _, c in flat], top_k, window))
    records = []
    for passage, original, cuts in cut:
        texts, rewritten, originals = [], [], []
        for entity, start, prefix, rest, _ in cuts:
            new = next(news)
            if new is not None:
                texts.append(f"{prefix} @{new} @{rest}".strip())
                rewritten.append(new.strip().lower())
                originals.append([entity, start])
        records.append({"id": passage.id, "title": passage.title, "original_text": original,
                        "texts": texts or [FALLBACK.format(title=passage.title, text=original)],
                        "new_entities": rewritten, "original_entities": originals,
                        "label": 1 if rewritten else 0})
    return records


def assign_splits(count: int, valid_fraction: float, test_fraction: float, seed: int) -> list[str]:
    """A seeded shuffle cut into test, valid and train (the rest), per passage in order."""
    order = list(range(count))
    random.Random(seed).shuffle(order)
    test, valid = round(count * test_fraction), round(count * valid_fraction)
    out = ["train"] * count
    for rank, index in enumerate(order):
        out[index] = "test" if rank < test else "valid" if rank < test + valid else "train"
    return out


def build_radio(params: Params, lm, out: Path, extract: Callable | None = None) -> dict:
    """The records (JSONL, one per passage that has text) and the meta file beside them."""
    from tqdm import tqdm

    from ..dior.detector_data import sampled_passages
    from ..dior.detectors import data_sidecars
    from ..parts.text import entities

    cfg = params.detectors.radio
    require(lm.capabilities, {LOGITS}, "detector-data --kind radio", params.model.backend)
    passages = sampled_passages(cfg.passages, cfg.max_passages, cfg.seed)
    records, size = [], params.generation.chunk_size
    with tqdm(total=len(passages), desc="radio detector data", unit=" passages") as bar:
        for start in range(0, len(passages), size):
            batch = passages[start:start + size]
            records += passage_records(lm, batch, cfg.top_k, cfg.window, params.model.prompt_format,
                                       extract or entities)
            bar.update(len(batch))
    if not records:
        raise InputError(f"{cfg.passages}: none of the {len(passages)} sampled passages has text")
    for record, split in zip(records, assign_splits(len(records), cfg.valid_fraction, cfg.test_fraction, cfg.seed)):
        record["split"] = split
    write_jsonl(out, records)
    identity = lm.identity()
    meta = {"kind": "radio", "model": identity["model"], "identity": identity,
            "source": {"prompt_format": params.model.prompt_format, "top_k": cfg.top_k, "window": cfg.window},
            "passages": {"file": cfg.passages, "sha256": sha256_file(cfg.passages), "sampled": len(passages)},
            "records": len(records), "labelled_1": sum(r["label"] for r in records),
            "splits": {s: sum(r["split"] == s for r in records) for s in SPLITS}}
    write_json(data_sidecars(out)[0], meta)
    return meta
