"""Shared test helpers: a small BERT-layout config; our command-line programs run as users run them (a process of
their own, forked from a server of the heavy imports: mobilekd/launch.py)."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from safetensors.torch import load_file

from conftest import ROOT
from mobilekd import launch
from mobilekd.models.config import ModelConfig
from mobilekd.train.checkpoint import find_checkpoint

# a small BERT-layout model (the teacher's kind): 4 layers, 96 wide, 12 heads as all-MiniLM-L6-v2 has
BERT = ModelConfig(hidden_size=96, num_hidden_layers=4, num_attention_heads=12, intermediate_size=192,
                   hidden_act="gelu", embedding_size=96, trigram_input=False, embedding_transformation=False,
                   use_bottleneck=False, intra_bottleneck_size=96, key_query_shared_bottleneck=False,
                   num_feedforward_networks=1, normalization_type="layer_norm")


def env(threads: int = 1) -> dict:
    """A program's environment: this process's (conftest.py sets what every test's programs share), `threads`
    threads."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads)}


def run_module(module: str, *args, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    """`python -m module args`, a process of its own, forked from this worker's server of the heavy imports (or
    started afresh under MOBILEKD_FORK=0): its stdout, stderr and exit status."""
    with tempfile.TemporaryDirectory() as work:
        out, err = Path(work) / "stdout", Path(work) / "stderr"
        try:
            code = launch.Run(args, out, module=module, stderr=err, env=env(), cwd=ROOT).wait(timeout)
        except subprocess.TimeoutExpired as expired:  # killed: what it printed, for the failure's message
            expired.output, expired.stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
            raise
        proc = subprocess.CompletedProcess([sys.executable, "-m", module, *map(str, args)], code,
                                           out.read_text(errors="replace"), err.read_text(errors="replace"))
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


def checkpoint_step(out) -> int:
    """The step of the run's newest complete checkpoint, -1 while none is readable (the trainer swaps a new
    checkpoint in by two renames, so the file may vanish for an instant between our look and our read)."""
    path = find_checkpoint(out)
    try:
        return json.loads((path / "trainer.json").read_text())["global_step"] if path else -1
    except FileNotFoundError:
        return -1


def kill_after_checkpoint(module: str, args, out, min_step: int) -> int:
    """Start a training run, SIGKILL it once its checkpoint has reached `min_step`; return the step it holds."""
    proc = subprocess.Popen([sys.executable, "-m", module, *map(str, args)], env=env(), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and checkpoint_step(out) < min_step:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return checkpoint_step(out)


def max_weight_difference(dir_a, dir_b) -> float:
    a, b = load_file(str(dir_a / "model.safetensors")), load_file(str(dir_b / "model.safetensors"))
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)
