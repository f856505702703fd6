"""The fast path's CPU linear kernel: chosen by timing on this machine, remembered, recorded, and the same
greedy outputs (within the float32 tolerances) whichever runs."""

from __future__ import annotations

import json

import pytest
import torch

from adaptive_rag.lm import cpu_kernels
from adaptive_rag.lm.hf import HFModel

from test_fast_decoder import assert_same, lively_dir, prompts  # noqa: F401 - the fast-path tests' model, prompts, tolerances

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")


@pytest.fixture
def choices(tmp_path, monkeypatch):
    path = tmp_path / "choices" / "cpu-kernels.json"
    monkeypatch.setenv("ADAPTIVE_RAG_KERNEL_CHOICES", str(path))
    return path


def test_the_fastest_kernel_is_chosen_and_packed_keeps_a_near_tie():
    assert cpu_kernels.faster({"packed": {"1": 1.0, "8": 2.0}, "modules": {"1": 0.5, "8": 1.0}}) == "modules"
    assert cpu_kernels.faster({"packed": {"1": 1.0, "8": 2.0}, "modules": {"1": 1.0, "8": 1.8}}) == "packed"  # 95 %
    assert cpu_kernels.faster({"packed": {"8": 1.0}, "modules": {"8": 2.0}}) == "packed"
    three = {"packed": {"1": 1.0, "8": 2.0}, "mkl": {"1": 0.7, "8": 1.4}, "modules": {"1": 0.7, "8": 2.2}}
    assert cpu_kernels.faster(three) == "mkl"
    assert cpu_kernels.faster({"mkl": {"8": 1.0}, "modules": {"8": 0.99}}) == "modules"  # no packed: the fastest


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="this torch build has no MKL")
def test_mkl_pads_a_few_rows_to_its_packed_count_and_each_row_is_its_own():
    """MKL's packed GEMM at fewer rows than it was packed for: zero rows fill the product, and a row's result
    is the one it gets in a full batch (the other rows' values do not enter it)."""
    layer = torch.nn.Linear(40, 24)
    run = cpu_kernels.runner("mkl", 8)
    (weight,) = cpu_kernels.pack("mkl", [layer], 8).values()
    full = torch.randn(8, 1, 40)
    with torch.inference_mode():
        batch = run(layer, weight, full)
        for rows in (2, 3, 5, 7):
            alone = run(layer, weight, full[:rows])
            assert alone.shape == (rows, 1, 24) and torch.equal(alone, batch[:rows])
        for rows in (1, 9, 30):  # one row, and more than packed: MKL's plain GEMM on the layer's weight
            x = torch.randn(rows, 40)
            torch.testing.assert_close(run(layer, weight, x), torch.nn.functional.linear(x, layer.weight, layer.bias))
        assert torch.equal(run(layer, weight, full[:1]), torch.nn.functional.linear(full[:1], layer.weight, layer.bias))


def test_auto_times_every_kernel_on_the_model_and_records_the_choice(lively_dir, choices):
    lm = HFModel(lively_dir, batch_size=3)
    choice = lm.kernel_choice
    assert choice["how"].startswith("measured") and choice["kernel"] in cpu_kernels.KERNELS
    assert set(choice["seconds"]) == set(cpu_kernels.available(torch.float32, 3))
    assert set(choice["seconds"]) >= {"packed", "modules"}
    assert set(choice["seconds"]["packed"]) == {"1", "3"}  # one row (a call's tail) and the batch size
    assert all(s > 0 for by_rows in choice["seconds"].values() for s in by_rows.values())
    assert bool(lm.decoder.packed) == (choice["kernel"] != "modules")
    assert lm.identity().get("cpu_kernels") == (None if choice["kernel"] == "packed" else choice["kernel"])


def timings(packed: float, modules: float, mkl: float | None = None) -> dict:
    by_kernel = {"packed": packed, "modules": modules, "mkl": packed if mkl is None else mkl}
    return {kernel: {"1": t, "3": t} for kernel, t in by_kernel.items()}


