"""What each backend can give a method. Standard library only: params validation imports it."""

from __future__ import annotations

LOGPROBS = "logprobs"
SAMPLING = "sampling"
SCORING = "scoring"
ENTROPY = "entropy"
ATTENTIONS = "attentions"
HIDDEN_STATES = "hidden_states"
LOGITS = "logits"  # the full next-token logits (an API returns only the top log-probabilities)
GRADIENTS = "gradients"  # gradients w.r.t. the input embeddings (Integrated Gradients attributions)
WHITE_BOX = frozenset({LOGPROBS, SAMPLING, SCORING, ENTROPY, ATTENTIONS, HIDDEN_STATES, LOGITS, GRADIENTS})
BLACK_BOX = frozenset({LOGPROBS, SAMPLING, SCORING})  # an API returns tokens and their log-probabilities
# An encoder-decoder model (FLAN-T5) gives text, token log-probabilities and its decoder's full logits; the
# attentions over the prompt, hidden states and input gradients the methods read are a decoder-only model's.
SEQ2SEQ = frozenset({LOGPROBS, SAMPLING, SCORING, ENTROPY, LOGITS})
BACKEND_CAPABILITIES = {"hf": WHITE_BOX, "api": BLACK_BOX}
ARCHITECTURES = ("causal", "seq2seq")  # model.architecture (backend hf): AutoModelForCausalLM | ...Seq2SeqLM
DTYPES = ("float32", "bfloat16", "float16")  # what model.dtype may name; the hf backend maps each to torch
# model.attention: fast (lm.fast_decoder: shared-prefix cache, continuous batching, Llama-family decoders) |
# eager (transformers' own forward with its eager kernel in every layer: any causal LM, the reference)
ATTENTION_PATHS = ("fast", "eager")


def missing(capabilities: frozenset[str], needs) -> list[str]:
    return sorted(set(needs) - set(capabilities))


def model_capabilities(backend: str, architecture: str = "causal") -> frozenset[str]:
    """What a configured model can give: the backend's, narrowed for an encoder-decoder model."""
    return SEQ2SEQ if backend == "hf" and architecture == "seq2seq" else BACKEND_CAPABILITIES[backend]
