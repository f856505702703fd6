"""The black-box backend end to end: the real `serve` process in front of the tiny model, the real
`APIModel` (openai client) in front of it, compared with the same model in-process."""

from __future__ import annotations

import http.client
import json
import queue
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from adaptive_rag.errors import ConfigError
from adaptive_rag.lm.base import BLACK_BOX, Extras, Prompt, SamplingParams

NAME = "tiny-served"
USER = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Who wrote Hamlet?"}]
PROMPTS = [
    Prompt(text="Question: What is the capital of France?\nAnswer:"),
    Prompt(text="Question: Who wrote Hamlet?\nAnswer:", prefix=" The play was written by"),
    Prompt.chat(USER),
    Prompt.chat(USER, prefix="It was written"),
    Prompt(text="The river Thames flows through"),
]


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    proc = subprocess.Popen(
        [sys.executable, "-m", "adaptive_rag.lm.serve", "--model-dir", str(tiny_model_dir), "--port", "0",
         "--served-name", NAME],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()
    log: list[str] = []

    def drain():
        for line in proc.stdout:
            log.append(line)
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    ready = None
    try:
        while ready is None:
            line = lines.get(timeout=60)
            if line is None:
                pytest.fail("serve exited before it was ready:\n" + "".join(log))
            if line.startswith("serving "):
                ready = line
        assert ready.startswith(f"serving {NAME} on http://127.0.0.1:")
        yield ready.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        code = proc.wait(timeout=90)  # 1-2 s idle; more on a busy 2-core machine
    assert code == 0, "serve did not stop cleanly on SIGTERM:\n" + "".join(log)
    assert "Traceback" not in "".join(log), "".join(log)


@pytest.fixture(scope="module")
def hf(tiny_model_dir):
    from adaptive_rag.lm.hf import HFModel

    return HFModel(tiny_model_dir)


@pytest.fixture(scope="module")
def api(server):
    from adaptive_rag.lm.api import APIModel

    with APIModel(server, NAME, concurrency=4, max_retries=2, timeout=60) as model:
        yield model


def reply_json(handler: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict | None = None) -> None:
    """A stub server's answer: `data` (JSON bytes) with its status and extra headers."""
    handler.send_response(status)
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def start_stub(handler_class) -> tuple[ThreadingHTTPServer, str]:
    """A stub OpenAI-compatible server in a thread, and its /v1 base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.tokens == w.tokens
        assert g.text == w.text
        assert g.finish_reason == w.finish_reason
        assert g.prompt_tokens == w.prompt_tokens
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-5)


@pytest.mark.slow  # starts the `serve` process (module fixture `server`)
def test_greedy_generate_matches_in_process(api, hf):
    got = api.generate(PROMPTS, max_new_tokens=12)
    want = hf.generate(PROMPTS, max_new_tokens=12)
    assert_same(got, want)
    assert all(c.tokens and len(c.logprobs) == len(c.tokens) for c in got)
    assert api.capabilities == BLACK_BOX
    limits = [2 + 3 * i for i in range(len(PROMPTS))]  # one limit per prompt: a request each with its own
    assert_same(api.generate(PROMPTS, max_new_tokens=limits), hf.generate(PROMPTS, max_new_tokens=limits))


@pytest.mark.slow  # starts the `serve` process (module fixture `server`)
def test_stop_strings_cut_identically(api, hf):
    free = hf.generate(PROMPTS, max_new_tokens=12)
    # A stop string from the middle of each free continuation, so every prompt really stops on it.
    for prompt, c in zip(PROMPTS, free):
        stop = [c.text[len(c.text) // 2: len(c.text) // 2 + 2], "@@never@@"]
        want = hf.generate([prompt], max_new_tokens=12, stop=stop)
        got = api.generate([prompt], max_new_tokens=12, stop=stop)
        assert want[0].finish_reason == "stop" and stop[0] not in want[0].text
        assert_same(got, want)


@pytest.mark.slow  # starts the `serve` process (module fixture `server`)
def test_sampling_is_seeded_and_matches_in_process(api, hf):
    for prompt in (PROMPTS[1], PROMPTS[3]):
        params = SamplingParams(n=3, seed=11, temperature=1.0, top_k=50, top_p=0.9)
        first = api.sample(prompt, params, max_new_tokens=8)
        again = api.sample(prompt, params, max_new_tokens=8)
        other = api.sample(prompt, SamplingParams(n=3, seed=12), max_new_tokens=8)
        assert len(first) == 3 and all(c.logprobs for c in first)
        assert [c.tokens for c in first] == [c.tokens for c in again]
        assert [c.tokens for c in first] != [c.tokens for c in other]
        assert_same(first, hf.sample(prompt, params, max_new_tokens=8))


@pytest.mark.slow  # starts the `serve` process (module fixture `server`)
@pytest.mark.parametrize("prompt,continuation", [
    (PROMPTS[0], " Paris is the capital"),
    (PROMPTS[1], " William Shakespeare"),
    # The boundary token merges the prompt's last characters with the continuation's first ('c' + 't'):
    (Prompt(text="The film was direc"), "ted by"),
    (PROMPTS[2], "William Shakespeare wrote it."),
    (PROMPTS[3], " by Shakespeare"),
    (Prompt.chat(USER, prefix="The film was direc"), "ted by"),
])
def test_score_matches_in_process(api, hf, prompt, continuation):
    want = hf.score(prompt, continuation)
    got = api.score(prompt, continuation)
    if continuation == "ted by":  # the case really merges: the prompt alone does not end in a boundary token
        ids, _ = hf.encode(prompt)
        assert hf.encode(prompt.with_prefix(prompt.prefix + continuation))[0][:len(ids)] != ids
    assert len(got) == len(want) > 0
    assert got == pytest.approx(want, abs=1e-5)


@pytest.mark.slow  # starts the `serve` process (module fixture `server`)
def test_identity_reports_the_served_model(api, hf, server):
    ident = api.identity()
    assert ident["backend"] == "api" and ident["base_url"] == server and ident["model"] == NAME
    assert ident["identity"] == hf.identity()  # the weights hash travels through /v1/models
    assert api.identity() == ident


@pytest.mark.slow  # starts the `serve` process (module fixture `server`)
def test_white_box_extras_are_refused(api):
    with pytest.raises(ConfigError, match="attentions"):
        api.generate(PROMPTS[:1], 4, extras=Extras(attention_layer=-1))
    with pytest.raises(ConfigError, match="entropy"):
        api.generate(PROMPTS[:1], 4, extras=Extras(entropy=True))


@pytest.mark.slow  # starts the `serve` process (module fixture `server`)
def test_bad_requests_get_a_400_with_a_message(api, server):
    import openai

    client = api.client
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=NAME, prompt="hi", max_tokens=-1)
    assert err.value.status_code == 400 and "max_tokens" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError, match="frobnicate"):
        client.completions.create(model=NAME, prompt="hi", extra_body={"frobnicate": 1})
    with pytest.raises(openai.BadRequestError, match="prompt"):
        client.completions.create(model=NAME, prompt=None)
    with pytest.raises(openai.BadRequestError, match="final assistant message"):
        client.chat.completions.create(model=NAME, messages=USER, extra_body={"continue_final_message": True})
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client.chat.completions.create(model=NAME, messages=USER, logprobs=True, top_logprobs=3)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="other", prompt="hi")
    # Not JSON at all: still an OpenAI error body, no traceback.
    request = urllib.request.Request(f"{server}/completions", data=b"{not json", method="POST",
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    body = json.loads(err.value.read())
    assert err.value.code == 400 and body["error"]["type"] == "invalid_request_error"
    assert "JSON" in body["error"]["message"] and "Traceback" not in body["error"]["message"]


@pytest.mark.slow  # starts the `serve` process (module fixture `server`)
def test_429_and_5xx_are_retried(server, hf):
    """A proxy that answers 429 then 503 before passing requests on: the client retries through both."""
    from adaptive_rag.lm.api import APIModel

    upstream = server.split("//", 1)[1].split("/", 1)[0]
    failures = [(429, {"retry-after-ms": "5"}), (503, {})]  # 503: the client's own exponential backoff
    seen = []

    class Flaky(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.path)
            if len(seen) <= len(failures):
                status, headers = failures[len(seen) - 1]
                data = json.dumps({"error": {"message": "try again", "type": "server_error"}}).encode()
            else:
                conn = http.client.HTTPConnection(upstream, timeout=30)
                conn.request("POST", self.path, body, {"Content-Type": "application/json"})
                reply = conn.getresponse()
                status, headers, data = reply.status, {}, reply.read()
                conn.close()
            reply_json(self, status, data, headers)

    proxy, base = start_stub(Flaky)
    try:
        with APIModel(base, NAME, max_retries=3) as flaky:
            got = flaky.generate(PROMPTS[:1], max_new_tokens=6)
        assert len(seen) == 3  # 429, 503, then the answer
        assert_same(got, hf.generate(PROMPTS[:1], max_new_tokens=6))

        import openai

        seen.clear()
        with APIModel(base, NAME, max_retries=0) as impatient:
            with pytest.raises(openai.RateLimitError):
                impatient.generate(PROMPTS[:1], max_new_tokens=6)
        assert len(seen) == 1
    finally:
        proxy.shutdown()
        proxy.server_close()


class Stub:
    """The smallest `LanguageModel`: echoes the prompt reversed, ending at end of sequence."""

    capabilities = BLACK_BOX

    def identity(self):
        return {"backend": "stub"}

    def generate(self, prompts, max_new_tokens, stop=(), extras=None):
        from adaptive_rag.lm.base import Continuation

        time.sleep(0.02)
        if any(p.text == "boom" for p in prompts):
            raise RuntimeError("model failure")
        return [Continuation(p.text[::-1], list(p.text[::-1]), [-1.0] * len(p.text), "eos", len(p.text))
                for p in prompts]


def test_any_language_model_eos_and_concurrency_cap():
    """Any protocol object can be served; OpenAI's "stop" at end of sequence comes back as "eos"; at most
    `concurrency` requests are in flight; results keep the input order."""
    import openai

    from adaptive_rag.lm.api import APIModel
    from adaptive_rag.lm.connections import bound_socket
    from adaptive_rag.lm.serve import Service, make_server

    sock = bound_socket("127.0.0.1", 0)
    server = make_server(Service(Stub(), "stub"), sock)
    counts, lock = {"now": 0, "max": 0, "all": 0}, threading.Lock()
    app = server.config.app

    async def counting(scope, receive, send):  # requests in flight at the server
        post = scope["type"] == "http" and scope["method"] == "POST"
        with lock:
            counts["now"] += post
            counts["all"] += post
            counts["max"] = max(counts["max"], counts["now"])
        try:
            await app(scope, receive, send)
        finally:
            with lock:
                counts["now"] -= post

    server.config.app = counting
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    try:
        with APIModel(base, "stub", concurrency=3) as model:
            prompts = [Prompt(text=f"prompt {i:02d}") for i in range(10)]
            got = model.generate(prompts, 8)
            assert [c.text for c in got] == [p.text[::-1] for p in prompts]
            assert {c.finish_reason for c in got} == {"eos"} and got[0].prompt_tokens == 9
            assert counts["max"] == 3
            raw = model.client.completions.create(model="stub", prompt="ab", max_tokens=4, temperature=0)
            assert raw.choices[0].finish_reason == "stop"
            assert model.identity()["identity"] == {"backend": "stub"}
            with pytest.raises(openai.BadRequestError, match="echo"):  # no tokenizer behind this model
                model.score(Prompt(text="a"), "b")
            counts["all"] = 0  # a model failure: a 500 without traceback, not retried (it would fail again)
            with pytest.raises(openai.InternalServerError) as err:
                model.generate([Prompt(text="boom")], 4)
            assert "RuntimeError" in err.value.body["message"] and "Traceback" not in str(err.value.body)
            assert counts["all"] == 1
    finally:
        server.should_exit = True
        thread.join(timeout=20)


class OverlapRetriever:
    """A small real lexical retriever over the demo passages (shared words, ties by id): deterministic,
    no index needed, so both backends see the same passages for the same query."""

    def __init__(self):
        import csv

        from conftest import REPO
        from adaptive_rag.retrieval import Hit

        with open(REPO / "data/demo/psgs_demo.tsv", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        self.passages = [Hit(r["id"], r["title"], r["text"], 0.0) for r in rows]

    def search(self, query, k):
        words = set(query.lower().split())
        scored = sorted(self.passages, key=lambda h: (-len(words & set(f"{h.title} {h.text}".lower().split())), h.id))
        return scored[:k]


@pytest.mark.slow  # starts the `serve` process (module fixture `server`)
def test_scaar_on_the_api_backend_decides_like_the_white_box_run(api, hf):
    """SCAAR needs only token probabilities: through the real `serve` process and the openai client it
    makes the same retrieval decisions, queries and answers as the same model in-process."""
    from conftest import REPO
    from adaptive_rag.settings import Section
    from adaptive_rag.data.datasets import load_dataset
    from adaptive_rag.methods.base import Context
    from adaptive_rag.methods.scaar import SCAAR
    from adaptive_rag.prompts.fewshot import load_exemplars

    examples = load_dataset("hotpotqa", REPO / "data/demo/hotpot_demo.json")[:4]
    exemplars = load_exemplars(REPO / "data/demo/exemplars.json", 2)
    section = Section({"theta": 0.05, "alpha": 0.5, "keep": "first-sentence", "max_retrievals": 2},
                      "methods.scaar", "params.yaml")
    settings = SCAAR.read_settings(section)
    runs = {}
    for name, lm in (("api", api), ("hf", hf)):
        ctx = Context(lm=lm, exemplars=exemplars, prompt_format="chat", max_new_tokens=24,
                      retriever=OverlapRetriever(), answer_fallback_tokens=6)
        runs[name] = SCAAR(settings, ctx).answer_batch(examples)
    decisions = {name: [[(s["phase"], s.get("kept"), s.get("query"), s.get("retrieved"),
                          (s.get("detection") or {}).get("flagged")) for s in a.steps] for a in answers]
                 for name, answers in runs.items()}
    assert decisions["api"] == decisions["hf"]
    assert [a.output for a in runs["api"]] == [a.output for a in runs["hf"]]
    assert [a.counters() for a in runs["api"]] == [a.counters() for a in runs["hf"]]
    assert sum(a.retrievals for a in runs["hf"]) > 0  # the comparison covers retrieval decisions


@pytest.mark.slow  # starts the `serve` process (module fixture `server`)
def test_sugar_on_the_api_backend_routes_every_question_like_the_white_box_run(api, hf):
    """SUGAR needs sampled answers with their log-probabilities and, with the `lm` judge, forced-choice
    scores: through the real `serve` process every question gets the same samples, clusters, semantic
    entropy and branch as in-process, and the same answer and counters. The thresholds are put between
    the in-process entropies so that the comparison covers more than one branch."""
    from conftest import REPO
    from adaptive_rag.settings import Section
    from adaptive_rag.data.datasets import load_dataset
    from adaptive_rag.methods.base import Context
    from adaptive_rag.methods.sugar.sugar import Sugar
    from adaptive_rag.prompts.fewshot import load_exemplars

    examples = load_dataset("hotpotqa", REPO / "data/demo/hotpot_demo.json")[:6]
    exemplars = load_exemplars(REPO / "data/demo/exemplars.json", 2)

    def run(lm, thresholds):
        section = Section({"samples": 4, "max_sample_tokens": 1, "temperature": 0.02, "judge": "lm",
                           "thresholds": thresholds,
                           "multi": {"max_steps": 2}}, "methods.sugar", "params.yaml")
        ctx = Context(lm=lm, exemplars=exemplars, prompt_format="raw", max_new_tokens=12,
                      retriever=OverlapRetriever(), answer_fallback_tokens=6)
        return Sugar(Sugar.read_settings(section), ctx).answer_batch(examples)

    # near-greedy one-token samples: a random tiny model then agrees with itself on some questions only
    entropies = sorted(a.steps[0]["se"] for a in run(hf, [100.0, 100.0]))
    assert entropies[-1] - entropies[0] > 1e-3, "the tiny model's entropies do not spread: no branch to compare"
    # midway between neighbouring values, so no entropy sits on a threshold (ties would hang on float noise)
    cuts = sorted({(a + b) / 2 for a, b in zip(entropies, entropies[1:]) if b - a > 1e-3})
    thresholds = [cuts[0], cuts[-1]] if len(cuts) > 1 else [cuts[0], 100.0]
    runs = {name: run(lm, thresholds) for name, lm in (("api", api), ("hf", hf))}
    keys = ("samples", "clusters", "branch", "judge_calls")
    routes = {name: [({k: a.steps[0][k] for k in keys}, a.steps[0]["se"]) for a in answers]
              for name, answers in runs.items()}
    for (api_route, api_se), (hf_route, hf_se) in zip(routes["api"], routes["hf"]):
        assert api_route == hf_route
        assert api_se == pytest.approx(hf_se, abs=1e-4)
    assert [a.output for a in runs["api"]] == [a.output for a in runs["hf"]]
    assert [a.counters() for a in runs["api"]] == [a.counters() for a in runs["hf"]]
    assert len({route["branch"] for route, _ in routes["hf"]}) >= 2  # more than one branch compared


def test_identity_from_a_server_that_only_lists_its_models():
    """vLLM serves `GET /v1/models` but answers `GET /v1/models/<name>` with a 404, and its cards carry a
    permission entry with a fresh id and time on every request: the identity comes from the list, without
    that entry (else no two jobs' call-cache keys would match), and a model it does not serve is named."""
    from adaptive_rag.lm.api import APIModel

    requests = []

    class ListsOnly(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            requests.append(self.path)
            if self.path == "/v1/models":
                status, body = 200, {"object": "list", "data": [{
                    "id": "llama", "object": "model", "created": int(time.time()), "owned_by": "vllm", "root": "/m/llama",
                    "parent": None, "max_model_len": 4096,
                    "permission": [{"id": f"modelperm-{len(requests)}", "created": int(time.time())}]}]}
            else:
                status, body = 404, {"error": {"message": "Not Found", "type": "NotFoundError", "code": 404}}
            reply_json(self, status, json.dumps(body).encode())

    server, base = start_stub(ListsOnly)
    try:
        identities = []
        for _ in range(2):  # two jobs
            with APIModel(base, "llama", max_retries=0) as model:
                identities.append(model.identity())
        assert identities[0] == identities[1] == {"backend": "api", "base_url": base, "model": "llama",
                                                  "root": "/m/llama", "parent": None, "max_model_len": 4096}
        assert requests[:2] == ["/v1/models/llama", "/v1/models"]
        with APIModel(base, "mistral", max_retries=0) as model:
            with pytest.raises(ConfigError, match=r"model.api.model: .* does not serve 'mistral' \(it serves: 'llama'\)"):
                model.identity()
    finally:
        server.shutdown()
        server.server_close()
