"""Which machine a figure was measured on: the CPU's model name, the instruction-set flags that change our
kernels, the core count and the torch and LiteRT versions, with a short stable id made from them.

The model name alone does not tell this project's machines apart ("AMD EPYC" is both an AVX2-only part without
bf16 and one with avx512_bf16 and VNNI), so every row that holds a time, a speed or a precision choice names its
host by `identity()["id"]`, and `docs/results/hosts.json` (written by `benchmarks.provenance`) maps each id to
its fields. An id reads as `<vendor>-<widest kernel flag>-<cores>c-<6 hex digits>`, e.g.
`epyc-avx512bf16-2c-1a2b3c`: the digits are a digest of every field, so a torch upgrade is a new host.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
from pathlib import Path

# The flags whose presence changes which kernels torch, oneDNN and XNNPACK run (widest first for the id's tag)
KERNEL_FLAGS = ("amx_int8", "amx_bf16", "avx512_bf16", "avx512_vnni", "avx512f", "avx2")
UNKNOWN = "unknown"  # a row measured before hosts were recorded, on a machine that cannot be told now


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or what `platform` knows."""
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """Which of `KERNEL_FLAGS` this CPU has, in that order."""
    have = set(_cpuinfo().get("flags", "").split())
    return [f for f in KERNEL_FLAGS if f in have]


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def make_id(fields: dict) -> str:
    """The short id of a host's fields (cpu, cpu_flags, cpu_count, torch, litert, and gpu where one was used)."""
    cpu = fields["cpu"].lower()
    vendor = next((v for v in ("epyc", "xeon", "ryzen", "core", "graviton", "neoverse") if v in cpu),
                  cpu.split()[0] if cpu else "cpu")
    tag = (fields.get("cpu_flags") or ["baseline"])[0].replace("_", "")
    digest = hashlib.sha256(repr(sorted(fields.items())).encode()).hexdigest()[:6]
    gpu = fields.get("gpu")
    model = next((w for w in (gpu or "").split() if any(c.isdigit() for c in w)), (gpu or "gpu").split()[-1])
    prefix = f"{model.lower()}-" if gpu else ""  # "NVIDIA H100 80GB HBM3" -> h100-
    return f"{prefix}{vendor}-{tag}-{fields['cpu_count']}c-{digest}"


@functools.lru_cache(maxsize=None)
def identity(gpu: str | None = None) -> dict:
    """This machine as rows record it: {"id", "cpu", "cpu_flags", "cpu_count", "torch", "litert"} (and "gpu"
    where a run trained on one, e.g. `torch.cuda.get_device_name(0)`)."""
    fields = {"cpu": cpu_model(), "cpu_flags": cpu_flags(), "cpu_count": os.cpu_count(),
              "torch": _version("torch"), "litert": _version("ai-edge-litert")}
    if gpu:
        fields["gpu"] = gpu
    return {"id": make_id(fields), **fields}


def describe(fields: dict) -> str:
    """One line for a page: "AMD EPYC (avx2, avx512f, avx512_bf16, avx512_vnni), 2 cores [epyc-...]"."""
    if not fields or fields.get("id", UNKNOWN) == UNKNOWN:
        return "an unrecorded machine"
    flags = fields.get("cpu_flags")
    shown = f" ({', '.join(flags) if flags else 'no AVX2'})" if flags is not None else " (flags unknown)"
    cores = f", {fields['cpu_count']} cores" if fields.get("cpu_count") else ""
    gpu = f" + {fields['gpu']}" if fields.get("gpu") else ""
    return f"{fields['cpu']}{shown}{cores}{gpu} [{fields['id']}]"
