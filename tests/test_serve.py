"""`serve` against hostile-but-fair requests, through the real process: every request beyond a limit is a
400 naming the limit, before the model runs; a client that goes away stops its generation; a failure
inside the model is a 500 and the next request is served; slow clients and crowds of connections are cut
off; a start-up mistake is one `error:` line.

The served model is the tiny Llama with its context cut to CONTEXT tokens in its config (RoPE positions
do not depend on it, so its outputs are unchanged) and one token added to its tokenizer that its
embedding lacks: a tokenizer/model mismatch on purpose, the one way a request here fails inside the model.
"""

from __future__ import annotations

import http.client
import json
import platform
import re
import select
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import REPO, build_wide_llama

NAME = "tiny-limits"
CONTEXT = 2048  # the served model's context length (its config's max_position_embeddings)
CAP = 1500  # the server's --max-tokens
READ_TIMEOUT = 2  # the server's --read-timeout, in seconds
RECEIVE_TIMEOUT = 3  # the server's --receive-timeout, in seconds
CONNECTIONS = 4  # the server's --max-connections
CACHE = 1024 * 1024  # the server's --max-cache-memory ("1MiB"): 4096 positions of the tiny model
BOOM = "<|boom|>"  # in the tokenizer, not in the embedding: a forward pass over it fails
# Greedy continuations of the tiny model (seed 0): THAMES ends at end of sequence after 81 tokens, HAMLET
# runs on to any max_tokens (which takes seconds at CAP).
THAMES = "The river Thames flows through"
HAMLET = "Question: Who wrote Hamlet?\nAnswer:"
PASSAGES = (REPO / "data" / "demo" / "psgs_demo.tsv").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def limited_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    from tokenizers import Tokenizer

    dest = tmp_path_factory.mktemp("limited") / "tiny"
    shutil.copytree(tiny_model_dir, dest)
    config = json.loads((dest / "config.json").read_text())
    config["max_position_embeddings"] = CONTEXT
    (dest / "config.json").write_text(json.dumps(config))
    tokenizer = Tokenizer.from_file(str(dest / "tokenizer.json"))
    assert tokenizer.add_special_tokens([BOOM]) == 1 and tokenizer.token_to_id(BOOM) >= config["vocab_size"]
    tokenizer.save(str(dest / "tokenizer.json"))
    return dest


