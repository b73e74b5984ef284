"""`mobilekd VERB ...` in a process of its own, without paying its imports every time.

A search (`mobilekd ship`) runs tens of short trials, each a `mobilekd finetune` or `mobilekd bilstm` run of its
own (so that a trial can be stopped, and its memory returned, at any moment). A fresh `python -m mobilekd finetune`
spends about 7 s importing torch, transformers, scipy and scikit-learn (measured: `python -X importtime` on a 2-core
AMD EPYC) before a small trial's second of training. Here a server process imports them once and forks a child for
each run: Python's own `multiprocessing` forkserver, with those modules preloaded
(`multiprocessing.set_forkserver_preload`).
The server is spawned afresh, not forked from the caller (whose threads a fork would not carry). The only threads
its imports start are the OpenBLAS pools of numpy and scipy, which OpenBLAS stops before a fork and starts again
after it (its pthread_atfork handlers); torch's OpenMP pool starts at the first parallel region, which the server
never runs. The caller's main module must be safe to import (Python's rule for forkserver children): `python -m
mobilekd` and the `mobilekd` command are.

A child is still a run of its own: its argv, the caller's environment as it is when the run starts, its output
(a log file, or the caller's stdout and stderr), its exit status (`Process.exitcode`: 2 for a UserError or a flag
error), and atexit handlers run as at a normal exit. `MOBILEKD_FORK=0` runs each as `python -m mobilekd`
instead (what a run costs without the server, or where forking is not wanted).
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

# What every recipe imports and what takes the time (python -X importtime), not the recipes themselves: a module
# the server imported is not imported again by the child, so a change to our code reaches the next run.
# transformers' classes load lazily: the tokenizer's modules are named (0.7 s more of every run otherwise).
PRELOAD = ["torch", "transformers", "transformers.models.auto.tokenization_auto",
           "transformers.models.bert.tokenization_bert", "tokenizers", "safetensors.torch", "accelerate", "scipy.stats",
           "sklearn.metrics", "optuna", "tqdm", "torch.utils.tensorboard"]


def forked() -> bool:
    return os.environ.get("MOBILEKD_FORK", "1") != "0"


def _context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


class Run:
    """A `mobilekd` run under way, as a `subprocess.Popen` is read: poll(), wait(), terminate(), kill(),
    returncode."""

    def __init__(self, argv: list[str], log: Path | None):
        self.argv = [str(a) for a in argv]
        if forked():
            self.proc = _context().Process(target=_child, args=(self.argv, str(log) if log else None,
                                                                 dict(os.environ)), name="mobilekd")
            self.proc.start()
        else:
            out = open(log, "w") if log else None
            try:
                self.proc = subprocess.Popen([sys.executable, "-m", "mobilekd", *self.argv], env=os.environ,
                                             stdout=out, stderr=subprocess.STDOUT if out else None)
            finally:
                if out:
                    out.close()

    @property
    def returncode(self) -> int | None:
        return self.proc.exitcode if isinstance(self.proc, multiprocessing.process.BaseProcess) \
            else self.proc.returncode

    def poll(self) -> int | None:
        if isinstance(self.proc, subprocess.Popen):
            self.proc.poll()
        return self.returncode

    def wait(self) -> int:
        if isinstance(self.proc, subprocess.Popen):
            return self.proc.wait()
        self.proc.join()
        return self.proc.exitcode

    def terminate(self) -> None:
        self.proc.terminate()

    def kill(self) -> None:
        self.proc.kill()


def run(argv: list[str], log: Path | None = None) -> int:
    """Run `mobilekd *argv` to its end (its output to `log`, or to this process's stdout and stderr); its exit
    status."""
    return Run(argv, log).wait()


def _child(argv: list[str], log: str | None, env: dict) -> None:
    """The run, in the forked child: the caller's environment, output to `log`, `mobilekd *argv`, then the atexit
    handlers a normal exit runs (a multiprocessing child ends in os._exit, which skips them)."""
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["mobilekd", *argv]
    from mobilekd.cli import main
    try:
        main(argv)
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
