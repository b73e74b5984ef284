"""The host's own ceilings, measured through the same runtime: a stack of large matrix products (fp32, and int8
by dynamic-range quantization) converted with litert-torch and timed like any model. Each model's achieved
FLOP/s is then shown as a fraction of these.
"""

from __future__ import annotations

from pathlib import Path

import torch

from mobilekd.fileio import atomic_path

ROWS, WIDTH, LAYERS = 512, 1024, 8  # 8.6 GFLOP per run; weights 32 MB fp32, larger than this host's L2


class MatmulStack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


FLOPS = 2 * ROWS * WIDTH * WIDTH * LAYERS


def peak_models(cache: Path) -> dict[str, Path]:
    """fp32 and dynamic-int8 matmul stacks, converted once and kept in `cache`."""
    from mobilekd.export.litert import load_litert_torch, quantize_file

    paths = {"fp32": cache / "peak_fp32.tflite", "int8": cache / "peak_int8.tflite"}
    if all(p.is_file() for p in paths.values()):
        return paths
    torch.manual_seed(0)
    model = MatmulStack().eval()
    edge = load_litert_torch().convert(model, (torch.randn(ROWS, WIDTH),))
    with atomic_path(paths["fp32"]) as tmp:
        edge.export(str(tmp))
    with atomic_path(paths["int8"]) as tmp:
        edge.export(str(tmp))
        quantize_file(tmp, "dynamic-int8")
    return paths