class Served:
    """The running `serve` process: its URL, its pid, and its log (stdout and stderr) as it comes."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.lines, self.changed = proc, [], threading.Condition()
        self.host, self.port = "", 0

    def read(self, stream) -> None:
        for line in stream:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.lines.append(None)
            self.changed.notify_all()

    def mark(self) -> int:
        with self.changed:
            return len(self.lines)

    def wait_for(self, pattern: str, since: int = 0, timeout: float = 60) -> re.Match:
        """The first log line from `since` on matching `pattern`; fails after `timeout` s or at exit."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for line in self.lines[since:]:
                    if line is None:
                        pytest.fail(f"serve exited while waiting for {pattern!r}:\n{self.log()}")
                    found = re.search(pattern, line)
                    if found:
                        return found
                since = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"no log line matching {pattern!r} within {timeout} s:\n{self.log()}")
                self.changed.wait(left)

    def log(self) -> str:
        return "".join(line for line in self.lines if line is not None)

    def peak_rss_mb(self) -> float | None:
        """The process's peak resident memory so far (Linux's VmHWM), in MB."""
        status = Path(f"/proc/{self.proc.pid}/status")
        if not status.is_file():
            return None
        kb = re.search(r"VmHWM:\s+(\d+) kB", status.read_text())
        return int(kb.group(1)) / 1024 if kb else None

    def post(self, path: str, body, timeout: float = 30, headers: dict | None = None):
        """(status, headers, JSON reply) of POST /v1<path>; a dict body is written by `json.dumps`, which
        writes NaN and Infinity as the JSON extensions `json.loads` reads back."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("POST", f"/v1{path}", data, {"Content-Type": "application/json", **(headers or {})})
            reply = conn.getresponse()
            return reply.status, {k.lower(): v for k, v in reply.getheaders()}, json.loads(reply.read())
        finally:
            conn.close()

    def complete(self, timeout: float = 30, **fields):
        return self.post("/completions", {"model": NAME, "temperature": 0, **fields}, timeout)

    def chat(self, messages, timeout: float = 30, **fields):
        return self.post("/chat/completions", {"model": NAME, "temperature": 0, "messages": messages, **fields},
                         timeout)


@contextmanager
def serving(model_dir: Path, *options: str, launcher: str | None = None):
    """The `serve` process on a free port, stopped with SIGTERM (which must end it cleanly) afterwards;
    `launcher`: Python code run instead of `-m adaptive_rag.lm.serve`, with the same arguments."""
    start = ["-c", launcher] if launcher else ["-m", "adaptive_rag.lm.serve"]
    proc = subprocess.Popen(
        [sys.executable, *start, "--model-dir", str(model_dir), "--port", "0", "--served-name", NAME, *options],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    server = Served(proc)
    threading.Thread(target=server.read, args=(proc.stdout,), daemon=True).start()
    try:
        ready = server.wait_for(r"^serving (\S+) on http://([\d.]+):(\d+)/v1$", timeout=180)  # 2 busy cores
        assert ready.group(1) == NAME
        server.host, server.port = ready.group(2), int(ready.group(3))
        yield server
    finally:
        proc.terminate()
        try:
            code = proc.wait(timeout=90)  # 1-2 s idle; more on a busy 2-core machine
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0, "serve did not stop cleanly on SIGTERM:\n" + server.log()


@pytest.fixture(scope="module")
def served(limited_model_dir):
    with serving(limited_model_dir, "--max-tokens", str(CAP), "--log-requests", "--read-timeout", str(READ_TIMEOUT),
                 "--receive-timeout", str(RECEIVE_TIMEOUT), "--max-connections", str(CONNECTIONS),
                 "--max-cache-memory", "1MiB") as server:
        yield server
    # The only traceback is the deliberate failure's (test_an_internal_error_...), on the server's stderr.
    assert server.log().count("Traceback") <= 1, server.log()


def assert_400(reply, param: str, *words: str) -> str:
    status, _, body = reply
    assert status == 400, (status, body)
    error = body["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    for word in words:
        assert word in error["message"], (word, error["message"])
    return error["message"]


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
def test_max_tokens_above_the_cap_is_a_400_naming_the_limit(served):
    for fields in ({"max_tokens": CAP + 1}, {"max_tokens": 1_000_000_000}):
        message = assert_400(served.complete(prompt=THAMES, **fields), "max_tokens", str(CAP), "--max-tokens")
        assert str(fields["max_tokens"]) in message
    user = [{"role": "user", "content": THAMES}]
    assert_400(served.chat(user, max_tokens=1_000_000_000), "max_tokens", str(CAP))
    assert_400(served.chat(user, max_completion_tokens=CAP + 1), "max_completion_tokens", str(CAP))
    status, _, body = served.complete(prompt=THAMES, max_tokens=CAP)  # the cap itself is allowed
    assert status == 200 and body["choices"][0]["finish_reason"] == "stop", body
    assert body["usage"]["completion_tokens"] < CAP  # (ends at end of sequence: see THAMES)


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
def test_prompt_plus_max_tokens_beyond_the_context_is_a_400_naming_both(served):
    prompt = PASSAGES[:3900]
    message = assert_400(served.complete(prompt=prompt, max_tokens=CAP), "prompt", f"context length of {CONTEXT}")
    found = re.search(rf"(\d+) prompt tokens \+ {CAP} max_tokens = (\d+),", message)
    assert found, message
    n = int(found.group(1))
    assert CONTEXT - CAP < n < CONTEXT and int(found.group(2)) == n + CAP
    # Exactly the context is allowed; one token more is not.
    status, _, body = served.complete(prompt=prompt, max_tokens=CONTEXT - n)
    assert status == 200 and body["usage"]["prompt_tokens"] == n, body
    assert body["usage"]["completion_tokens"] <= CONTEXT - n
    assert_400(served.complete(prompt=prompt, max_tokens=CONTEXT - n + 1), "prompt",
               f"{n} prompt tokens + {CONTEXT - n + 1} max_tokens = {CONTEXT + 1}", str(CONTEXT))
    chat = [{"role": "user", "content": prompt}]
    assert_400(served.chat(chat, max_tokens=CAP), "messages", "prompt tokens", f"context length of {CONTEXT}")


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
@pytest.mark.parametrize("chars", [20_000, 50_000])  # tokenised and counted; refused on its length alone
def test_a_prompt_far_beyond_the_context_is_refused_before_the_model_runs(served, chars):
    """The issue's 50,000-character prompt grew the process by gigabytes (attention over 20,000 tokens)
    and got no answer in 400 s; now it is a 400 in well under a second, without growing the process."""
    prompt = (PASSAGES * 2)[:chars]
    before = served.peak_rss_mb()
    start = time.monotonic()
    message = assert_400(served.complete(prompt=prompt, max_tokens=16, timeout=60), "prompt",
                         "too long", f"context length of {CONTEXT} tokens")
    assert re.search(r"\d+ prompt tokens|\d+ characters", message), message
    assert_400(served.chat([{"role": "user", "content": prompt}], timeout=60), "messages", "too long")
    assert time.monotonic() - start < 10
    if before is not None:
        assert served.peak_rss_mb() - before < 200, "the server's peak memory grew"


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
def test_a_disconnected_client_stops_its_generation(served):
    """The server reports when a generation starts (--log-requests), after every check that could drop the
    request earlier; the client hangs up then, in mid-generation of CAP tokens (seconds of work), and the
    server says it stopped short of them."""
    since = served.mark()
    body = json.dumps({"model": NAME, "prompt": HAMLET, "max_tokens": CAP, "temperature": 0}).encode()
    client = socket.create_connection((served.host, served.port), timeout=30)
    client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    served.wait_for(rf"^generating: 1 prompt\(s\), n=1, max_tokens={CAP}$", since)
    client.close()
    stopped = served.wait_for(rf"client disconnected; generation stopped after (\d+) tokens \(of at most {CAP}\)",
                              since)
    assert int(stopped.group(1)) < CAP
    status, _, reply = served.complete(prompt=THAMES, max_tokens=4, timeout=30)  # the lock is free again
    assert status == 200 and reply["usage"]["completion_tokens"] == 4, reply


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
def test_empty_prompts_are_400s(served):
    for prompt in ("", [""], [THAMES, ""]):
        assert_400(served.complete(prompt=prompt, max_tokens=4), "prompt", "must not be empty")
    assert_400(served.complete(prompt=[], max_tokens=4), "prompt", "non-empty list")
    assert_400(served.complete(prompt="", max_tokens=0, echo=True, logprobs=0), "prompt", "must not be empty")
    assert_400(served.chat([], max_tokens=4), "messages", "non-empty list")
    # An empty message is still a prompt: the chat template gives it role markers to continue from.
    status, _, body = served.chat([{"role": "user", "content": ""}], max_tokens=4)
    assert status == 200 and body["usage"]["prompt_tokens"] > 0, body


BAD_NUMBERS = [
    ("temperature", float("nan")), ("temperature", float("inf")), ("temperature", float("-inf")),
    ("temperature", -0.5), ("temperature", 2.5), ("temperature", "0.7"), ("temperature", True),
    ("top_p", float("nan")), ("top_p", 1.5), ("top_p", -0.1), ("top_p", False),
    ("max_tokens", float("nan")), ("max_tokens", float("inf")), ("max_tokens", -1), ("max_tokens", 1.5),
    ("max_tokens", True), ("max_tokens", "16"),
    ("logprobs", float("nan")), ("logprobs", -1), ("logprobs", 21), ("logprobs", True),
    ("n", 0), ("n", float("nan")), ("n", 10**9),
    ("seed", float("nan")), ("seed", 2**64), ("seed", -(2**64)), ("seed", 1.5),
    ("top_k", float("nan")), ("top_k", -2), ("top_k", 2.5),
]


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
@pytest.mark.parametrize("field,value", BAD_NUMBERS, ids=[f"{f}={v!r}" for f, v in BAD_NUMBERS])
def test_bad_numbers_are_400s_naming_the_field(served, field, value):
    # Sampling fields with temperature 1, so each is really used; max_tokens 4 keeps a wrong 200 short.
    fields = {"max_tokens": 4, "temperature": 1.0, "seed": 1, field: value}
    assert_400(served.complete(prompt=THAMES, **fields), field, f"'{field}'")
    if field != "logprobs":  # (chat's logprobs is a flag)
        assert_400(served.chat([{"role": "user", "content": THAMES}], **fields), field, f"'{field}'")


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
@pytest.mark.parametrize("role", ["tool", "developer", "System", ""])
def test_an_unknown_chat_role_is_a_400_naming_it(served, role):
    messages = [{"role": "user", "content": "Hi"}, {"role": role, "content": "Who wrote Hamlet?"}]
    assert_400(served.chat(messages, max_tokens=4), "messages", f"messages[1].role {role!r}",
               "system, user, assistant")


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
def test_an_internal_error_is_a_500_and_the_server_keeps_serving(served):
    since = served.mark()
    status, headers, body = served.complete(prompt=f"{THAMES} {BOOM}", max_tokens=4)
    assert status == 500 and headers.get("x-should-retry") == "false", (status, body)
    assert body["error"]["type"] == "server_error" and "IndexError" in body["error"]["message"]
    assert "Traceback" not in json.dumps(body)
    served.wait_for(r"^IndexError", since)  # the traceback went to the server's stderr
    status, _, body = served.complete(prompt=THAMES, max_tokens=4)
    assert status == 200 and body["usage"]["completion_tokens"] == 4, body


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
def test_the_work_of_one_request_is_bounded(served):
    """Beyond max_tokens and the context: the body's size, the prompts, stop strings and messages one
    request may carry, each a 4xx naming its limit before any work that grows with it."""
    conn = http.client.HTTPConnection(served.host, served.port, timeout=30)
    conn.putrequest("POST", "/v1/completions")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(10**9))  # and no body: refused on the header alone
    conn.endheaders()
    reply = conn.getresponse()
    body = json.loads(reply.read())
    conn.close()
    assert reply.status == 413 and "1000000000 bytes" in body["error"]["message"], body
    status, _, body = served.post("/completions", b"[" * 100_000)
    assert status == 400 and "nested too deeply" in body["error"]["message"], body
    assert_400(served.complete(prompt=[THAMES] * 129, max_tokens=1), "prompt", "129 prompts", "at most 128")
    assert_400(served.complete(prompt=THAMES, max_tokens=1, stop=["@"] * 17), "stop", "17 strings", "at most 16")
    many = [{"role": "user", "content": ""}] * (CONTEXT + 1)
    assert_400(served.chat(many, max_tokens=1), "messages", f"{CONTEXT + 1} messages", f"at most {CONTEXT}")


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
def test_a_client_that_never_finishes_its_request_is_disconnected(served):
    """A stalled client (headers promise a body that never comes) holds its thread only until the read
    timeout, and the server goes on answering others meanwhile."""
    import socket

    stalled = socket.create_connection((served.host, served.port))
    try:
        stalled.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 100\r\n\r\n{\"prompt\": ")
        status, _, _ = served.complete(prompt=THAMES, max_tokens=2)
        assert status == 200
        stalled.settimeout(READ_TIMEOUT * 10)
        assert stalled.recv(1024) == b""  # closed by the server, well before our own timeout
        served.wait_for(r"client sent no complete body \(100 bytes promised\) within the read timeout of 2 s")
    finally:
        stalled.close()


# ---- memory: the KV cache one request may hold ---------------------------------------------------


def position_bytes(model_dir: Path) -> int:
    """What one cached position of one row costs in float32: keys and values of every layer."""
    config = json.loads((model_dir / "config.json").read_text())
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * 4


def generations(served: Served, since: int, n: int, max_tokens: int) -> int:
    """How many generations of n continuations of max_tokens the server has started since log line `since`
    (--log-requests)."""
    line = f"generating: 1 prompt(s), n={n}, max_tokens={max_tokens}\n"
    return served.lines[since:].count(line)


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
def test_a_request_whose_kv_cache_exceeds_max_cache_memory_is_refused_before_the_model_runs(served,
                                                                                          limited_model_dir):
    """--max-cache-memory 1MiB. Sampling holds the prompt once and n rows of max_tokens + 1 positions; greedy
    decoding min(prompts, --batch-size 8) slots of prompt + max_tokens + 1. The largest max_tokens that fits
    is served, one more is a 400 with the request's numbers and the limit, and nothing is generated for it."""
    size = position_bytes(limited_model_dir)
    fits = CACHE // size
    status, _, body = served.complete(prompt=THAMES, max_tokens=0)
    assert status == 200, body
    p = body["usage"]["prompt_tokens"]
    n = 128
    m = (fits - p) // n - 1  # p + n x (m + 1) <= fits < p + n x (m + 2)
    since = served.mark()
    refused = assert_400(served.complete(prompt=THAMES, max_tokens=m + 1, temperature=1, n=n, seed=1), None,
                         f"{p} prompt tokens + n={n} x (max_tokens={m + 1} + 1) = {p + n * (m + 2)} positions x "
                         f"{size} bytes = {(p + n * (m + 2)) * size} bytes",
                         f"more than this server's --max-cache-memory of {CACHE} bytes (1.0 MiB)")
    status, _, body = served.complete(prompt=THAMES, max_tokens=m, temperature=1, n=n, seed=1)
    assert status == 200 and len(body["choices"]) == n, body
    served.wait_for(rf"^generating: 1 prompt\(s\), n={n}, max_tokens={m}$", since)  # logged in request order
    assert generations(served, since, n, m + 1) == 0, f"the refused request was generated: {refused}"

    prompts = [THAMES] * 8
    m = fits // 8 - p - 1  # 8 x (p + m + 1) <= fits
    assert_400(served.complete(prompt=prompts, max_tokens=m + 1), None,
               f"8 slots (of 8 prompt(s), --batch-size 8) x ({p} tokens of the longest prompt + max_tokens={m + 1} "
               f"+ 1) = {8 * (p + m + 2)} positions")
    status, _, body = served.complete(prompt=prompts, max_tokens=m)
    assert status == 200 and len(body["choices"]) == 8, body
    status, _, body = served.chat([{"role": "user", "content": THAMES}], max_tokens=CAP, temperature=1, n=n)
    assert status == 400 and body["error"]["code"] == "cache_memory_exceeded", body


