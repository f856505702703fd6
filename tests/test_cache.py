"""The model-call cache: hits equal misses exactly, only misses reach the model, and no cache
trouble (damaged file, damaged row, concurrent writers) ever stops a run."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from adaptive_rag.lm.base import BLACK_BOX, Continuation, Extras, Prompt, SamplingParams
from adaptive_rag.lm.cache import CachedModel, CallCache, call_key
from adaptive_rag.lm.hf import HFModel

SRC = Path(__file__).resolve().parents[1] / "src"
PROMPTS = [Prompt(text=f"Question: who founded glassworks number {i}?\nAnswer:") for i in range(6)] + [
    Prompt.chat([{"role": "user", "content": "Where was Idris Penhallow born?"}]),
    Prompt.chat([{"role": "user", "content": "Who founded Velmora?"}], prefix="It was"),
]


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return HFModel(tiny_model_dir, "float32", "cpu", threads=1, batch_size=4)


def same(a, b) -> bool:
    """Deep equality where numpy arrays must match in dtype, shape and every bit."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, Continuation):
        return type(b) is Continuation and all(same(getattr(a, f.name), getattr(b, f.name))
                                               for f in dataclasses.fields(a))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()  # exact, NaN and -0.0 included
    return a == b


def forbid_calls(monkeypatch, model) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the wrapped model was called on a cache hit")

    for name in ("generate", "sample", "score"):
        monkeypatch.setattr(model, name, refuse)


def record_generate(monkeypatch, model) -> list[list[Prompt]]:
    calls: list[list[Prompt]] = []
    original = model.generate

    def recording(prompts, *args, **kwargs):
        calls.append(list(prompts))
        return original(prompts, *args, **kwargs)

    monkeypatch.setattr(model, "generate", recording)
    return calls


class FakeModel:
    """A black-box stand-in whose results carry arrays of every awkward kind."""

    capabilities = BLACK_BOX

    def __init__(self, name="fake"):
        self.name = name
        self.generated: list[list[Prompt]] = []

    def identity(self):
        return {"backend": "fake", "model": self.name}

    def generate(self, prompts, max_new_tokens, stop=(), extras=Extras()):
        self.generated.append(list(prompts))
        return [self.continuation(p.key(), max_new_tokens) for p in prompts]

    def sample(self, prompt, params, max_new_tokens, stop=(), extras=None):
        return [self.continuation(prompt.key() + str(params.seed + j), max_new_tokens) for j in range(params.n)]

    def score(self, prompt, continuation):
        return [-0.5, float("-inf"), -0.0]

    @staticmethod
    def continuation(text, n):
        rng = np.random.default_rng(len(text) + n)
        return Continuation(
            text=text[-10:], tokens=["a", "b"], logprobs=[float(rng.normal()), -1e-300], finish_reason="length",
            prompt_tokens=7, token_ids=[1, 2], entropies=[float("nan"), 0.1],
            attentions=[rng.random(8 + i).astype(np.float32) for i in range(n)],  # ragged rows
            hidden=np.asfortranarray(rng.standard_normal((n, 5)).astype(np.float16)),
            meta={"pair": (1, "x"), "__tuple__": "not a tag", "np": np.float32(0.25), "ids": np.arange(3)},
        )


# -- hits and misses with the real white-box backend ----------------------------------------------


def test_hits_return_identical_results_without_calling_the_model(lm, tmp_path, monkeypatch):
    path = tmp_path / "calls.sqlite"
    cached = CachedModel(lm, CallCache(path))
    assert cached.capabilities == lm.capabilities and cached.identity() == lm.identity()
    params = SamplingParams(n=3, seed=11)
    greedy = cached.generate(PROMPTS, max_new_tokens=6, stop=["\n"])
    sampled = cached.sample(PROMPTS[0], params, max_new_tokens=5)
    scored = cached.score(PROMPTS[1], " Idris Penhallow")
    assert len(greedy) == len(PROMPTS) and len(sampled) == 3 and len(scored) > 0
    assert cached.stats()["generate"] == {"hits": 0, "misses": len(PROMPTS)}
    assert cached.stats()["sample"] == {"hits": 0, "misses": 1}
    assert cached.stats()["score"] == {"hits": 0, "misses": 1}

    forbid_calls(monkeypatch, lm)
    again = CachedModel(lm, CallCache(path))  # as a later run (or another process) would open it
    assert same(again.generate(PROMPTS, max_new_tokens=6, stop=["\n"]), greedy)
    assert same(again.sample(PROMPTS[0], params, max_new_tokens=5), sampled)
    assert same(again.score(PROMPTS[1], " Idris Penhallow"), scored)
    stats = again.stats()
    assert stats["generate"] == {"hits": len(PROMPTS), "misses": 0}
    assert stats["sample"] == {"hits": 1, "misses": 0} and stats["score"] == {"hits": 1, "misses": 0}
    json.dumps(stats)  # goes into the run's provenance as is


