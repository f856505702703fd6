"""One generated row's bookkeeping, shared by both attention paths of the white-box backend.

Both paths (`hf.HFModel`'s eager lockstep loop and `continuous.run_continuous` over the fast decoder)
choose tokens the same way and decide the same way when a row stops and what it is fed next, so their
outputs differ only where their floating-point sums do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .base import Continuation, Extras, SamplingParams, cut_at_stop


@dataclass
class Chosen:
    """The token chosen for each active row, with the per-token facts asked for (Python lists)."""

    tokens: list[int]
    logprobs: list[float]
    entropies: list[float] | None
    logsumexp: list[float] | None
    watched: list[list[float]] | None = None


def choose(logits, extras: Extras, generators=None, params: SamplingParams | None = None) -> Chosen:
    """Greedy (argmax) or seeded sampling over [rows, vocab] logits; log-probability of each chosen token,
    and on request each distribution's entropy, the raw logits' logsumexp and the log-probabilities of
    the watched token ids."""
    # One transfer to the host per step (a GPU would otherwise wait once per list).
    return chosen_from_rows(choice_columns(logits, extras.entropy, extras.logsumexp, extras.watch_ids, generators,
                                           params).cpu().tolist(), extras)


def choice_columns(logits, entropy: bool = False, logsumexp: bool = False, watch_ids: Sequence[int] = (),
                   generators=None, params: SamplingParams | None = None):
    """What `choose` reads, as one [rows, 2 + entropy + logsumexp + watched] float64 tensor on the logits'
    device: chosen token id, its log-probability, then the columns asked for. Token ids are exact in
    float64 and float32 values convert to float64 exactly. Greedy without watched ids it runs no host
    code, so the fast decoder records it inside a CUDA graph."""
    import torch

    logits = logits.float()
    logprobs = torch.log_softmax(logits, dim=-1)
    chosen = logprobs.argmax(dim=-1) if generators is None else sample_rows(logits, generators, params)
    columns = [logprobs.gather(-1, chosen[:, None])[:, 0]]
    if entropy:
        columns.append(-(logprobs.exp() * logprobs).sum(-1))
    if logsumexp:
        columns.append(torch.logsumexp(logits, dim=-1))
    if watch_ids:
        columns.extend(logprobs[:, list(watch_ids)].unbind(-1))
    return torch.stack([chosen.double(), *(c.double() for c in columns)], dim=1)


def chosen_from_rows(table: Sequence[Sequence[float]], extras: Extras) -> Chosen:
    """`Chosen` from rows of `choice_columns`' values (host lists), in row order."""
    values = list(zip(*table)) if table else [()] * (2 + extras.entropy + extras.logsumexp + len(extras.watch_ids))
    rest = iter(values[2:])
    entropies = list(next(rest)) if extras.entropy else None
    logsumexp = list(next(rest)) if extras.logsumexp else None
    watched = [list(row) for row in zip(*rest)] if extras.watch_ids else None
    return Chosen([int(t) for t in values[0]], list(values[1]), entropies, logsumexp, watched)


