"""One matrix product where a Llama layer makes several from the same input: q/k/v, and gate/up.

Why it exists: at the few rows of a decode step a matrix product is bound by reading its weights, and
each product is a kernel of its own. Reading q, k and v's weights as one matrix (and gate and up's as
another) turns seven products a layer into four, with fewer, larger kernels. The fused matrix is the
layers' own weights laid end to end, and each module's weight becomes a view of its rows, so the model
holds its weights once and its own `forward` (the eager path, Integrated Gradients through transformers)
reads the same memory.

`FastDecoder(fused=True)` uses these; on a CUDA device that is the default (`fast_decoder`). A fused
product adds the same terms per output as the separate ones, but a GPU library may pick another kernel
(another split of the sum) for the larger matrix, so bf16 results can differ in the last bits: the
setting is part of a model's identity (`HFModel.identity`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

# first module of a fused group -> the group's product, so a second decoder over the same model
# reuses the matrix the first one made instead of stacking views of it again
_FUSED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@dataclass
class FusedLayer:
    """The fused products of one decoder layer: q|k|v rows and gate|up rows (biases where the model has
    them, as Qwen2's q/k/v)."""

    qkv: object  # a torch.nn.Linear over the q|k|v rows (no parameters of its own: views of the model's)
    gate_up: object  # the same over gate|up
    intermediate: int  # rows of gate (= of up)


def fuse_layer(layer) -> FusedLayer:
    attention, mlp = layer.self_attn, layer.mlp
    qkv = fuse_linears((attention.q_proj, attention.k_proj, attention.v_proj))
    gate_up = fuse_linears((mlp.gate_proj, mlp.up_proj))
    return FusedLayer(qkv, gate_up, mlp.gate_proj.out_features)


def fuse_linears(modules: tuple):
    """One `torch.nn.Linear` whose weight (and bias) are `modules`' stacked by output rows; every module's
    weight (and bias) is made a view of its rows of the stacked matrix, so nothing is held twice. A
    Linear, so the CPU's kernel choice and packing (`cpu_kernels`) treat it as any other layer."""
    import torch

    held = _FUSED.get(modules[0])
    if held is not None:
        return held
    with torch.no_grad():
        weight = torch.cat([m.weight for m in modules])
        bias = None
        if any(m.bias is not None for m in modules):
            bias = torch.cat([m.bias if m.bias is not None else weight.new_zeros(m.out_features) for m in modules])
        start = 0
        for m in modules:
            end = start + m.out_features
            m.weight = torch.nn.Parameter(weight[start:end], requires_grad=m.weight.requires_grad)
            if m.bias is not None:
                m.bias = torch.nn.Parameter(bias[start:end], requires_grad=m.bias.requires_grad)
            start = end
        product = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta",
                                  dtype=weight.dtype)
        product.weight = torch.nn.Parameter(weight, requires_grad=False)
        if bias is not None:
            product.bias = torch.nn.Parameter(bias, requires_grad=False)
    _FUSED[modules[0]] = product
    return product


def is_rms_norm(module) -> bool:
    """Whether `module` normalises as Llama's RMSNorm does (weight * (x / rms(x)) in float32, cast back
    before the weight), so `torch.nn.functional.rms_norm` reproduces it in one kernel."""
    return type(module).__name__.endswith("RMSNorm") and hasattr(module, "variance_epsilon") \
        and getattr(module, "weight", None) is not None
