"""A virtual environment of its own for a tool whose pins clash with ours (TensorFlow for the fused-LSTM export;
MediaPipe Model Maker for the retired quality benchmark): made once under a folder of the caller's, with exactly
its pins, and reused while its record of them (installed.json) matches."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from mobilekd.errors import UserError


def side_venv(root: Path, pins: list[str], what: str, python_env: str) -> Path:
    """ROOT/venv's interpreter with `pins` installed, made when missing or made with other pins (minutes, from the
    package index; its log at ROOT/install.log). The interpreter that makes it is $`python_env`, else python3.11;
    a failed install is one UserError naming the log."""
    python = root / "venv" / "bin" / "python"
    ready = root / "venv" / "installed.json"
    try:
        if json.loads(ready.read_text()) == pins:
            return python
    except (OSError, ValueError):  # not made yet, or its record unreadable: made again
        pass
    interpreter = os.environ.get(python_env, "python3.11")
    print(f"{what}: installing {' '.join(pins)} into {root / 'venv'} (once; minutes)", flush=True)
    log = root / "install.log"
    root.mkdir(parents=True, exist_ok=True)
    try:
        with open(log, "w") as f:
            ok = subprocess.run([interpreter, "-m", "venv", "--clear", str(root / "venv")], stdout=f,
                                stderr=f).returncode == 0 \
                and subprocess.run([str(python), "-m", "pip", "install", *pins], stdout=f, stderr=f).returncode == 0
    except OSError as err:  # no such interpreter
        ok = False
        log.write_text(f"{err}\n")
    if not ok:
        raise UserError(f"{log}: installing {what} failed (needs {interpreter}, or {python_env}, and the package "
                        f"index)")
    ready.write_text(json.dumps(pins))
    return python