def test_a_mixed_batch_sends_only_the_misses_in_one_call_in_order(lm, tmp_path, monkeypatch):
    reference = lm.generate(PROMPTS, 6)
    cached = CachedModel(lm, tmp_path / "calls.sqlite")
    cached.generate([PROMPTS[1], PROMPTS[4], PROMPTS[6]], 6)
    calls = record_generate(monkeypatch, lm)
    result = cached.generate(PROMPTS, 6)
    assert calls == [[PROMPTS[0], PROMPTS[2], PROMPTS[3], PROMPTS[5], PROMPTS[7]]]
    assert [c.token_ids for c in result] == [c.token_ids for c in reference]
    assert [c.text for c in result] == [c.text for c in reference]
    assert cached.stats()["generate"] == {"hits": 3, "misses": 3 + 5}
    assert cached.generate([], 6) == [] and len(calls) == 1


def test_a_limit_per_prompt_keys_each_prompt_with_its_own_limit(lm, tmp_path, monkeypatch):
    """A call of mixed limits stores what calls of one limit find again; only its misses go to the model,
    in one call, each with its own limit."""
    alone = [lm.generate([p], n)[0] for p, n in zip(PROMPTS, (6, 3, 5))]
    cached = CachedModel(lm, tmp_path / "calls.sqlite")
    cached.generate([PROMPTS[0]], 6)
    calls, original = [], lm.generate
    monkeypatch.setattr(lm, "generate", lambda prompts, limits, *rest: calls.append((prompts, limits))
                        or original(prompts, limits, *rest))
    mixed = cached.generate(PROMPTS[:3], [6, 3, 5])
    assert calls == [([PROMPTS[1], PROMPTS[2]], [3, 5])] and cached.stats()["generate"]["hits"] == 1
    assert [c.token_ids for c in mixed] == [c.token_ids for c in alone]
    forbid_calls(monkeypatch, lm)
    assert same(cached.generate([PROMPTS[1]], 3)[0], mixed[1]) and same(cached.generate([PROMPTS[2]], 5)[0], mixed[2])


def test_a_prompt_repeated_in_a_batch_is_generated_once(lm, tmp_path, monkeypatch):
    cached = CachedModel(lm, tmp_path / "calls.sqlite")
    calls = record_generate(monkeypatch, lm)
    result = cached.generate([PROMPTS[0], PROMPTS[1], PROMPTS[0]], 4)
    assert calls == [[PROMPTS[0], PROMPTS[1]]]
    assert same(result[0], result[2]) and result[0] is not result[2]


def test_white_box_arrays_round_trip_bit_identically(lm, tmp_path, monkeypatch):
    extras = Extras(entropy=True, attention_layer=-1, hidden_layer=1, watch_ids=(0, 5, 7))
    cached = CachedModel(lm, tmp_path / "calls.sqlite")
    first = cached.generate(PROMPTS[:3], 5, extras=extras)
    assert all(c.attentions and c.hidden is not None and c.entropies for c in first)
    assert all(len(c.watched) == len(c.tokens) and len(c.watched[0]) == 3 for c in first)
    assert len({len(row) for row in first[0].attentions}) > 1  # ragged rows, one per generated token
    forbid_calls(monkeypatch, lm)
    assert same(CachedModel(lm, tmp_path / "calls.sqlite").generate(PROMPTS[:3], 5, extras=extras), first)


# -- what the key separates -------------------------------------------------------------------------


