"""`mobilekd VERB ...` (or `python -m MODULE ...`) in a process of its own, without paying its imports every time.

A search (`mobilekd ship`) runs tens of short trials, each a `mobilekd finetune` or `mobilekd bilstm` run of its own
(so that a trial can be stopped, and its memory returned, at any moment). A fresh `python -m mobilekd finetune`
spends seconds importing torch, transformers, scipy and scikit-learn before it trains (a search's trials start about
4 s sooner forked: `python -m benchmarks.search_wall`, docs/throughput.md). Here a server process imports them once
and forks a child for each run: Python's own `multiprocessing` forkserver, with those modules preloaded
(`multiprocessing.set_forkserver_preload`).
The server is spawned afresh, not forked from the caller (whose threads a fork would not carry). The only threads
its imports start are the OpenBLAS pools of numpy and scipy, which OpenBLAS stops before a fork and starts again
after it (its pthread_atfork handlers); torch's OpenMP pool starts at the first parallel region, which the server
never runs. The caller's main module must be safe to import (Python's rule for forkserver children): `python -m
mobilekd` and the `mobilekd` command are.

The server starts with the caller's environment at its first run, and what the imports read then (OMP_NUM_THREADS,
which torch's OpenMP reads once) holds for every run it forks; the recipes set their thread count themselves
(--threads). A child is still a run of its own: its argv, the caller's environment as it is when the run starts, its
output (a log file, or the caller's stdout and stderr), its exit status (`Process.exitcode`: 2 for a UserError or a
flag error), and atexit handlers run as at a normal exit. `MOBILEKD_FORK=0` runs each as `python -m mobilekd`
instead (what a run costs without the server, or where forking is not wanted).
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import subprocess
import sys
import threading
from pathlib import Path

# What every recipe imports and what takes the time (python -X importtime): third-party modules only, so that each
# run imports our own code afresh (an edit reaches the next run). transformers loads its classes lazily: the
# tokenizer's modules are named (0.7 s more of every run otherwise).
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
    """`python -m module *argv` under way (module `mobilekd` unless named), read as a `subprocess.Popen` is:
    poll(), wait(timeout), terminate(), kill(), returncode. Its stdout goes to `log` (or this process's stdout),
    its stderr to `stderr` (or where its stdout goes); it runs in `cwd` (or here) with `env` (or this process's
    environment as it is now)."""

    def __init__(self, argv: list[str], log: Path | None = None, *, module: str = "mobilekd",
                 stderr: Path | None = None, env: dict | None = None, cwd: Path | None = None):
        self.argv = [str(a) for a in argv]
        env = dict(os.environ if env is None else env)
        for path in (log, stderr):  # made here, so that a run that never starts still leaves its (empty) files
            if path:
                open(path, "w").close()
        if forked():
            try:
                self.proc = _context().Process(target=_child, name=module,
                                               args=(module, self.argv, _path(log), _path(stderr), env, _path(cwd)))
                self.proc.start()
                return
            except (OSError, EOFError) as err:  # the server could not start (or died): a fresh process instead
                print(f"warning: mobilekd.launch: no fork server ({err}); starting a fresh process", file=sys.stderr)
        out = open(log, "w") if log else None
        err = open(stderr, "w") if stderr else None
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", module, *self.argv], env=env, cwd=cwd, stdout=out,
                                         stderr=err or (subprocess.STDOUT if out else None))
        finally:
            for f in (out, err):
                if f:
                    f.close()

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode if isinstance(self.proc, subprocess.Popen) else self.proc.exitcode

    def poll(self) -> int | None:
        if isinstance(self.proc, subprocess.Popen):
            self.proc.poll()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status; subprocess.TimeoutExpired (the run killed) if it has not ended within `timeout` s. A
        caller interrupted while waiting (Ctrl-C, a signal) kills the run first, as subprocess.run does."""
        try:
            if isinstance(self.proc, subprocess.Popen):
                return self.proc.wait(timeout)
            self.proc.join(timeout)
            if self.proc.exitcode is None:
                raise subprocess.TimeoutExpired([sys.executable, "-m", self.proc.name, *self.argv], timeout)
            return self.proc.exitcode
        except BaseException:
            if self.poll() is None:
                self.kill()
                if isinstance(self.proc, subprocess.Popen):
                    self.proc.wait()
                else:
                    self.proc.join()
            raise

    def terminate(self) -> None:
        self.proc.terminate()

    def kill(self) -> None:
        self.proc.kill()


def run(argv: list[str], log: Path | None = None) -> int:
    """Run `mobilekd *argv` to its end (its output to `log`, or to this process's stdout and stderr); its exit
    status."""
    return Run(argv, log).wait()


def _path(p) -> str | None:
    return str(p) if p else None


def _child(module: str, argv: list[str], log: str | None, stderr: str | None, env: dict, cwd: str | None) -> None:
    """The run, in the forked child, as `python -m module *argv` starts one: its output files, environment, working
    directory (first on sys.path) and argv; then the atexit handlers a normal exit runs (a multiprocessing child
    ends in os._exit, which skips them)."""
    for fd, path in ((1, log), (2, stderr)):
        if path:
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
    if log and not stderr:
        os.dup2(1, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # as Python's own stderr
    os.environ.clear()
    os.environ.update(env)
    # tqdm's bars share a lock that is by default a multiprocessing RLock: a named semaphore registered with the
    # resource tracker, which a forked child shares with its caller. A run killed mid-way (a trial cut short) never
    # unregisters it, and the caller's tracker reports it as leaked when the caller exits. A run's bars are one
    # process's: a thread lock serves them.
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())
    if cwd:
        os.chdir(cwd)
    sys.path.insert(0, os.getcwd())
    sys.argv = [module, *argv]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