HEADROOM = 2**30  # the address space the launcher leaves the server beyond what torch and transformers take
LAUNCHER = f"""
import re, resource, sys
import torch, transformers  # their address space first: the limit leaves the server a fixed room beyond it
size = int(re.search(r"VmSize:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + {HEADROOM}, resource.getrlimit(resource.RLIMIT_AS)[1]))
from adaptive_rag.lm.serve import main
sys.exit(main(sys.argv[1:]))
"""
HELLO = {"model": NAME, "n": 128, "temperature": 1, "prompt": " hello" * 1500, "max_tokens": 1}  # 4500 tokens here


def require_address_space_limit() -> None:
    """Skip where RLIMIT_AS cannot be set for the server (not Linux, or a hard limit too low to leave room)."""
    try:
        import resource
    except ImportError:
        pytest.skip("RLIMIT_AS needs the resource module (POSIX)")
    if not Path("/proc/self/status").is_file():
        pytest.skip("the launcher reads the address space from /proc/self/status (Linux)")
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard != resource.RLIM_INFINITY and hard < 64 * 2**30:
        pytest.skip(f"the hard RLIMIT_AS of this process ({hard} bytes) may not leave the server {HEADROOM} bytes")


@pytest.fixture(scope="module")
def wide_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model's tokenizer on a model with wide cached positions and small weights (`build_wide_llama`)."""
    return build_wide_llama(tiny_model_dir, tmp_path_factory.mktemp("wide") / "wide")


