"""Few-shot chain-of-thought prompts, as data plus two renderings (raw text and chat messages)."""
