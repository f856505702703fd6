"""Continuous batching over the fast decoder: every slot stays busy until the last prompt of a call.

Why it is built this way:
- A call's prompts wait in order; `batch_size` slots decode together. When a row stops it leaves at
  once and the next waiting prompt is prefilled into its slot, so a call of 32 prompts at batch 8 runs
  8 rows per step until the last 8 remain, instead of four lockstep batches that each shrink to their
  slowest row.
- A prompt's own tokens are prefilled alone (no padding to the longest prompt of a batch), after the
  shared prefix whose cache the backend keeps between calls.
- Sampling k continuations of one prompt: the whole prompt becomes the shared prefix (prefilled once,
  its keys and values held once), and the k rows hold only what they generate. Memory grows with k
  times the generated length, not with k times the prompt.
- Which prompts share a step depends only on the call (its prompts, their order and `batch_size`), so a
  call repeats exactly; the rows' tokens are chosen by `rows.choice_columns` and `RowState.take`, as on
  the eager path. A greedy call (no watched ids) lets each decode step choose on the device
  (`FastDecoder.step(chooser=...)`): the same function on the same logits, with the step's other reads
  in one transfer; only rows just prefilled are chosen here.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

import numpy as np

from .base import Extras, GenerationStopped, SamplingParams
from .rows import RowState, choice_columns, chosen_from_rows


def run_continuous(lm, encoded: list[tuple[list[int], int]], limits: list[int], stop: Sequence[str],
                   extras: Extras, sampling: tuple[SamplingParams, list[int]] | None) -> list[RowState]:
    """Generate for every encoded prompt ((ids, shared count) pairs, all with the same shared ids unless
    sampling; prompt i generating at most limits[i] tokens) on `lm.decoder` with `lm.batch_size` slots;
    the rows' states in prompt order."""
    torch, decoder = lm.torch, lm.decoder
    final_layers = lm.check_layers(extras.final_layers)
    want_rows = extras.attention_layer is not None or extras.hidden_layer is not None
    states = [RowState(len(ids)) for ids, _ in encoded]
    generators, params = None, None
    chooser = extras if sampling is None and not extras.watch_ids else None
    ids, shared = encoded[0]
    base = lm.prefix_kv(tuple(ids[:shared]))
    if sampling is not None:  # k rows of one prompt: the whole prompt is their shared prefix
        params, seeds = sampling
        generators = [torch.Generator().manual_seed(params.seed + j) for j in seeds]
        prefix = decoder.encode_prefix(tuple(ids[shared:]), base, logits=True)
        lm.forward_tokens += len(ids) - shared
        suffixes = [[] for _ in encoded]
        slots = len(encoded)
    else:
        prefix = base
        suffixes = [ids[shared:] for ids, _ in encoded]
        slots = min(len(encoded), lm.batch_size)
    kv = decoder.new_slots(slots, max(len(s) + n for s, n in zip(suffixes, limits)) + 1)
    waiting = deque(range(len(encoded)))
    active: list[int] = []  # the prompt index in each occupied slot, slots 0..len-1
    pending: list = []  # each slot's next-token logits, or the values the step chose from them (a list)
    step = 0

    def leave(slot: int) -> None:
        last = len(active) - 1
        kv.move(last, slot)
        active[slot], pending[slot] = active[last], pending[last]
        active.pop()
        pending.pop()

    with torch.inference_mode():
        while True:
            while waiting and len(active) < slots:  # fill free slots in prompt order
                row = waiting.popleft()
                if suffixes[row]:
                    logits = decoder.prefill(prefix, kv, len(active), suffixes[row])
                    lm.forward_tokens += len(suffixes[row])
                else:
                    logits = prefix.logits[0]
                active.append(row)
                pending.append(logits)
            if not active:
                break
            if lm.stop_requested is not None and lm.stop_requested():
                raise GenerationStopped(step)
            fresh = [slot for slot, p in enumerate(pending) if not isinstance(p, list)]
            if fresh:  # rows just prefilled (every row when sampling): choose from their logits
                table = choice_columns(torch.stack([pending[s] for s in fresh]), extras.entropy, extras.logsumexp,
                                       extras.watch_ids, None if generators is None else
                                       [generators[active[s]] for s in fresh], params).cpu().tolist()
                for slot, values in zip(fresh, table):
                    pending[slot] = values
            chosen = chosen_from_rows(pending, extras)
            feeds = [states[row].take(chosen, i, lm, stop, limits[row], want_rows, final_layers)
                     for i, row in enumerate(active)]
            step += 1
            for slot in reversed(range(len(active))):  # rows not fed again leave before the step
                if feeds[slot] is None:
                    feeds[slot] = feeds[len(active) - 1]
                    feeds.pop()
                    leave(slot)
            if not active:
                continue
            out = decoder.step(prefix, kv, [f[0] for f in feeds], [f[1] for f in feeds],
                               attention_layer=extras.attention_layer, hidden_index=extras.hidden_layer,
                               final_layers=final_layers, final_source=extras.final_source, chooser=chooser)
            lm.forward_tokens += len(active)
            attention, hidden, finals = out.attention, out.hidden, out.finals
            for slot, row in enumerate(active):
                state = states[row]
                if attention is not None:
                    state.attentions.append(attention[slot, :prefix.length + kv.lengths[slot]].copy())
                if hidden is not None:
                    state.hidden.append(hidden[slot].copy())
                if state.finish is not None and finals is not None:
                    state.final = np.stack([finals[layer][slot] for layer in final_layers])
                pending[slot] = out.chosen[slot] if out.chosen is not None else out.logits[slot]
            for slot in reversed(range(len(active))):  # rows fed once more only for their extras leave now
                if states[active[slot]].finish is not None:
                    leave(slot)
    return states