def sample_rows(logits, generators, params: SamplingParams):
    """One token per row from the temperature/top-k/top-p filtered distribution, each row with its own
    generator, so continuation j depends only on its seed (seed + j), not on its batch neighbours."""
    import torch

    scaled = logits / max(params.temperature, 1e-6)
    if params.top_k:
        kth = torch.topk(scaled, min(params.top_k, scaled.shape[-1]), dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if params.top_p is not None and params.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs > params.top_p
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    probs = probs / probs.sum(-1, keepdim=True)
    cumulative = probs.cumsum(-1)
    draws = torch.stack([torch.rand((), generator=g) for g in generators]).to(cumulative.device)
    return torch.searchsorted(cumulative, draws[:, None]).squeeze(-1).clamp(max=probs.shape[-1] - 1)


class RowState:
    """What one prompt's generation has produced so far."""

    def __init__(self, prompt_len: int):
        self.prompt_len = prompt_len
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.entropies: list[float] = []
        self.attentions: list[np.ndarray] = []
        self.hidden: list[np.ndarray] = []
        self.logsumexp: list[float] = []
        self.watched: list[list[float]] = []
        self.final: np.ndarray | None = None
        self.finish: str | None = None
        self.first_logprob: float | None = None  # the first generated token's, whether it is kept or not

    def take(self, chosen: Chosen, i: int, model, stop: Sequence[str], max_new_tokens: int,
             want_rows: bool, final_layers: Sequence[int]) -> tuple[int, int] | None:
        """Record row i of `chosen`; return (token to feed, its position), or None when the row leaves.

        A row is fed its token to get the next logits, and once more after it finished when the caller
        wants that token's own attention row or hidden state (`want_rows`) or the final state: then a
        finished continuation's last token is replaced by EOS, and an EOS the model chose itself is fed
        as it is, at the next position (SeaKR's reference reads the state there)."""
        token = chosen.tokens[i]
        if self.first_logprob is None:
            self.first_logprob = float(chosen.logprobs[i])
        if token in model.eos_ids:
            self.finish = "eos"
            if getattr(model, "skip_special", True):
                return (token, self.prompt_len + len(self.ids)) if final_layers else None
            # `special_tokens: keep`: the end token is one of the continuation's tokens, with its
            # probability and (fed once more) its own attention row, as the DRAGIN reference's decode has it
            self.record(chosen, i, token)
            return (token, self.prompt_len + len(self.ids) - 1) if want_rows or final_layers else None
        self.record(chosen, i, token)
        if cut_at_stop(model.tokenizer.decode(self.ids, skip_special_tokens=getattr(model, "skip_special", True)),
                       stop)[1]:
            self.finish = "stop"
        elif len(self.ids) >= max_new_tokens:
            self.finish = "length"
        if self.finish is None or want_rows or final_layers:
            fed = model.final_eos_id if self.finish and final_layers else token
            return fed, self.prompt_len + len(self.ids) - 1
        return None

    def record(self, chosen: Chosen, i: int, token: int) -> None:
        self.ids.append(token)
        self.logprobs.append(chosen.logprobs[i])
        if chosen.entropies is not None:
            self.entropies.append(chosen.entropies[i])
        if chosen.logsumexp is not None:
            self.logsumexp.append(chosen.logsumexp[i])
        if chosen.watched is not None:
            self.watched.append(chosen.watched[i])

    def result(self, model, stop: Sequence[str], extras: Extras) -> Continuation:
        texts = model.token_texts(self.ids)
        text, _ = cut_at_stop(model.tokenizer.decode(self.ids, skip_special_tokens=getattr(model, "skip_special", True)),
                              stop)
        # Keep every token that contributes a character to `text` (the last may run into the stop string).
        keep, length = 0, 0
        while keep < len(texts) and length < len(text):
            length += len(texts[keep])
            keep += 1
        if not text or (extras.watch_ids and self.finish != "stop"):
            keep = 0 if self.finish == "stop" else len(texts)
        return Continuation(
            text=text, tokens=texts[:keep], logprobs=self.logprobs[:keep], finish_reason=self.finish or "length",
            prompt_tokens=self.prompt_len, token_ids=self.ids[:keep],
            entropies=self.entropies[:keep] if extras.entropy else None,
            attentions=self.attentions[:keep] if extras.attention_layer is not None else None,
            hidden=(np.stack(self.hidden[:keep]) if keep else
                    np.zeros((0, model.model.config.hidden_size), dtype=np.float32))
            if extras.hidden_layer is not None else None,
            final_hidden=self.final if extras.final_layers else None,
            logsumexp=self.logsumexp[:keep] if extras.logsumexp else None,
            watched=self.watched[:keep] if extras.watch_ids else None,
            end_logprob=self.first_logprob if extras.end_logprob and keep == 0 else None,
        )
