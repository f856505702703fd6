"""White-box generation with transformers.

Greedy decoding is the only decoding this step offers, declared in params (`generation.decoding`),
so a run's text depends only on params.yaml, the weights and the dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


@dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int
    new_tokens: int


class HFModel:
    def __init__(self, model_dir: str | Path, dtype: str = "float32", device: str = "cpu", threads: int = 1,
                 seed: int = 0):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model_dir = Path(model_dir)
        if not (model_dir / "config.json").is_file():
            raise InputError(f"{model_dir}: not a model directory (run the model step first)")
        if device == "cpu":
            torch.set_num_threads(threads)
        torch.manual_seed(seed)
        self.torch = torch
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, DTYPES[dtype]))
        self.model.to(device).eval()
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def render_chat(self, messages: list[dict]) -> str:
        if not self.has_chat_template:
            raise InputError("model.prompt_format is 'chat' but this model's tokenizer has no chat template; "
                             "set model.prompt_format: raw")
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def generate(self, prompt: str, max_new_tokens: int, stop: tuple[str, ...] = ()) -> Generation:
        # Chat renderings already start with the template's own special tokens.
        encoded = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False).to(self.device)
        with self.torch.inference_mode():
            output = self.model.generate(
                **encoded, do_sample=False, max_new_tokens=max_new_tokens, stop_strings=list(stop) or None,
                tokenizer=self.tokenizer, pad_token_id=self.tokenizer.pad_token_id,
                temperature=None, top_p=None, top_k=None,
            )
        new_ids = output[0, encoded["input_ids"].shape[1]:]
        text = self.tokenizer.decode(new_ids, skip_special_tokens=True)
        for marker in stop:
            text = text.split(marker, 1)[0]
        return Generation(text=text.strip(), prompt_tokens=int(encoded["input_ids"].shape[1]),
                          new_tokens=int(new_ids.shape[0]))