def cache_limit(server: Served) -> int:
    """The server's KV-cache limit per request, from its start-up line; auto under RLIMIT_AS here."""
    return int(server.wait_for(r"KV cache per request: at most (\d+) bytes .*RLIMIT_AS").group(1))


@pytest.mark.slow  # starts the `serve` process
def test_128_samples_of_a_long_prompt_fit_an_address_space_limit_on_the_fast_path(wide_model_dir):
    """The fast path holds the prompt's 4500 positions once and each of 128 rows two more: 74 MiB here. Every row
    holding its own copy of the prompt (the eager path, next test) would take 8.8 GiB: no 1 GiB limit fits it."""
    require_address_space_limit()
    with serving(wide_model_dir, launcher=LAUNCHER) as server:
        assert cache_limit(server) < HEADROOM
        if platform.libc_ver()[0] == "glibc":  # the estimates' premise: freed tensors go back (memory.py)
            server.wait_for(r"^memory: freed tensors of 4\.0 MiB or more go back to the system \(glibc ")
        status, _, body = server.post("/completions", HELLO, timeout=120)
        assert status == 200 and len(body["choices"]) == 128, body
        assert body["usage"]["prompt_tokens"] == 4500, body["usage"]  # (a row that draws EOS first has no token)
    assert "Traceback" not in server.log(), server.log()


