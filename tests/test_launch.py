"""mobilekd/launch.py: a `mobilekd` run forked from a server of the heavy imports is still a run of its own (its
stopping mid-run: test_ship.py, the wall-limit cut)."""

import signal
import subprocess
import sys
import time

import pytest

from mobilekd import launch


def test_a_forked_run_has_its_own_output_and_status_as_a_fresh_process_has_and_skips_the_imports(tmp_path,
                                                                                                  monkeypatch):
    assert launch.run(["models"], tmp_path / "forked.log") == 0  # the server's imports, once
    begun = time.time()
    code = launch.run(["finetune", "--task", "sst2", "--model", str(tmp_path / "none")], tmp_path / "bad.log")
    forked_seconds = time.time() - begun
    lines = (tmp_path / "bad.log").read_text().strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and str(tmp_path / "none") in lines[0]
    assert forked_seconds < 4  # a fresh `python -m mobilekd finetune` imports for about 7 s before it reads a flag
    monkeypatch.setenv("MOBILEKD_FORK", "0")  # read as each run starts: a plain `python -m mobilekd`
    assert launch.run(["models"], tmp_path / "fresh.log") == 0
    assert (tmp_path / "fresh.log").read_text() == (tmp_path / "forked.log").read_text()
    assert "MobileBERT" in (tmp_path / "forked.log").read_text()


def test_a_run_is_killed_when_its_wait_times_out_or_is_interrupted(tmp_path):
    """As subprocess.run does: a caller that stops waiting (a timeout, Ctrl-C) leaves no run behind it."""
    sleeper = ["-n", "1", "import time; time.sleep(120)"]  # `python -m timeit`: a process that runs two minutes
    run = launch.Run(sleeper, tmp_path / "a.log", module="timeit")
    with pytest.raises(subprocess.TimeoutExpired):
        run.wait(timeout=1)
    assert run.returncode is not None and run.returncode < 0  # killed, not left running

    def interrupt(*_):
        raise KeyboardInterrupt

    run = launch.Run(sleeper, tmp_path / "b.log", module="timeit")
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        with pytest.raises(KeyboardInterrupt):
            run.wait()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert run.returncode is not None and run.returncode < 0



def test_a_run_killed_mid_way_leaves_its_caller_no_leaked_semaphore_to_report(tmp_path):
    """A trial cut short is killed mid-run; its progress bar's lock must not be a semaphore of the resource tracker
    it shares with its caller, or the caller (`mobilekd ship`) ends with "leaked semaphore objects" on stderr."""
    log = tmp_path / "bar.log"
    barred = ["-n", "1", "-s", "from tqdm import tqdm; bar = tqdm(total=3)", "import time; time.sleep(120)"]
    caller = "\n".join([
        "import time", "from mobilekd import launch",
        f"run = launch.Run({barred!r}, {str(log)!r}, module='timeit')",
        f"while run.poll() is None and '%' not in open({str(log)!r}).read(): time.sleep(0.2)",
        "run.kill(); run.wait()"])
    done = subprocess.run([sys.executable, "-c", caller], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "%" in log.read_text()  # the bar had started when the run was killed
    assert "leaked" not in done.stderr, done.stderr
