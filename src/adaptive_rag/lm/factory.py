"""The one place a configured language model is built: backend, device per process, call cache.

Generation jobs and analysis steps (word significance) both call `build_model`, so a model is
always the same object for the same params, cached or not.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Params
    from .base import LanguageModel


def build_model(params: "Params", model_dir: Path | None, local_rank: int = 0) -> "LanguageModel":
    """The configured backend, wrapped in the shared call cache when one is configured.

    `local_rank` picks the GPU of an Accelerate process when `model.device` is plain `cuda`."""
    if params.model.backend == "api":
        from .api import APIModel

        api = params.model.api
        lm = APIModel(api.base_url, api.model, concurrency=api.concurrency, max_retries=api.max_retries)
    elif params.model.architecture == "seq2seq":
        from .seq2seq import Seq2SeqModel

        lm = Seq2SeqModel(model_dir, params.model.dtype, _device(params, local_rank), params.generation.threads,
                          params.seed, params.generation.batch_size)
    else:
        from .hf import HFModel

        device = _device(params, local_rank)
        lm = HFModel(model_dir, params.model.dtype, device, params.generation.threads, params.seed,
                     params.generation.batch_size, params.model.attention, params.model.cuda_graphs,
                     special_tokens=params.model.special_tokens, cpu_kernels=params.model.cpu_kernels)
    if params.generation.cache:
        from .cache import CachedModel, CallCache

        lm = CachedModel(lm, CallCache(params.generation.cache))
    return lm


def _device(params: "Params", local_rank: int) -> str:
    """`model.device`, with plain `cuda` meaning this Accelerate process's GPU."""
    return f"cuda:{local_rank}" if params.model.device == "cuda" else params.model.device