@pytest.mark.slow  # starts the `serve` process
def test_under_the_same_limit_the_eager_path_refuses_it_with_its_numbers(wide_model_dir):
    """Admission control where the design cannot share the prompt: the 8.8 GiB the eager path would need is
    refused with a 400 before any model work, and a request that fits is served."""
    require_address_space_limit()
    size = position_bytes(wide_model_dir)
    with serving(wide_model_dir, "--attention", "eager", "--log-requests", launcher=LAUNCHER) as server:
        limit = cache_limit(server)
        since = server.mark()
        need = 128 * 4501 * size
        assert_400(server.post("/completions", HELLO, timeout=120), None,
                   f"n=128 x (4500 prompt tokens + max_tokens=1) = {128 * 4501} positions x {size} bytes = {need} "
                   f"bytes (8.8 GiB), more than this server's --max-cache-memory of {limit} bytes")
        status, _, body = server.post("/completions", {**HELLO, "prompt": " hello" * 100, "n": 8}, timeout=120)
        assert status == 200 and len(body["choices"]) == 8, body
        server.wait_for(r"^generating: 1 prompt\(s\), n=8, max_tokens=1$", since)  # logged in request order
        assert generations(server, since, 128, 1) == 0, server.log()
    assert "Traceback" not in server.log(), server.log()


LONG = " hello" * 2666  # 7998 tokens here: with max_tokens 1, within the wide model's context of 8192
LONG_REQUESTS = [  # (what, fields): an 8,000-token prompt, alone, 128 times sampled, and echoed (scored)
    ("n=1", {"n": 1}), ("n=128", {"n": 128}), ("echo", {"n": 1, "max_tokens": 0, "echo": True, "logprobs": 0}),
]


def assert_answered_or_refused(server: Served, path: str, body: dict) -> int:
    """The request's status, which must be 200 or a 400 naming the memory it would need; never a 500 (a prefill
    that ran out of memory), and the server answers a small request next."""
    status, _, reply = server.post(path, body, timeout=300)
    assert status in (200, 400), (status, reply)
    if status == 400:
        error = reply["error"]
        assert error["code"] in ("request_memory_exceeded", "cache_memory_exceeded"), error
        assert re.search(r"\d{4} prompt tokens", error["message"]) and " bytes" in error["message"], error
    after, _, small = server.post("/completions", {**HELLO, "prompt": THAMES, "n": 2}, timeout=60)
    assert after == 200 and len(small["choices"]) == 2, small
    return status