@pytest.fixture
def scripted(monkeypatch):
    """Timing rounds and load average as the test says (the real timing is the test above's)."""
    state = {"rounds": [], "load": 0.0}
    monkeypatch.setattr(cpu_kernels, "time_kernels", lambda modules, packs, rows, hint: state["rounds"].pop(0))
    monkeypatch.setattr(cpu_kernels.os, "getloadavg", lambda: (state["load"], 0.0, 0.0))
    return state


def test_a_choice_both_rounds_agree_on_is_remembered_per_machine(lively_dir, choices, scripted):
    scripted["rounds"] = [timings(1.0, 0.5), timings(1.0, 0.6)]
    first = HFModel(lively_dir, batch_size=3).kernel_choice
    assert first["how"] == "measured" and first["kernel"] == "modules"
    assert first["seconds"] == timings(1.0, 0.5)  # the faster of the two rounds, per kernel and rows
    (entry,) = json.loads(choices.read_text()).values()
    assert entry["kernel"] == "modules" and entry["load_average"] == 0.0

    again = HFModel(lively_dir, batch_size=3)
    assert again.kernel_choice["how"] == "remembered" and not again.decoder.packed and not scripted["rounds"]
    scripted["rounds"] = [timings(1.0, 0.95), timings(1.0, 0.97)]  # other row counts: measured again
    other = HFModel(lively_dir, batch_size=2).kernel_choice
    assert other["kernel"] == "packed" and len(json.loads(choices.read_text())) == 2  # a near tie keeps packed


def test_rounds_that_disagree_are_a_tie_remembered_but_a_busy_machine_is_not(lively_dir, choices, scripted):
    scripted["rounds"] = [timings(1.0, 0.5, mkl=2.0), timings(0.5, 1.0, mkl=2.0)]  # best passes: packed 0.5, modules 0.5
    disagreed = HFModel(lively_dir, batch_size=3)
    assert disagreed.kernel_choice["kernel"] == "packed" and disagreed.decoder.packed  # a tie keeps packed
    assert "the two rounds disagreed, modules and packed" in disagreed.kernel_choice["how"]
    assert json.loads(choices.read_text())  # remembered: the next load does not time the tie again
    assert HFModel(lively_dir, batch_size=3).kernel_choice["how"] == "remembered"
    choices.unlink()
    if "mkl" in cpu_kernels.available(torch.float32, 3):  # modules, then mkl: the best passes say mkl (0.3)
        scripted["rounds"] = [timings(1.0, 0.5, mkl=0.6), timings(1.0, 0.9, mkl=0.3)]
        lm = HFModel(lively_dir, batch_size=3)
        assert lm.kernel_choice["kernel"] == "mkl" and "disagreed, mkl and modules" in lm.kernel_choice["how"]
        choices.unlink()

    scripted["rounds"], scripted["load"] = [timings(1.0, 0.5), timings(1.0, 0.5)], 40.0
    busy = HFModel(lively_dir, batch_size=3).kernel_choice
    assert busy["kernel"] == "modules" and busy["how"] == "measured, not remembered (load average 40.0)"
    assert not choices.exists()


def test_a_remembered_choice_is_what_the_model_runs(lively_dir, choices):
    kernels = cpu_kernels.available(torch.float32, 3)
    products = HFModel(lively_dir, batch_size=3, cpu_kernels="packed").decoder.products()
    key, _ = cpu_kernels.choice_key(products, [1, 3], kernels)
    # a choice remembered among fewer candidates (before mkl was one) is measured again
    assert cpu_kernels.choice_key(products, [1, 3], ["packed", "modules"])[0] != key or kernels == ["packed", "modules"]
    choices.parent.mkdir()
    for kernel in kernels:
        choices.write_text(json.dumps({key: {"kernel": kernel, "seconds": {}}}))
        lm = HFModel(lively_dir, batch_size=3)
        assert lm.kernel_choice == {"kernel": kernel, "how": "remembered", "machine": lm.kernel_choice["machine"]}
        assert bool(lm.decoder.packed) == (kernel != "modules")


