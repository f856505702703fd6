"""Prompt templates: the default renders exactly what the code rendered before prompts became data,
another implementation's layout is reproduced byte for byte, and a bad template fails naming the
file and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptive_rag.errors import InputError
from adaptive_rag.prompts.fewshot import Exemplar, build_prompt, build_qa_prompt, load_exemplars
from adaptive_rag.prompts.template import load_template
from adaptive_rag.retrieval import Hit

from prompt_grid import cases

FIXTURES = Path(__file__).parent / "fixtures" / "prompts"
REPO = Path(__file__).resolve().parents[1]


def render_with(template, fmt, style, spec, count, question, passages, prefix) -> str:
    exemplars = load_exemplars(spec, count)
    hits = [Hit(i, t, x, 1.0) for i, t, x in passages]
    return template.render(fmt, exemplars, question, hits, style).with_prefix(prefix).key()


def test_the_default_template_renders_every_prompt_the_code_rendered_before():
    """96 prompts (raw and chat; CoT and QA one-shot; 8, 2 and no exemplars; no and three passages,
    with braces, newlines and non-ASCII in titles and text; bare and with an answer prefix), each
    compared as `Prompt.key()`, the exact string the call cache hashes."""
    expected = json.loads((FIXTURES / "default.json").read_text(encoding="utf-8"))
    default = load_template()
    rendered = {name: render_with(default, *rest) for name, *rest in cases()}
    assert rendered.keys() == expected.keys()
    differing = [name for name in expected if rendered[name] != expected[name]]
    assert not differing, f"{len(differing)} prompts differ, first: {differing[0]}"
    # and the entry points every caller uses take the default when given no template
    name, fmt, style, spec, count, question, passages, prefix = next(iter(cases()))
    build = build_qa_prompt if style == "qa-oneshot" else build_prompt
    hits = [Hit(i, t, x, 1.0) for i, t, x in passages]
    assert build(fmt, load_exemplars(spec, count), question, hits).with_prefix(prefix).key() == expected[name]


# ---- another implementation's layout, byte for byte -------------------------------------------------

SHOTS = [Exemplar("Who wrote Hamlet?", "Hamlet was written by Shakespeare.", "Shakespeare"),
         Exemplar("Where was Mozart born?", "Mozart was born in Salzburg.", "Salzburg")]
QUESTION = "Where was the founder of the Hockin Glassworks born?"
HITS = [Hit("296", "Hockin Glassworks", "The Hockin Glassworks was founded by Aldous Hockin.", 7.1),
        Hit("100", "Aldous Hockin", "Aldous Hockin was born in Velmora.", 5.6)]
# The DRAGIN reference code's raw prompt, written out by its rules (not by any template code): each
# exemplar is its demo input template "Question: <q>\nAnswer:", a space, its output template "<cot> So
# the answer is <a>.", and one newline; with passages, "Context:\n", "[i] <passage text>\n" each, and
# "Answer in the same format as before.\n"; then HotpotQA's test input template, the instruction line
# before "Question: <q>\nAnswer:"; the answer so far follows after one space.
REFERENCE_SHOTS = ("Question: Who wrote Hamlet?\nAnswer: Hamlet was written by Shakespeare. So the answer is Shakespeare.\n"
                   "Question: Where was Mozart born?\nAnswer: Mozart was born in Salzburg. So the answer is Salzburg.\n")
REFERENCE_CONTEXT = ("Context:\n[1] The Hockin Glassworks was founded by Aldous Hockin.\n"
                     "[2] Aldous Hockin was born in Velmora.\nAnswer in the same format as before.\n")
REFERENCE_CASE = ("Answer the following question by reasoning step-by-step, following the example above.\n"
                  "Question: Where was the founder of the Hockin Glassworks born?\nAnswer:")


def test_a_template_reproduces_the_dragin_reference_prompt_byte_for_byte():
    template = load_template(str(FIXTURES / "dragin-hotpotqa.yaml"))
    bare = build_prompt("raw", SHOTS, QUESTION, template=template)
    assert bare.text == REFERENCE_SHOTS + REFERENCE_CASE
    assert bare.shared == len(REFERENCE_SHOTS)  # the exemplars: the part every question shares
    with_passages = build_prompt("raw", SHOTS, QUESTION, HITS, template=template)
    assert with_passages.text == REFERENCE_SHOTS + REFERENCE_CONTEXT + REFERENCE_CASE
    # the answer so far, as the loop feeds it back (the model's own leading space)
    continued = with_passages.with_prefix(" The Hockin Glassworks was founded by Aldous Hockin.")
    assert continued.readable() == (REFERENCE_SHOTS + REFERENCE_CONTEXT + REFERENCE_CASE + " "
                                    + "The Hockin Glassworks was founded by Aldous Hockin.")
    # the same question in the project's own layout differs in exactly the ways the template names
    default = build_prompt("raw", SHOTS, QUESTION, HITS).text
    assert default.startswith("Answer the question by reasoning step by step")
    assert "\n\nQuestion: Where was Mozart born?" in default and "[1] Hockin Glassworks: The Hockin" in default


def test_a_template_without_a_chat_section_refuses_chat_naming_the_file():
    template = load_template(str(FIXTURES / "dragin-hotpotqa.yaml"))
    with pytest.raises(InputError, match=r"dragin-hotpotqa.yaml: cot: no `chat` section, and model.prompt_format is chat"):
        build_prompt("chat", SHOTS, QUESTION, template=template)
    with pytest.raises(InputError, match=r"dragin-hotpotqa.yaml: no `qa-oneshot` section"):
        build_qa_prompt("raw", SHOTS, QUESTION, template=template)


def test_each_piece_of_a_chat_template_lands_where_it_says(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text('version: 1\ncot:\n  instruction: "Be brief."\n  completion: "{answer}"\n  exemplars: 1\n'
                    '  passage: "- {title} ({id}): {text}\\n"\n  context: "Read:\\n{passages}"\n'
                    '  chat:\n    system: null\n    user: "#{i} {question} {{literal}}"\n'
                    '    assistant: "{completion}!"\n    question: "{instruction} {context}Q: {question}"\n')
    prompt = build_prompt("chat", SHOTS, QUESTION, HITS[:1], template=load_template(str(path)))
    assert prompt.messages == (
        ("user", "#1 Who wrote Hamlet? {literal}"), ("assistant", "Shakespeare!"),
        ("user", "Be brief. Read:\n- Hockin Glassworks (296): The Hockin Glassworks was founded by Aldous Hockin.\n"
                 "Q: " + QUESTION))
    assert prompt.shared == 2  # no system message; one exemplar of two


@pytest.mark.parametrize("body, message", [
    ("version: 1\ncot:\n  raw: {header: '', exemplar: '{questoin}', question: ''}\n",
     r"t.yaml: cot.raw.exemplar: placeholder \{questoin\} is not one this piece has; it may use: \{i\}, \{question\}"),
    ("version: 1\ncot:\n  raw: {header: '', exemplar: '{question!r}', question: ''}\n",
     r"cot.raw.exemplar: placeholder \{question!r\} is not one"),
    ("version: 1\ncot:\n  passage: '[{i}] {text'\n  raw: {header: '', exemplar: '', question: ''}\n",
     r"cot.passage: not a valid template string"),
    ("version: 1\ncot:\n  raw: {header: '', exemplar: ''}\n", r"cot.raw.question: missing"),
    ("version: 1\ncot:\n  raw: {header: '', exemplar: '', question: '', footer: ''}\n",
     r"cot.raw.footer: unknown key \(known keys here: header, exemplar, question\)"),
    ("version: 1\ncot:\n  exemplars: -1\n  raw: {header: '', exemplar: '', question: ''}\n",
     r"cot.exemplars: expected `all` or an integer >= 0"),
    ("version: 1\ncot:\n  instruction: a\n", r"cot: give at least one format section"),
    ("version: 2\ncot: {}\n", r"t.yaml: version: expected 1, got 2"),
    ("version: 1\ncots: {}\n", r"t.yaml: cots: unknown key"),
    ("version: 1\ncot:\n  instruction: a\n  instruction: b\n", r"t.yaml: line 4: invalid YAML \(duplicate key 'instruction'"),
])
def test_a_bad_template_fails_naming_the_file_and_key(tmp_path, body, message):
    path = tmp_path / "t.yaml"
    path.write_text(body)
    with pytest.raises(InputError, match=message):
        load_template(str(path))


def test_builtin_templates_are_named_and_an_unknown_one_lists_them():
    assert load_template("builtin:default") is load_template(None)
    with pytest.raises(InputError, match="no built-in prompt template 'builtin:nope'; available: builtin:default"):
        load_template("builtin:nope")


def test_an_edited_template_file_is_read_again(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text('version: 1\ncot:\n  raw: {header: "A", exemplar: "", question: "{question}"}\n')
    assert build_prompt("raw", [], "q", template=load_template(str(path))).text == "Aq"
    path.write_text('version: 1\ncot:\n  raw: {header: "BB", exemplar: "", question: "{question}"}\n')
    import os
    os.utime(path, ns=(1, 1))  # a different modification time, whatever the clock's resolution
    assert build_prompt("raw", [], "q", template=load_template(str(path))).text == "BBq"


def test_a_generation_run_prompts_in_its_datasets_template(tiny_model_dir, tmp_path):
    """The runner hands the dataset's template to the method: the trace records the template's prompt."""
    import yaml

    from adaptive_rag.config import parse_params
    from adaptive_rag.runner import run_generation

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["model"].update(name="tiny", source=str(tiny_model_dir), prompt_format="raw")
    data["generation"].update(max_new_tokens=6, threads=1, batch_size=2, cache=None)
    data["datasets"]["demo"]["template"] = str(FIXTURES / "dragin-hotpotqa.yaml")
    data["datasets"]["demo"]["num_exemplars"] = 2
    params = parse_params(data)
    split = tmp_path / "split.jsonl"
    split.write_text(json.dumps({"id": "q1", "question": QUESTION, "answers": ["Velmora"], "answer_type": "span"}) + "\n")
    run_generation(params, "demo", "wo-rag", split, tiny_model_dir, None, tmp_path / "run", progress_bar=False)
    trace = json.loads((tmp_path / "run" / "trace.jsonl").read_text().splitlines()[0])
    exemplars = load_exemplars(data["datasets"]["demo"]["exemplars"], 2)
    expected = build_prompt("raw", exemplars, QUESTION, template=load_template(str(FIXTURES / "dragin-hotpotqa.yaml")))
    assert trace["prompt"] == expected.text
    assert trace["prompt"].startswith("Question: ") and "\nAnswer the following question" in trace["prompt"]