@pytest.mark.slow  # starts the `serve` process
@pytest.mark.parametrize("attention", ["fast", "eager"])
def test_an_8000_token_prompt_is_answered_or_refused_under_an_address_space_limit(wide_model_dir, attention):
    """A hostile case: 8,000 prompt tokens passed the KV-cache check and ran out of memory in prefill
    (a 500 after a minute). Counted whole - the eager path's attention scores (16 heads x 7998^2 floats a layer,
    12 GiB) and echo's pass - each is a 400 before any model work, or served; never a 500."""
    require_address_space_limit()
    with serving(wide_model_dir, "--attention", attention, launcher=LAUNCHER) as server:
        statuses = {what: assert_answered_or_refused(server, "/completions", {**HELLO, "prompt": LONG, **fields})
                    for what, fields in LONG_REQUESTS}
        chat = {"model": NAME, "messages": [{"role": "user", "content": LONG[:-60]}], "max_tokens": 1}
        statuses["chat"] = assert_answered_or_refused(server, "/chat/completions", chat)
    assert "Traceback" not in server.log(), server.log()
    assert statuses["echo"] == 400, statuses  # its eager pass alone needs gigabytes
    if attention == "eager":
        assert statuses["n=1"] == statuses["n=128"] == 400, statuses


def cgroup_for_the_server() -> Path:
    """A fresh child of this process's cgroup (v2) that can hold a memory limit, or skip saying why not."""
    root = Path("/sys/fs/cgroup")
    if not (root / "cgroup.controllers").is_file():
        pytest.skip("no cgroup v2 hierarchy at /sys/fs/cgroup here (a v1 or hybrid layout): no memory limit can be "
                    "given to the server's process alone")
    own = next((line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::")),
               None)
    parent = root / (own or "/").lstrip("/")
    try:
        delegated = "memory" in (parent / "cgroup.subtree_control").read_text().split()
        child = parent / f"adaptive-rag-serve-{time.monotonic_ns()}"
        child.mkdir() if delegated else None
    except OSError as e:
        pytest.skip(f"cannot create a cgroup under {parent}: {e}")
    if not delegated:
        pytest.skip(f"the memory controller is not enabled for the children of {parent} (cgroup.subtree_control)")
    return child


@pytest.mark.slow  # starts the `serve` process
def test_an_8000_token_prompt_is_answered_or_refused_under_a_cgroup_memory_limit(wide_model_dir):
    """As above under a cgroup memory limit, where running out of memory is the kernel killing the server: it must
    live through every request (no OOM kill counted in memory.events)."""
    child = cgroup_for_the_server()
    launcher = f"""
import os, sys
from pathlib import Path
group = Path({str(child)!r})
(group / "cgroup.procs").write_text(str(os.getpid()))
import torch, transformers
(group / "memory.max").write_text(str(int((group / "memory.current").read_text()) + {HEADROOM}))
from adaptive_rag.lm.serve import main
sys.exit(main(sys.argv[1:]))
"""
    try:
        with serving(wide_model_dir, launcher=launcher) as server:
            server.wait_for(r"memory per request: at most \d+ bytes .*cgroup")
            for what, fields in LONG_REQUESTS:
                assert_answered_or_refused(server, "/completions", {**HELLO, "prompt": LONG, **fields})
        events = dict(line.split() for line in (child / "memory.events").read_text().splitlines())
        assert events.get("oom_kill") == "0", events
    finally:
        child.rmdir()


# ---- slow clients, crowds, framing ---------------------------------------------------------------


def seconds_until_closed(served: Served, chunks: list[bytes], interval: float = 0.5) -> float | None:
    """Send `chunks` one every `interval` s (shorter than the read timeout, so each read succeeds); the seconds
    from the first until the server closed the connection, or None if it was still open after them or after
    RECEIVE_TIMEOUT + 5 s."""
    sock = socket.create_connection((served.host, served.port), timeout=10)
    try:
        start = time.monotonic()
        for chunk in chunks:
            try:
                sock.sendall(chunk)
            except OSError:
                return time.monotonic() - start
            if select.select([sock], [], [], interval)[0]:
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                assert data == b"", f"the server answered a request it has not received whole: {data!r}"
                return time.monotonic() - start
            if time.monotonic() - start > RECEIVE_TIMEOUT + 5:
                return None
        return None
    finally:
        sock.close()


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
@pytest.mark.parametrize("part", ["headers", "body"])
def test_a_client_that_drips_its_request_is_cut_off_at_the_receive_timeout(served, part):
    """A byte every half second never lets the read timeout (2 s) fire; the whole request must still arrive
    within the receive timeout (3 s) of its first byte."""
    body = json.dumps({"model": NAME, "prompt": THAMES, "max_tokens": 2, "temperature": 0}).encode()
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    chunks = [head, *(bytes([b]) for b in body)] if part == "body" else [bytes([b]) for b in head + body]
    since = served.mark()
    closed = seconds_until_closed(served, chunks)
    assert closed is not None and RECEIVE_TIMEOUT - 0.5 < closed < RECEIVE_TIMEOUT + 2.5, closed
    served.wait_for(rf"client sent no complete request within the receive timeout of {RECEIVE_TIMEOUT} s "
                    r"\(--receive-timeout\); connection closed", since)
    status, _, _ = served.complete(prompt=THAMES, max_tokens=2)
    assert status == 200


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
def test_a_request_beyond_max_connections_gets_a_503_at_once(served):
    """Clients that connect and send nothing hold a connection each (until the read timeout); beyond
    --max-connections a request is answered 503 at once (uvicorn's limit_concurrency) and its connection
    closed, while the connections within the limit stay open; once they leave, requests are served again."""
    assert served.complete(prompt=THAMES, max_tokens=1)[0] == 200
    time.sleep(0.5)  # that connection has closed: every slot is free
    idle = [socket.create_connection((served.host, served.port)) for _ in range(CONNECTIONS)]
    try:
        extra = socket.create_connection((served.host, served.port), timeout=10)
        with extra:
            body = json.dumps({"model": NAME, "prompt": THAMES, "max_tokens": 1, "temperature": 0}).encode()
            extra.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            reply = b""
            while chunk := extra.recv(4096):  # until the server closes it
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 503 ") and b"connection: close" in reply.lower(), reply
        assert not select.select(idle, [], [], 0)[0], "an idle connection within the limit was answered or closed"
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 5
    while True:  # the idle connections close as the server sees end-of-file
        try:
            status = served.complete(prompt=THAMES, max_tokens=1)[0]
        except (OSError, http.client.HTTPException):
            status = None
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert status == 200


def burst(server: Served, sockets: int = 100) -> None:
    """Open `sockets` connections at once, then on each: a whole request (some of them sampled at length, so the
    client hangs up in mid-generation), half a request head, a head promising a body that stops short, bytes that
    are not HTTP, or nothing; then close them all."""
    body = json.dumps({"model": NAME, "prompt": HAMLET, "max_tokens": 64, "temperature": 1, "n": 4}).encode()
    whole = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d"
             b"\r\n\r\n%s" % (len(body), body))
    sends = [whole, whole[:30], whole[:len(whole) - len(body) + 10], b"\x16\x03\x01 not http\r\n\r\n", b""]
    opened = []
    try:
        for _ in range(sockets):
            try:
                opened.append(socket.create_connection((server.host, server.port), timeout=5))
            except OSError:  # the listen backlog is full: a refusal is an answer too
                pass
        for i, sock in enumerate(opened):
            try:
                sock.sendall(sends[i % len(sends)])
            except OSError:  # closed by the server already (a 503 for the connections beyond the limit)
                pass
        time.sleep(0.5)
    finally:
        for sock in opened:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, for some
            sock.close()


