"""How the DRAGIN reference code (github oneal2000/DRAGIN, src/generate.py) cuts a look-ahead into
words and sentences and builds its query, for DRAGIN's `sentence_words: dragin-code` and
`query_words: dragin-code` (dragin.py documents the switches).

Words (`BasicGenerator.generate_attn`): the generated tokens merged into words, a word starting at
the first token, at every token that starts with a space (the tokenizer's space marker) and at the
newline token; a word's text is its tokens' pieces with every space removed. A word's attention is the
sum of its tokens' a_i, its entropy the mean of theirs.

Sentences (`AttnWeightRAG.modifier`): spaCy's sentences of the look-ahead, stripped, the empty ones
left out. Sentence k's words run from where sentence k - 1's ended to the first word index i at which
the sentence is a substring of the words [start, i) joined with single spaces; the last sentence
takes every word left. A sentence that is found in no such join (one with a newline inside: the
words around a newline join with a space, or with the newline inside a word) gets no words and
cannot fire, and its words fall to the next sentence. Its RIND: each word's attention divided by the
range's sum, times its entropy, times the range's word count.

Query (`AttnWeightRAG.keep_real_words`): the text `question + " " + text + " " + ptext + " " +` the
fired range's words joined with spaces is encoded again and passed through the model alone; its
tokens are merged into words as above; each word's attention vector is the mean, over its tokens, of
the previous position's head-averaged last-layer attention restricted to the positions before the
word and renormalised, summed per word; the ranking vector is the mean of those vectors over the
flagged words of the range (the fired range's words are taken as the last words of the encoding).
Candidates are the words that contain a real word (POS NOUN, ADJ, VERB, PROPN, NUM) of the whole
text as a substring, the flagged words excepted; the `top_n` best by the ranking vector, in text
order, joined with spaces. With no flagged word left the vector is 0/0 and the first `top_n`
candidates in text order are taken, as the reference's sort leaves NaN keys in place.

Token pieces (`token_pieces`): the reference reads tokens two ways, and both are spelled here as its
own tokenizer (Llama-2's SentencePiece) spells them (`llama`, the default of every switch that reads
them), whatever the model: `convert_ids_to_tokens` (the words above, RaDIO's real-word filter) writes a
newline as the byte token "<0x0A>", so a word that starts at a newline reads "<0x0A>The" and enters the
sentence test, the real-word filter and the re-encoded query with those characters; and the per-token
`decode` of `BasicGenerator.generate` (FLARE's token range) drops exactly one leading space and keeps a
newline as "\n". `decoded` is what this project did before: each token's decoded text, newlines as
"\n" and FLARE's pieces stripped of all leading whitespace (which deletes a newline token's text).
What no spelling reproduces: SmolLM2 writes a run of newlines ("\n\n") as one token, which starts no
word (the reference starts a word at the single newline token only, Llama's id 13), where Llama writes
one newline token per newline, each starting a word; and characters outside Llama's vocabulary, which
Llama spells as byte tokens ("<0xE2>"), keep their text here.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .text import real_words

TOKEN_PIECES = ("llama", "decoded")
LLAMA_NEWLINE = "<0x0A>"  # Llama-2's byte-fallback token for "\n" (id 13), as convert_ids_to_tokens spells it


def spelled(text: str, pieces: str = "llama") -> str:
    """A token's decoded text as the reference's `convert_ids_to_tokens` spells it (spaces kept: the
    caller removes the space marker): with `llama`, every newline as Llama's byte token "<0x0A>"."""
    return text.replace("\n", LLAMA_NEWLINE) if pieces == "llama" else text


def decoded_piece(text: str, pieces: str = "llama") -> str:
    """A token's text as `BasicGenerator.generate` decodes it alone (FLARE's per-token texts): with
    `llama`, SentencePiece's decode of one token, which drops exactly one leading space (a newline
    stays "\n"); with `decoded`, every leading whitespace character removed."""
    if pieces == "llama":
        return text[1:] if text.startswith(" ") else text
    return text.lstrip()


def merged_words(token_texts: Sequence[str], token_ids: Sequence[int], newline_id: int | None) -> list[list[int]]:
    """The reference's word ranges: lists of token indices."""
    groups: list[list[int]] = []
    for i, (text, token_id) in enumerate(zip(token_texts, token_ids)):
        if i == 0 or text.startswith(" ") or token_id == newline_id:
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def word_text(token_texts: Sequence[str], group: Sequence[int], pieces: str = "llama") -> str:
    """A word's text: its tokens' pieces joined, the space marker removed (`spelled`)."""
    return spelled("".join(token_texts[i] for i in group), pieces).replace(" ", "")


def sentence_ranges(sentences: Sequence[str], words: Sequence[str]) -> list[tuple[int, int]]:
    """Each sentence's word range [start, end) as `modifier` finds it (see the module docstring)."""
    out, start = [], 0
    for k, sentence in enumerate(sentences):
        if k == len(sentences) - 1:
            out.append((start, len(words)))
            break
        end = start
        for i in range(start + 1, len(words)):
            if sentence in " ".join(words[start:i]):
                end = i
                break
        out.append((start, end))
        start = end
    return out


def range_scores(attention: Sequence[float], entropy: Sequence[float], start: int, end: int) -> list[float]:
    """`modifier`'s value of each word of [start, end): attention / range sum * entropy * range size."""
    share = np.asarray(attention[start:end], dtype=np.float64)
    share = share / share.sum()
    return [float(share[i - start] * entropy[i] * (end - start)) for i in range(start, end)]


def real_word_filter(sentence: str, words: Sequence[str], flagged: Sequence[int]) -> list[int]:
    """The flagged words (indices into `words`) that contain a real word of `sentence`, parsed alone."""
    real = {w.text for w in real_words(sentence)}
    return [k for k in flagged if any(r in words[k] for r in real)]


def word_attention(matrix: np.ndarray, groups: Sequence[Sequence[int]]) -> np.ndarray:
    """[words, words]: row w is word w's attention to each word (see the module docstring)."""
    n = matrix.shape[0]
    out = np.zeros((len(groups), len(groups)), dtype=np.float64)
    for w, group in enumerate(groups):
        first = group[0]
        row = np.zeros(n, dtype=np.float64)
        for i in group:
            if i == 0:
                continue
            v = np.asarray(matrix[i - 1, :first], dtype=np.float64)
            row[:first] += v / v.sum()
        row /= len(group)
        out[w] = [row[g[0]:g[-1] + 1].sum() for g in groups]
    return out


def reference_query(words: Sequence[str], attention: np.ndarray, fired: int, hit: Sequence[bool], text: str,
                    top_n: int) -> str:
    """`keep_real_words`: `words` and `attention` (`word_attention`) of the re-encoded text, the fired
    range's `fired` words last with their flags `hit`."""
    start = len(words) - fired
    rows = [attention[start + i] for i, h in enumerate(hit) if h]
    with np.errstate(invalid="ignore", divide="ignore"):
        ranking = (np.sum(rows, axis=0) if rows else np.zeros(len(words))) / len(rows)
    real = {w.text for w in real_words(text)}
    pairs = [(float(ranking[i]), words[i], i) for i in range(len(words))
             if not (i >= start and hit[i - start]) and any(r in words[i] for r in real)]
    best = sorted(pairs, key=lambda p: p[0], reverse=True)[:min(top_n, len(pairs))]
    return " ".join(word for _, word, _ in sorted(best, key=lambda p: p[2]))
