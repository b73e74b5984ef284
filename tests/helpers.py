"""Running our command-line programs the way users do, in a subprocess."""

import os
import subprocess
import sys

from conftest import ROOT


def env(threads: int = 1) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}


def run_module(module: str, *args, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                          env=env(), cwd=ROOT, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{module} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The program failed the way bad input must: exit 2 and one line on stderr, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, proc.stderr[-2000:]
    return lines[0]