@pytest.mark.slow  # starts the `serve` process
def test_a_burst_of_100_connections_under_an_address_space_limit_raises_nothing(limited_model_dir):
    """A hostile re-test: 100 connections at once under a memory limit gave `OSError: [Errno 9] Bad
    file descriptor` and `ValueError: Semaphore released too many times` on the server's stderr. Five bursts
    (more connections than --max-connections, half-sent requests, resets, clients gone mid-generation) leave no
    exception, traceback or error line, and the server answers next."""
    require_address_space_limit()
    with serving(limited_model_dir, "--read-timeout", str(READ_TIMEOUT), "--receive-timeout",
                 str(RECEIVE_TIMEOUT), launcher=LAUNCHER) as server:
        for _ in range(5):
            burst(server)
        status, _, reply = server.complete(prompt=THAMES, max_tokens=4, timeout=60)
        assert status == 200 and reply["usage"]["completion_tokens"] == 4, reply
    log = server.log()
    assert not re.search(r"Traceback|Exception|Error", log), log


def exchange(served: Served, request: bytes) -> tuple[int, bytes, bool]:
    """Send raw request bytes: the reply's status, its body, and whether the server then closed the connection
    (at once, not after the read timeout)."""
    with socket.create_connection((served.host, served.port), timeout=10) as sock:
        sock.sendall(request)
        reply = b""
        while b"\r\n\r\n" not in reply and (chunk := sock.recv(4096)):
            reply += chunk
        head, _, data = reply.partition(b"\r\n\r\n")
        closed = False
        while select.select([sock], [], [], READ_TIMEOUT / 2)[0]:
            chunk = sock.recv(4096)
            if not chunk:
                closed = True
                break
            data += chunk
    return int(head.split()[1]), data, closed


