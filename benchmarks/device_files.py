"""A finished run folder to and from a GPU machine that takes and returns few megabytes (the device tool: 64 MiB of
files each way, 16 MiB a returned file): its weights rounded to bf16 for the journey and cast back to fp32 on
arrival, its training state (checkpoint/, tensorboard/) left behind, and on the way back the folder packed into one
tar cut into parts a returned file may hold.

    python -m benchmarks.device_files shrink RUN DEST          # RUN's files into DEST, weights in bf16
    python -m benchmarks.device_files restore SRC RUN          # SRC's files into RUN, weights back in fp32
    python -m benchmarks.device_files pack RUN PREFIX          # RUN shrunk into PREFIX.tar.00, .01, ...
    python -m benchmarks.device_files unpack PREFIX RUN        # the parts back into RUN, weights in fp32

The rounding is the one lossy step: a weight keeps bf16's 8 significant bits, as the bf16 autocast that trains and
runs these models on the CPU hosts already rounds every matrix product's operands. `restore` and `unpack` record
that in RUN/travelled.json, so no reader takes such weights for the run's own.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from mobilekd.errors import UserError, cli_entry
from mobilekd.fileio import read_json, write_json

WEIGHTS = "model.safetensors"
LEFT_BEHIND = ("checkpoint", "tensorboard", ".mobilekd.lock")
PART_BYTES = 15 * 2 ** 20  # under the 16 MiB a returned file may hold


def _cast(src: Path, dst: Path, dtype: torch.dtype) -> None:
    """Every floating-point tensor of the weights file `src` in `dtype`, into `dst` (its metadata kept)."""
    with safe_open(src, "pt") as f:
        metadata = f.metadata()
    tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in load_file(src).items()}
    save_file(tensors, dst, metadata=metadata)


def _copy(src: Path, dst: Path, dtype: torch.dtype, skip=()) -> None:
    """SRC's files but `skip` into DST, the weights in `dtype`."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in src.iterdir():
        if path.name in skip:
            continue
        if path.name == WEIGHTS:
            _cast(path, dst / WEIGHTS, dtype)
        elif path.is_dir():
            shutil.copytree(path, dst / path.name, dirs_exist_ok=True)
        else:
            shutil.copy2(path, dst / path.name)


def shrink(run: Path, dest: Path) -> None:
    """RUN's files (but its training state) into DEST, the weights in bf16."""
    _copy(run, dest, torch.bfloat16, skip=LEFT_BEHIND)


def restore(src: Path, run: Path) -> None:
    """SRC's files into RUN, the weights cast back to fp32, and RUN/travelled.json saying they went through bf16."""
    _copy(src, run, torch.float32)
    write_json(run / "travelled.json", {"weights": "rounded to bf16 to travel between machines, cast back to fp32",
                                        "by": "benchmarks.device_files"})


def finished(run: Path) -> bool:
    """RUN's recipe marked it finished (OUT/complete.json, written at the start and completed at the end)."""
    try:
        return bool(read_json(run / "complete.json").get("finished"))
    except (OSError, ValueError, AttributeError):
        return False


def pack(run: Path, prefix: Path) -> list[Path]:
    """RUN, shrunk, as one tar cut into PREFIX.tar.00, .01, ... of at most PART_BYTES each; a run not finished is
    refused (its weights are not the run's)."""
    if not finished(run):
        raise UserError(f"{run}: not finished (its complete.json has no 'finished'): nothing to pack")
    with tempfile.TemporaryDirectory() as work:
        shrink(run, Path(work) / run.name)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(Path(work) / run.name, arcname=run.name)
    data = buffer.getvalue()
    prefix.parent.mkdir(parents=True, exist_ok=True)
    parts = []
    for i in range(0, len(data), PART_BYTES):
        parts.append(prefix.with_name(f"{prefix.name}.tar.{i // PART_BYTES:02d}"))
        parts[-1].write_bytes(data[i:i + PART_BYTES])
    return parts


def unpack(prefix: Path, run: Path) -> None:
    """The parts PREFIX.tar.NN, joined, into RUN (`restore`)."""
    parts = sorted(prefix.parent.glob(f"{prefix.name}.tar.[0-9][0-9]"))
    if not parts:
        raise UserError(f"{prefix}.tar.00: no such file")
    data = b"".join(p.read_bytes() for p in parts)
    with tempfile.TemporaryDirectory() as work, tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(work, filter="data")
        (inner,) = Path(work).iterdir()
        restore(inner, run)


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.device_files", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("shrink", "restore", "pack", "unpack"))
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    args = p.parse_args(argv)
    if args.action != "unpack" and not args.src.is_dir():
        raise UserError(f"{args.src}: no such run folder")
    if args.action == "pack":
        for part in pack(args.src, args.dst):
            print(f"{part} {part.stat().st_size} bytes")
    else:
        {"shrink": shrink, "restore": restore, "unpack": unpack}[args.action](args.src, args.dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
