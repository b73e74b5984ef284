"""Our programs run as users run them, each in a process of its own, without paying for the same imports hundreds of
times: a server process (one per test worker) imports the heavy libraries every program imports (torch,
transformers, scipy, scikit-learn, accelerate; about 3.5 s a process) and nothing else, then forks a fresh child for
each run. The child is `python -m MODULE ARGS` from there on: its own process, argv, environment, working directory,
stdin (/dev/null), stdout and stderr (files the caller reads back) and exit status, atexit handlers run as at a
normal exit. A run whose environment differs from the server's in what is read at import time (thread counts,
paths) runs as a plain subprocess instead, as does one asked for while the server is busy.

Forking after those imports is safe because they start no thread (checked at start: the server refuses to serve
otherwise, and every run falls back to a subprocess).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

IMPORT_TIME = ("OMP_", "MKL_", "KMP_", "TORCH", "PYTHON", "HF_", "TOKENIZERS", "CUDA", "LD_", "TRANSFORMERS")

SERVER = r"""
import atexit, json, os, runpy, signal, sys, time, traceback
before = dict(os.environ)
import numpy, torch, transformers, tokenizers, safetensors.torch, accelerate, tqdm, scipy.stats, sklearn.metrics
from transformers import BertTokenizerFast

threads = len(os.listdir("/proc/self/task"))
REPLY = int(sys.argv[1])
reply = os.fdopen(REPLY, "w", buffering=1)
added = {k: v for k, v in os.environ.items() if k not in before}  # scikit-learn's KMP_* setdefaults
reply.write(json.dumps({"ready": threads == 1, "threads": threads, "added": added}) + "\n")


def child(req):
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    os.close(REPLY)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    sys.argv = [req["module"], *req["args"]]
    code = 0
    try:
        runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code & 0xFF)


for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        child(req)
    deadline = time.monotonic() + req["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            reply.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
            break
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            reply.write(json.dumps({"timeout": True}) + "\n")
            break
        time.sleep(0.005)
"""


def _import_time(env: dict) -> dict:
    """What of an environment the imports read (and the server's children therefore share)."""
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME)}


class ForkServer:
    def __init__(self, env: dict, cwd: Path):
        self.lock = threading.Lock()
        read, write = os.pipe()
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, str(write)], stdin=subprocess.PIPE, env=env,
                                     cwd=cwd, pass_fds=(write,), text=True, stdout=subprocess.DEVNULL)
        os.close(write)
        self.replies = os.fdopen(read, "r")
        first = json.loads(self.replies.readline() or "{}")
        self.ready, self.added = first.get("ready", False), first.get("added", {})
        self.fixed = self._import_time(env)

    def _import_time(self, env: dict) -> dict:
        """`env`'s import-time part as the server's children see it: with what the server's own imports set by
        default (scikit-learn sets KMP_DUPLICATE_LIB_OK and KMP_INIT_AT_FORK in os.environ when imported, so a test
        process's environment gains them once any test imports it, and a plain subprocess would set them too)."""
        return _import_time({**self.added, **env})

    def serves(self, env: dict) -> bool:
        return self.ready and self.proc.poll() is None and self._import_time(env) == self.fixed

    def run(self, module: str, args: list[str], env: dict, cwd: Path, timeout: float):
        """`python -m module args` in a child of the server; None if the server cannot take it now."""
        if not self.serves(env) or not self.lock.acquire(blocking=False):
            return None
        try:
            with tempfile.TemporaryDirectory() as work:
                out, err = Path(work) / "stdout", Path(work) / "stderr"
                self.proc.stdin.write(json.dumps({"module": module, "args": args, "env": env, "cwd": str(cwd),
                                                  "stdout": str(out), "stderr": str(err), "timeout": timeout})
                                      + "\n")
                self.proc.stdin.flush()
                answer = self.replies.readline()
                if not answer:
                    self.ready = False
                    raise RuntimeError("the test fork server died")
                reply = json.loads(answer)
                argv = [sys.executable, "-m", module, *args]
                if reply.get("timeout"):
                    raise subprocess.TimeoutExpired(argv, timeout, out.read_text(errors="replace"),
                                                    err.read_text(errors="replace"))
                return subprocess.CompletedProcess(argv, reply["status"], out.read_text(errors="replace"),
                                                   err.read_text(errors="replace"))
        finally:
            self.lock.release()


_server: ForkServer | None = None


def run(module: str, args: list[str], env: dict, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    """`python -m module args` as a user runs it, forked from this worker's server where it can be."""
    global _server
    if _server is None and os.environ.get("MOBILEKD_TEST_FORK", "1") != "0":
        _server = ForkServer(env, cwd)
    done = _server.run(module, args, env, cwd, timeout) if _server else None
    if done is not None:
        return done
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout)