FRAMING = [  # headers of a request whose body is BODY ({n} is its length), and what the 400 says
    ("chunked and Content-Length", b"Transfer-Encoding: chunked\r\nContent-Length: {n}\r\n",
     b"both Transfer-Encoding and Content-Length"),  # the service's own refusal: h11 would read it as chunked
    ("two Content-Lengths", b"Content-Length: {n}\r\nContent-Length: 2\r\n", b"Invalid HTTP request"),  # h11's
    ("superscript two", b"Content-Length: \xb2\r\n", b"Invalid HTTP request"),
]


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
@pytest.mark.parametrize("headers,words", [f[1:] for f in FRAMING], ids=[f[0] for f in FRAMING])
def test_a_request_of_ambiguous_length_is_a_400_and_closes_the_connection(served, headers, words):
    """Where the body ends must be certain (a proxy in front may read it otherwise: request smuggling): the
    request is refused before it reaches the model, and its connection closed."""
    body = json.dumps({"model": NAME, "prompt": THAMES, "max_tokens": 1, "temperature": 0}).encode()
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               + headers.replace(b"{n}", str(len(body)).encode()) + b"\r\n" + body)
    since = served.mark()
    status, reply, closed = exchange(served, request)
    assert status == 400 and words in reply, reply
    assert closed, "the connection stayed open after a request whose end is unknown"
    assert generations(served, since, 1, 1) == 0, "the request reached the model"


LONE_SURROGATES = [  # (path, body, words the message must hold, param)
    ("/completions", {"model": NAME, "prompt": "Thames \ud800", "max_tokens": 2},
     "'prompt' is not valid Unicode: a lone surrogate ('\\ud800') at character 7", "prompt"),
    ("/completions", {"model": "tiny\udfff", "prompt": THAMES, "max_tokens": 2}, "'model' is not valid Unicode",
     "model"),
    ("/completions", {"model": NAME, "prompt": THAMES, "\ud800": 1}, "a field name is not valid Unicode", None),
    ("/chat/completions", {"model": NAME, "messages": [{"role": "user", "content": "\ud83d!"}]},
     "'messages[0].content' is not valid Unicode", "messages"),
]


@pytest.mark.slow  # starts the `serve` process (module fixture `served`)
@pytest.mark.parametrize("path,body,words,param", LONE_SURROGATES, ids=["prompt", "model", "field name", "chat"])
def test_a_lone_surrogate_anywhere_in_the_body_is_a_400_naming_where(served, path, body, words, param):
    """A JSON escape can write half of a surrogate pair; no tokenizer or UTF-8 reply can carry it."""
    assert_400(served.post(path, body), param, words)  # json.dumps writes the escape, e.g. \ud800
    status, _, _ = served.complete(prompt=THAMES, max_tokens=1)
    assert status == 200


# ---- start-up ------------------------------------------------------------------------------------


def start_up_error(model_dir: Path, *options: str) -> str:
    """The one line `serve` prints for a start-up mistake (exit status 2, nothing on stdout)."""
    result = subprocess.run([sys.executable, "-m", "adaptive_rag.lm.serve", "--model-dir", str(model_dir),
                             "--port", "0", *options], capture_output=True, text=True, timeout=120)
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and not result.stdout and len(lines) == 1, result
    assert lines[0].startswith("error: "), lines
    return lines[0]


START_UP_MISTAKES = [
    ("--port", "99999"), ("--threads", "0"), ("--threads", "-3"), ("--batch-size", "0"), ("--host", "8.8.8.8"),
    ("--device", "cuda"), ("--max-cache-memory", "8 gigs"), ("--max-cache-memory", "0"),
    ("--max-connections", "0"), ("--receive-timeout", "0"), ("--read-timeout", "nan"),
]


@pytest.mark.slow  # starts the `serve` process
@pytest.mark.parametrize("option,value", START_UP_MISTAKES, ids=[" ".join(m) for m in START_UP_MISTAKES])
def test_a_start_up_mistake_is_one_error_line_naming_the_option(tiny_model_dir, option, value):
    if option == "--device":
        import torch

        if torch.cuda.is_available():
            pytest.skip("CUDA is available here, so --device cuda is no mistake")
    line = start_up_error(tiny_model_dir, option, value)
    assert option in line and value in line, line


@pytest.mark.slow  # starts the `serve` process
def test_a_port_in_use_is_one_error_line_naming_it(tiny_model_dir):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = start_up_error(tiny_model_dir, "--port", str(port))
    assert f"--port {port}: 127.0.0.1:{port} is already in use" in line, line