def test_a_pass_slower_than_the_weights_allow_stops_the_timing_and_keeps_packed(lively_dir, choices, monkeypatch):
    monkeypatch.setattr(cpu_kernels, "_pass_seconds", lambda run, modules, packed, inputs: 30.0)  # other work holds the cores
    lm = HFModel(lively_dir, batch_size=3)
    assert lm.kernel_choice["kernel"] == "packed" and lm.decoder.packed
    assert lm.kernel_choice["how"].startswith("not measured, the machine is busy (a pass of")
    assert not choices.exists()


def test_an_unreadable_or_unwritable_choices_file_only_means_measuring_again(lively_dir, choices, scripted):
    choices.parent.mkdir()
    choices.write_text("not json")
    scripted["rounds"] = [timings(1.0, 2.0)] * 4
    assert HFModel(lively_dir, batch_size=3).kernel_choice["how"] == "measured"
    assert json.loads(choices.read_text())  # replaced by a readable file
    choices.unlink()
    choices.parent.chmod(0o500)
    try:
        lm = HFModel(lively_dir, batch_size=3)  # root writes anyway; anyone else gets no file, and no error
        assert lm.kernel_choice["how"] == "measured" and (not choices.exists() or choices.parent.stat().st_uid == 0)
    finally:
        choices.parent.chmod(0o700)


def test_a_setting_skips_the_timing_and_every_kernel_gives_the_eager_outputs(lively_dir, choices):
    eager = HFModel(lively_dir, batch_size=3, attention="eager")
    batch = prompts()
    reference = eager.generate(batch, 8)
    for kernel in cpu_kernels.available(torch.float32, 3):
        for fused in (False, True):  # fused q|k|v and gate|up products run through the kernel too
            lm = HFModel(lively_dir, batch_size=3, cpu_kernels=kernel, fused_kernels=fused)
            assert lm.kernel_choice == {"kernel": kernel, "how": "setting", "machine": lm.kernel_choice["machine"]}
            assert bool(lm.decoder.packed) == (kernel != "modules")
            assert set(lm.decoder.packed) == (set() if kernel == "modules" else set(lm.decoder.products()))
            assert lm.identity().get("cpu_kernels") == (None if kernel == "packed" else kernel)
            assert_same(lm.generate(batch, 8), reference)
    assert not choices.exists()  # nothing timed, nothing remembered


def test_a_large_model_is_timed_on_its_first_layers_only(monkeypatch):
    """The timing holds every candidate's packed copy of what it times: a model over TIMED_BYTES is timed on
    the layers, in reading order, that fit in it (at least one)."""
    layers = [torch.nn.Linear(64, 32) for _ in range(10)]  # 8 KiB of float32 weights each
    monkeypatch.setattr(cpu_kernels, "TIMED_BYTES", 3 * 64 * 32 * 4)
    assert cpu_kernels.timed_layers(layers) == layers[:3]
    monkeypatch.setattr(cpu_kernels, "TIMED_BYTES", 1)
    assert cpu_kernels.timed_layers(layers) == layers[:1]
    monkeypatch.setattr(cpu_kernels, "TIMED_BYTES", 1e12)
    assert cpu_kernels.timed_layers(layers) == layers


def test_model_cpu_kernels_is_checked_and_reaches_the_run_key():
    import yaml

    from adaptive_rag.config import parse_params
    from adaptive_rag.errors import ConfigError
    from conftest import REPO

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    assert "cpu_kernels" not in parse_params(data).model.key()  # auto: every existing run key stays what it was
    data["model"]["cpu_kernels"] = "modules"
    assert parse_params(data).model.key()["cpu_kernels"] == "modules"
    data["model"]["cpu_kernels"] = "fastest"
    with pytest.raises(ConfigError, match="cpu_kernels"):
        parse_params(data)
