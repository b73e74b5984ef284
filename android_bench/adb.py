"""Measured on a phone: TFLite's official `benchmark_model` over adb, with the paper's settings.

    mobilekd adb --model model.tflite --benchmark-binary ~/android/benchmark_model   (mobilekd/recipes/adb.py)

Pushes the model and the binary (an android_aarch64 `benchmark_model` build you supply) to /data/local/tmp, pins
the run to the fastest online cores with `taskset` (their mask read from the kernel's online list and each core's
cpufreq), runs it at 4 threads with XNNPACK and op profiling, and parses average, median and standard deviation
plus the time per op type. Records the phone's model and SoC. Every command is an argument list; nothing from the
user is put into a shell string (remote file names are fixed).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from mobilekd.errors import UserError

REMOTE_DIR = "/data/local/tmp/mobilekd"
CPU_DIR = "/sys/devices/system/cpu"
TIMEOUT_S = 900
_RUN = re.compile(r"count=(\d+) first=\S+ curr=\S+ min=(\S+) max=(\S+) avg=(\S+) std=(\S+)"
                  r"(?: p5=(\S+) median=(\S+) p95=(\S+))?")
_INIT_NEW = re.compile(r"Inference timings in us: Init: (\S+), First inference: (\S+), Warmup \(avg\): (\S+), "
                       r"Inference \(avg\): (\S+)")
_INIT_OLD = re.compile(r"Average inference timings in us: Warmup: (\S+), Init: (\S+), Inference: (\S+)")
_MEMORY = re.compile(r"(?:Memory footprint delta from the start of the tool|Peak memory footprint) \(MB\): "
                     r"init=(\S+) overall=(\S+)")


def parse_benchmark_output(text: str) -> dict:
    """Timings (ms) and the per-op-type profile from `benchmark_model`'s output (old and current formats)."""
    runs = list(_RUN.finditer(text))  # warm-up lines have no first=/avg=, so these are the timed runs
    if not runs:
        raise UserError("benchmark_model output has no timing line (count=... avg=... std=...)")
    timed = runs[-1]

    def to_ms(microseconds: str) -> float:
        return float(microseconds) / 1000

    result = {"count": int(timed.group(1)), "min_ms": to_ms(timed.group(2)), "max_ms": to_ms(timed.group(3)),
              "avg_ms": to_ms(timed.group(4)), "std_ms": to_ms(timed.group(5)),
              "p50_ms": to_ms(timed.group(7)) if timed.group(7) else None}
    if m := _INIT_NEW.search(text):
        result["init_ms"], result["first_ms"] = to_ms(m.group(1)), to_ms(m.group(2))
    elif m := _INIT_OLD.search(text):
        result["init_ms"] = to_ms(m.group(2))
    if m := _MEMORY.search(text):
        result["memory_mb"] = {"init": float(m.group(1)), "overall": float(m.group(2))}
    result["by_node_type"] = _node_type_summary(text)
    return result


def _node_type_summary(text: str) -> dict:
    """Rows of the 'Summary by node type' table: type -> count, avg ms, share of the time."""
    if "Summary by node type" not in text:
        return {}
    rows = {}
    for line in text.split("Summary by node type", 1)[1].splitlines()[2:]:
        fields = line.split()
        if len(fields) < 4 or not fields[1].isdigit():
            break
        rows[fields[0]] = {"count": int(fields[1]), "avg_ms": float(fields[2]),
                           "percent": float(fields[3].rstrip("%"))}
    return rows


def parse_cpu_list(text: str) -> list[int]:
    """CPU numbers from the kernel's list format, as /sys/devices/system/cpu/online has it ("0-4,6-7")."""
    cpus = []
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        if not (first.isdigit() and (last.isdigit() or not last)):
            raise UserError(f"{CPU_DIR}/online: not a CPU list: {text.strip()!r}")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


class Phone:
    """One attached device, reached through `adb` (argument lists only)."""

    def __init__(self, adb: str = "adb", serial: str | None = None):
        found = shutil.which(adb)
        if not found:
            raise UserError(f"{adb}: not found (install Android platform-tools, or pass --adb PATH)")
        self.adb = [found] + (["-s", serial] if serial else [])
        devices = [line.split()[0] for line in self._run(["devices"]).splitlines()[1:]
                   if line.strip().endswith("device")]
        if not devices:
            raise UserError("no Android device attached (adb devices lists none ready)")
        if serial is None and len(devices) > 1:
            raise UserError(f"{len(devices)} devices attached ({', '.join(devices)}); pass --serial")

    def _run(self, args: list[str], check: bool = True) -> str:
        try:
            proc = subprocess.run(self.adb + args, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise UserError(f"adb {' '.join(args[:2])}: no answer in {TIMEOUT_S} s") from None
        if check and proc.returncode != 0:
            said = " | ".join(line.strip() for line in (proc.stderr or proc.stdout).splitlines() if line.strip())
            raise UserError(f"adb {' '.join(args[:2])} failed: {said[-300:] or f'exit code {proc.returncode}'}")
        return proc.stdout

    def shell(self, *args: str) -> str:
        return self._run(["shell", *args])

    def info(self) -> dict:
        def prop(key: str) -> str:
            return self.shell("getprop", key).strip()

        return {"model": prop("ro.product.model"), "soc": prop("ro.soc.model") or prop("ro.board.platform"),
                "manufacturer": prop("ro.soc.manufacturer"), "abi": prop("ro.product.cpu.abi"),
                "android": prop("ro.build.version.release")}

    def fastest_cores_mask(self, threads: int) -> str:
        """Hex affinity mask (bit n: CPU n) of the `threads` online cores with the highest maximum frequency, ties
        to the lower CPU number. Offline cores are left out (their cpufreq may be gone, and taskset cannot use
        them), as is a core whose maximum frequency cannot be read."""
        online = parse_cpu_list(self.shell("cat", f"{CPU_DIR}/online"))
        freqs = {}
        for cpu in online:
            khz = self._run(["shell", "cat", f"{CPU_DIR}/cpu{cpu}/cpufreq/cpuinfo_max_freq"], check=False).strip()
            if khz.isdigit():
                freqs[cpu] = int(khz)
        if not freqs:
            raise UserError(f"the phone reports no online core's maximum frequency "
                            f"({CPU_DIR}/cpuN/cpufreq/cpuinfo_max_freq), so the fastest cores are unknown")
        chosen = sorted(freqs, key=lambda cpu: (-freqs[cpu], cpu))[:threads]
        return format(sum(1 << cpu for cpu in chosen), "x")

    def push(self, local: Path, remote: str) -> None:
        self._run(["push", str(local), remote])


def run_on_phone(model: Path, binary: Path, phone: Phone, threads: int = 4, runs: int = 50) -> dict:
    """The paper's setting: `threads` threads on the fastest cores, XNNPACK, op profiling."""
    remote_model, remote_binary = f"{REMOTE_DIR}/model.tflite", f"{REMOTE_DIR}/benchmark_model"
    phone.shell("mkdir", "-p", REMOTE_DIR)
    phone.push(model, remote_model)
    phone.push(binary, remote_binary)
    phone.shell("chmod", "755", remote_binary)
    mask = phone.fastest_cores_mask(threads)
    output = phone.shell("taskset", mask, remote_binary, f"--graph={remote_model}", f"--num_threads={threads}",
                         "--use_xnnpack=true", f"--num_runs={runs}", "--warmup_runs=5", "--enable_op_profiling=true")
    return {"device": phone.info(), "threads": threads, "affinity_mask": mask, "model": str(model),
            **parse_benchmark_output(output)}
