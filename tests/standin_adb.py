"""A stand-in `adb` for the tests: answers as one attached phone would, described by a dict (`PIXEL_4`).

`install(directory, phone)` writes `directory/bin/adb` (put that folder first on PATH) and the phone's state; each
call appends its argv to `directory/calls.jsonl`, and pushed files land under `directory/device/` at their remote
path. It knows the commands `mobilekd adb` sends and refuses any other, as a phone refuses a wrong command:
`devices`; `push`; `shell getprop KEY`; `shell cat FILE...` (sysfs files; an absent one is an error, exit 1, as
`cat` has it); `shell mkdir -p`, `shell chmod`; and `shell taskset MASK BINARY --graph=MODEL ...`, which fails as
taskset does for a mask of no online core and as the shell does for a binary not pushed or not executable, and
otherwise prints the real `benchmark_model` output the phone names.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "data" / "benchmark_model"

# Pixel 4 (Snapdragon 855, SM8150): four 1.79 GHz cores, three at 2.42 GHz and one at 2.84 GHz; cpu5 is offline
# (hot-unplugged), so its cpufreq files are absent and the kernel's online list skips it.
PIXEL_4 = {
    "serial": "STANDIN0001",
    "state": "device",
    "props": {"ro.product.model": "Pixel 4", "ro.soc.model": "SM8150", "ro.soc.manufacturer": "QTI",
              "ro.board.platform": "msmnile", "ro.product.cpu.abi": "arm64-v8a", "ro.build.version.release": "13"},
    "max_freq_khz": [1785600] * 4 + [2419200] * 3 + [2841600],
    "offline": [5],
    "benchmark_output": str(FIXTURES / "ti_am62x_cpu.txt"),
    "benchmark_error": None,  # a line the benchmark run prints to stderr before failing, as a phone dropping would
}


def install(directory: Path, phone: dict) -> Path:
    """Write the stand-in for `phone` under `directory`; return the folder holding `adb`."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True)
    (directory / "device").mkdir()
    (directory / "phone.json").write_text(json.dumps(phone))
    adb = bin_dir / "adb"
    adb.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))} "
                   f"{shlex.quote(str(directory))} \"$@\"\n")
    adb.chmod(0o755)
    return bin_dir


def calls(directory: Path) -> list[list[str]]:
    """Every argv the stand-in received, in order."""
    path = directory / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def online_list(phone: dict) -> str:
    """The kernel's list format of the online CPUs ("0-4,6-7")."""
    online = [cpu for cpu in range(len(phone["max_freq_khz"])) if cpu not in phone["offline"]]
    runs = []
    for cpu in online:
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in runs)


def sysfs(phone: dict) -> dict[str, str]:
    cpus = len(phone["max_freq_khz"])
    files = {"/sys/devices/system/cpu/online": online_list(phone), "/sys/devices/system/cpu/present": f"0-{cpus - 1}"}
    for cpu, khz in enumerate(phone["max_freq_khz"]):
        if cpu not in phone["offline"]:
            files[f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/cpuinfo_max_freq"] = str(khz)
    return files


def fail(message: str, code: int = 1):
    print(message, file=sys.stderr)
    sys.exit(code)


def shell(phone: dict, device: Path, args: list[str]) -> None:
    def on_device(remote: str) -> Path:
        return device / remote.lstrip("/")

    command, rest = args[0], args[1:]
    if command == "getprop" and len(rest) == 1:
        print(phone["props"].get(rest[0], ""))
    elif command == "cat":
        files, missing = sysfs(phone), False
        for name in rest:
            if name in files:
                print(files[name])
            else:
                print(f"cat: {name}: No such file or directory", file=sys.stderr)
                missing = True
        sys.exit(1 if missing else 0)
    elif command == "mkdir" and rest[:1] == ["-p"]:
        for name in rest[1:]:
            on_device(name).mkdir(parents=True, exist_ok=True)
    elif command == "chmod" and len(rest) == 2:
        if not on_device(rest[1]).exists():
            fail(f"chmod: {rest[1]}: No such file or directory")
        on_device(rest[1]).chmod(int(rest[0], 8))
    elif command == "taskset" and len(rest) >= 2:
        mask, binary, flags = int(rest[0], 16), on_device(rest[1]), rest[2:]
        online = [cpu for cpu in range(len(phone["max_freq_khz"])) if cpu not in phone["offline"]]
        if not any(mask >> cpu & 1 for cpu in online):
            fail("taskset: sched_setaffinity: Invalid argument")
        if not binary.exists():
            fail(f"/system/bin/sh: {rest[1]}: inaccessible or not found", 127)
        if not os.access(binary, os.X_OK):
            fail(f"/system/bin/sh: {rest[1]}: can't execute: Permission denied", 126)
        graph = next((f.split("=", 1)[1] for f in flags if f.startswith("--graph=")), None)
        if graph is None or not on_device(graph).exists():
            fail(f"ERROR: Could not open '{graph}'.")
        if phone["benchmark_error"]:
            fail(phone["benchmark_error"])
        print(Path(phone["benchmark_output"]).read_text(), end="")
    else:
        fail(f"standin adb: unsupported shell command {args}")


def main(directory: Path, argv: list[str]) -> None:
    phone = json.loads((directory / "phone.json").read_text())
    with open(directory / "calls.jsonl", "a") as log:
        log.write(json.dumps(argv) + "\n")
    if argv[:1] == ["-s"]:
        if argv[1] != phone["serial"]:
            fail(f"adb: device '{argv[1]}' not found")
        argv = argv[2:]
    if argv == ["devices"]:
        print(f"List of devices attached\n{phone['serial']}\t{phone['state']}\n")
        return
    if phone["state"] != "device":
        fail(f"adb: device {phone['state']}")
    if argv[:1] == ["push"] and len(argv) == 3:
        local, remote = Path(argv[1]), directory / "device" / argv[2].lstrip("/")
        if not local.is_file():
            fail(f"adb: error: cannot stat '{local}': No such file or directory")
        remote.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, remote)
        print(f"{local}: 1 file pushed, 0 skipped.")
    elif argv[:1] == ["shell"] and len(argv) > 1:
        shell(phone, directory / "device", argv[1:])
    else:
        fail(f"standin adb: unsupported command {argv}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
