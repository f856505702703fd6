"""What machine a number was measured on: the CPU's model and vector ISA, the math libraries' versions.

The same 2-core demo takes minutes on one x86 and several times longer on another (an AVX-512 Intel
Xeon against an AVX2-only AMD EPYC), and the fast path's CPU kernel is chosen per machine
(`lm.cpu_kernels`), so a timing or a kernel choice means little without the machine it came from. Every
benchmark prints `describe()`'s line with its table and every run's provenance keeps `cpu()`.

The ISA named is the one PyTorch's own kernels dispatch to (`torch.backends.cpu.get_cpu_capability()`,
which `ATEN_CPU_CAPABILITY=avx2` lowers on an AVX-512 machine); oneDNN (the packed linear kernels) and MKL
(`torch.nn.functional.linear`, `bmm`) choose their own, lowered by `ONEDNN_MAX_CPU_ISA` and
`MKL_ENABLE_INSTRUCTIONS`; those settings are reported when set, since they change what a number means.
"""

from __future__ import annotations

import os
import platform
import re
from functools import lru_cache

# Environment settings that lower the instruction set a library may use (forced-AVX2 measurements).
ISA_SETTINGS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo's "model name"), else what `platform` says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def hardware_isa() -> str:
    """The widest x86 vector extension the CPU has (AVX-512, AVX2, AVX, SSE), whatever the libraries use."""
    flags = cpu_flags()
    for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4_2", "SSE4.2")):
        if flag in flags:
            return name
    return platform.machine()


def torch_isa() -> str | None:
    """The ISA PyTorch's CPU kernels dispatch to in this process (after `ATEN_CPU_CAPABILITY`)."""
    try:
        import torch

        return torch.backends.cpu.get_cpu_capability()
    except (ImportError, AttributeError):
        return None


def isa_settings() -> dict:
    return {name: os.environ[name] for name in ISA_SETTINGS if os.environ.get(name)}


def library_versions() -> dict:
    """torch, and the MKL and oneDNN builds it carries (read from `torch.__config__.show()`)."""
    import torch

    shown = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version (\S+)", shown)
    onednn = re.search(r"MKL-DNN v(\S+)", shown)
    return {"torch": torch.__version__, "mkl": mkl.group(1) if mkl else None, "onednn": onednn.group(1) if onednn else None}


def cpu() -> dict:
    """The CPU a run or a benchmark ran on, for its record."""
    return {"model": cpu_model(), "cores": os.cpu_count(), "isa": hardware_isa(), "torch_isa": torch_isa(),
            **({"isa_settings": isa_settings()} if isa_settings() else {})}


def describe(bandwidth: float | None = None) -> str:
    """One line for a benchmark's header: CPU, ISA in use, libraries, forced settings, copy bandwidth."""
    versions = library_versions()
    parts = [f"{cpu_model()} ({os.cpu_count()} cores, {hardware_isa()}; torch kernels {torch_isa()})",
             f"torch {versions['torch']}, MKL {versions['mkl']}, oneDNN {versions['onednn']}"]
    if isa_settings():
        parts.append("forced: " + " ".join(f"{k}={v}" for k, v in isa_settings().items()))
    if bandwidth:
        parts.append(f"measured copy bandwidth {bandwidth / 1e9:.1f} GB/s")
    return "; ".join(parts)