def test_keys_separate_everything_that_changes_a_result(lm, tmp_path, monkeypatch):
    cached = CachedModel(lm, tmp_path / "calls.sqlite")
    prompt = PROMPTS[0]
    cached.generate([prompt], 4)
    for kwargs in ({"max_new_tokens": 5}, {"max_new_tokens": 4, "stop": ["."]},
                   {"max_new_tokens": 4, "extras": Extras(entropy=True)},
                   {"max_new_tokens": 4, "extras": Extras(hidden_layer=0)},
                   {"max_new_tokens": 4, "extras": Extras(watch_ids=(1,))},
                   {"max_new_tokens": 4, "extras": Extras(watch_ids=(2,))}):
        cached.generate([prompt], **kwargs)
    cached.generate([prompt.with_prefix(" It")], 4)
    assert cached.stats()["generate"] == {"hits": 0, "misses": 8}
    cached.generate([prompt], 4)
    assert cached.stats()["generate"]["hits"] == 1

    for params in (SamplingParams(n=2, seed=1), SamplingParams(n=2, seed=2), SamplingParams(n=3, seed=1),
                   SamplingParams(n=2, seed=1, temperature=0.7), SamplingParams(n=2, seed=1, top_p=0.5)):
        cached.sample(prompt, params, 4)
    cached.sample(prompt, SamplingParams(n=2, seed=1), 5)
    cached.sample(prompt, SamplingParams(n=2, seed=1), 4, stop=["\n"])
    assert cached.stats()["sample"] == {"hits": 0, "misses": 7}
    cached.score(prompt, " a")
    cached.score(prompt, " b")
    assert cached.stats()["score"] == {"hits": 0, "misses": 2}

    # Another model identity (other weights or dtype) never sees these rows.
    monkeypatch.setattr(lm, "identity", lambda: {**HFModel.identity(lm), "dtype": "bfloat16"})
    other = CachedModel(lm, cached.cache)
    calls = record_generate(monkeypatch, lm)
    other.generate([prompt], 4)
    assert len(calls) == 1 and cached.stats()["generate"] == {"hits": 1, "misses": 9}


def test_call_key_is_canonical():
    identity = {"model": "m", "backend": "hf", "dtype": "float32"}
    prompt = Prompt(text="q")
    base = call_key(identity, "generate", prompt, max_new_tokens=4, stop=["\n"], extras=Extras())
    assert base == call_key(dict(reversed(identity.items())), "generate", Prompt(text="q"),
                            extras=Extras(), stop=["\n"], max_new_tokens=4)
    assert len({base,
                call_key(identity, "sample", prompt, max_new_tokens=4, stop=["\n"], extras=Extras()),
                call_key({**identity, "weights_sha256": "x"}, "generate", prompt, max_new_tokens=4, stop=["\n"],
                         extras=Extras()),
                call_key(identity, "generate", Prompt(messages=(("user", "q"),)), max_new_tokens=4, stop=["\n"],
                         extras=Extras()),
                call_key(identity, "generate", prompt, max_new_tokens=4, stop=["\n", "."], extras=Extras())}) == 5


# -- exact storage -----------------------------------------------------------------------------------


def test_constructed_arrays_and_awkward_values_round_trip_exactly(tmp_path):
    model = FakeModel()
    cached = CachedModel(model, tmp_path / "calls.sqlite")
    first = cached.generate(PROMPTS[:2], 4)
    sampled = cached.sample(PROMPTS[0], SamplingParams(n=2, seed=3), 4)
    scored = cached.score(PROMPTS[0], "x")
    cached.cache.close()
    again = CachedModel(model, tmp_path / "calls.sqlite")
    hit = again.generate(PROMPTS[:2], 4)
    assert same(hit, first) and len(model.generated) == 1
    assert hit[0].hidden.flags.f_contiguous and type(hit[0].meta["np"]) is np.float32
    assert same(again.sample(PROMPTS[0], SamplingParams(n=2, seed=3), 4), sampled)
    assert same(again.score(PROMPTS[0], "x"), scored)
    assert again.stats()["generate"]["hits"] == 2


# -- damage -------------------------------------------------------------------------------------------


