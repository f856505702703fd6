"""RaDIO's hallucination detector at run time: the MLP, its per-token input and its decision rule, and
the weights file the workflow trains (`train-detector --kind radio`; docs/radio.md#the-detector).

What the reference code does (github ghh1125/RaDIO, src/generate.py):
- `MLP(2, 64, 1)`: Linear(2, 64), ReLU, Linear(64, 1), Sigmoid (class `MLP`; `BasicGenerator.generate_attn`
  builds it with these sizes);
- its input for one generated token: the token's text (`convert_ids_to_tokens`, the space marker removed:
  "▁" when the model's `model_type` is "llama", else the tokenizer's token for " ") encoded again with
  `tokenizer.encode` (special tokens added as the tokenizer adds them), the first two ids as floats, padded
  with zeros to two (`generate_attn`, the loop over `range_`, one range per token);
- the decision (`AttnWeightRAG.inference`): with s_i the MLP's output for token i of the look-ahead and
  m their mean, the detector fires when some s_i > m and s_i <= 0.5.
The weights are trained on other features (a 2-D PCA of TF-IDF vectors, src/MLP_train/MLP.py): the
reference applies them to token ids all the same, and so does this module (docs/radio.md says why).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ...errors import InputError

FORMAT = "adaptive-rag-radio-detector-v1"
RADIO_DETECTOR = "data/detectors/radio.safetensors"  # `train-detector --kind radio` (workflow/rules/detectors.smk)
RADIO_DATA = "data/detectors/radio-data.jsonl"  # `detector-data --kind radio`
INPUTS, HIDDEN = 2, 64  # src/generate.py: MLP(2, 64, 1)
CEILING = 0.5  # a score above the mean fires only up to this value (AttnWeightRAG.inference)


def build_net():
    """The reference's MLP: Linear(2, 64), ReLU, Linear(64, 1), Sigmoid; the state keys are its own
    (`fc1.*`, `fc2.*`), so a reference checkpoint's tensors load as they are."""
    import torch

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(INPUTS, HIDDEN)
            self.fc2 = torch.nn.Linear(HIDDEN, 1)

        def forward(self, x):
            return torch.sigmoid(self.fc2(torch.relu(self.fc1(x))))

    return MLP()


def space_marker(tokenizer, model_type: str | None) -> str:
    """`BasicGenerator.__init__`: "▁" for a model whose config says llama, else the token of " "."""
    if model_type == "llama":
        return "▁"
    pieces = tokenizer.tokenize(" ")
    return pieces[0] if pieces else " "


def token_features(tokenizer, pieces: Sequence[str], marker: str) -> np.ndarray:
    """[tokens, 2]: each token piece without the space marker, encoded again, its first two ids (zero-padded)."""
    out = np.zeros((len(pieces), INPUTS), dtype=np.float32)
    for row, piece in enumerate(pieces):
        ids = list(tokenizer.encode(piece.replace(marker, "")))[:INPUTS]
        out[row, :len(ids)] = ids
    return out


def fires(scores: Sequence[float]) -> bool:
    """AttnWeightRAG.inference's flag: some score above the look-ahead's mean and at most 0.5."""
    if not len(scores):
        return False
    mean = sum(scores) / len(scores)
    return any(mean < s <= CEILING for s in scores)


class RadioDetector:
    """The trained MLP with the header its file records (the LM it was trained for, how its data was made)."""

    def __init__(self, module, header: dict, metrics: dict | None = None):
        self.module = module.eval()
        self.header = header
        self.metrics = metrics

    def scores(self, features: np.ndarray) -> list[float]:
        import torch

        with torch.no_grad():
            x = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32)).reshape(-1, INPUTS)
            return [float(v) for v in self.module(x).reshape(-1)]

    def save(self, path: str | Path) -> Path:
        """The weights with their header (safetensors) and the metrics beside them (`<stem>.metrics.json`)."""
        from ..dior.detectors import write_weights

        return write_weights(path, self.module, self.header, self.metrics)


def load(path: str | Path, model: str | None = None) -> RadioDetector:
    """A saved RaDIO detector, refused (naming the file) when it is not one or was trained for another LM."""
    from ..dior.detectors import read_weights

    header, tensors = read_weights(path, "RaDIO detector", "train it: snakemake --cores all train_radio_detector",
                                   FORMAT)
    if model is not None and header.get("model") != model:
        raise InputError(f"{path}: this RaDIO detector was trained for model {header.get('model')!r}, not "
                         f"{model!r}; retrain it for {model!r}")
    module = build_net()
    module.load_state_dict(tensors, strict=True)
    return RadioDetector(module, header)
