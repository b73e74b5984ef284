"""The alternative route to `.tflite`: our ONNX export through onnx2tf (which needs TensorFlow, so it lives in an
environment of its own; pass its `onnx2tf` executable). onnx2tf rewrites layouts by heuristics, which can
silently give wrong outputs, so its file is checked against PyTorch like every other export.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from mobilekd.errors import UserError, last_line
from mobilekd.fileio import atomic_path


def convert_onnx2tf(onnx_path: Path, out_path: Path, executable: str) -> Path:
    """Run `executable -i ONNX -o TMP` and keep its float32 `.tflite` as `out_path` (atomically)."""
    found = shutil.which(executable)
    if not found:
        raise UserError(f"{executable}: not found (install onnx2tf and TensorFlow in an environment of their own "
                        f"and pass its onnx2tf executable)")
    with tempfile.TemporaryDirectory() as work:
        proc = subprocess.run([found, "-i", str(onnx_path), "-o", work, "-n", "-osd"], capture_output=True, text=True)
        produced = Path(work) / f"{Path(onnx_path).stem}_float32.tflite"
        if proc.returncode != 0 or not produced.is_file():
            last = last_line(proc.stderr, proc.stdout)
            raise UserError(f"onnx2tf could not convert {onnx_path}: {last[:300]}")
        with atomic_path(out_path) as tmp:
            shutil.copyfile(produced, tmp)
    return out_path