def test_a_garbage_file_is_moved_aside_and_rebuilt(tmp_path, caplog):
    path = tmp_path / "calls.sqlite"
    garbage = os.urandom(4096)
    path.write_bytes(garbage)
    with caplog.at_level(logging.WARNING, logger="adaptive_rag.lm"):
        cached = CachedModel(FakeModel(), CallCache(path))
    assert any(str(path) in r.getMessage() and r.name == "adaptive_rag.lm" for r in caplog.records)
    aside = list(tmp_path.glob("calls.sqlite.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == garbage
    assert cached.stats()["moved_aside"] == [str(aside[0])]
    cached.generate(PROMPTS[:2], 3)
    assert CachedModel(FakeModel(), path).generate(PROMPTS[:2], 3) and len(CallCache(path)) == 2


def test_a_damaged_page_or_a_foreign_schema_is_moved_aside(tmp_path, caplog):
    damaged = tmp_path / "damaged.sqlite"
    cache = CallCache(damaged)
    cache.put_many("score", [(f"k{i}", [float(i)] * 50) for i in range(300)])
    cache.close()
    with open(damaged, "r+b") as handle:
        handle.seek(3 * 4096)
        handle.write(b"\xff" * 2 * 4096)

    foreign = tmp_path / "foreign.sqlite"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE results (x)")
    conn.close()
    old = tmp_path / "old.sqlite"
    CallCache(old).close()
    conn = sqlite3.connect(old)
    conn.execute("UPDATE meta SET value = '0' WHERE name = 'schema'")
    conn.commit()
    conn.close()

    for path in (damaged, foreign, old):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="adaptive_rag.lm"):
            cache = CallCache(path)
        assert len([p for p in tmp_path.glob(f"{path.name}.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]) == 1
        assert any(str(path) in r.getMessage() for r in caplog.records)
        cache.put("score", "k", [1.0])
        assert cache.get("score", "k") == [1.0] and len(cache) == 1


def test_a_garbage_row_is_a_miss_and_is_overwritten(tmp_path, caplog):
    path = tmp_path / "calls.sqlite"
    model = FakeModel()
    cached = CachedModel(model, path)
    first = cached.generate(PROMPTS[:3], 4)
    cached.score(PROMPTS[0], "x")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE calls SET value = 'garbage{' WHERE rowid = (SELECT MIN(rowid) FROM calls)")
        # A well-formed row of the wrong shape (a score stored under a generate key) is no hit either.
        conn.execute("UPDATE calls SET value = (SELECT value FROM calls WHERE op = 'score'), arrays = NULL, "
                     "checksum = (SELECT checksum FROM calls WHERE op = 'score') "
                     "WHERE rowid = (SELECT MAX(rowid) FROM calls WHERE op = 'generate')")
    with caplog.at_level(logging.WARNING, logger="adaptive_rag.lm"):
        again = CachedModel(model, path)
        second = again.generate(PROMPTS[:3], 4)
    assert same(second, first)
    assert model.generated[-1] == [PROMPTS[0], PROMPTS[2]]
    assert again.stats()["generate"] == {"hits": 1, "misses": 2} and again.stats()["unreadable_rows"] == 2
    assert any("unreadable" in r.getMessage() for r in caplog.records)
    third = CachedModel(model, path)
    assert same(third.generate(PROMPTS[:3], 4), first) and third.stats()["generate"]["hits"] == 3


def test_an_unusable_location_never_stops_a_run(tmp_path, caplog):
    blocked = tmp_path / "a-directory"
    blocked.mkdir()
    with caplog.at_level(logging.WARNING, logger="adaptive_rag.lm"):
        cached = CachedModel(FakeModel(), blocked)
    assert cached.generate(PROMPTS[:2], 3) and cached.score(PROMPTS[0], "x")
    assert cached.stats()["disabled"] and cached.stats()["generate"] == {"hits": 0, "misses": 2}
    assert any(str(blocked) in r.getMessage() for r in caplog.records)


def test_a_cache_travels_to_another_process_by_pickle(tmp_path):
    cache = CallCache(tmp_path / "calls.sqlite")
    cache.put("score", "k", [1.5])
    clone = pickle.loads(pickle.dumps(cache))
    assert clone.get("score", "k") == [1.5]


# -- concurrency ------------------------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    from test_cache import FakeModel, PROMPTS
    from adaptive_rag.lm.base import Prompt
    from adaptive_rag.lm.cache import CachedModel, CallCache

    path, worker, go = Path(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
    cached = CachedModel(FakeModel(), CallCache(path))
    while not go.exists():
        time.sleep(0.005)
    for i in range(60):
        prompts = [Prompt(text=f"worker {worker} prompt {i} part {j}") for j in range(3)] + [PROMPTS[i % 8]]
        cached.generate(prompts, 4)
        cached.cache.put("score", f"w{worker}-{i}", [float(i)])
    stats = cached.stats()
    assert stats["failed_writes"] == 0 and stats["unreadable_rows"] == 0 and not stats["disabled"], stats
""")


@pytest.mark.slow  # three writer processes
def test_concurrent_processes_share_one_file(tmp_path):
    path, go = tmp_path / "calls.sqlite", tmp_path / "go"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    workers = [subprocess.Popen([sys.executable, str(script), str(SRC), str(Path(__file__).parent), str(path),
                                 str(w), str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for w in range(3)]
    time.sleep(0.5)
    go.touch()
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        assert "WARNING" not in err and "call cache" not in err, err
    cache = CallCache(path)
    assert len(cache) == 3 * 60 * 3 + 8 + 3 * 60
    model = FakeModel()
    everything = [Prompt(text=f"worker {w} prompt {i} part {j}") for w in range(3) for i in range(60)
                  for j in range(3)] + PROMPTS
    result = CachedModel(model, cache).generate(everything, 4)
    assert model.generated == [] and same(result, FakeModel().generate(everything, 4))
    assert all(cache.get("score", f"w{w}-{i}") == [float(i)] for w in range(3) for i in range(60))
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
