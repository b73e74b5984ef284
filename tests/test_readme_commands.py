"""Every command the README and the docs pages print runs as typed on a fresh clone: each script they name is
executable in git's index (a clone keeps only that bit), and each `python -m mobilekd VERB` and
`python -m benchmarks.NAME` they name exists and answers `--help` with exit 0."""

import re
import subprocess
import sys

from conftest import ROOT
from helpers import env

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)  # a fenced block: its language, its text
SCRIPT = re.compile(r"(?:^|[\s;&|(])((?:scripts|\.ci)/[\w./-]+)")
MODULE = re.compile(r"python -m (mobilekd(?: [a-z][\w-]*)?|benchmarks\.\w+)")


def commands() -> list[tuple[str, str]]:
    """(page, command line) for every line of every shell block in the pages, comments dropped."""
    found = []
    for page in PAGES:
        for language, block in BLOCK.findall(page.read_text(encoding="utf-8")):
            for line in block.splitlines() if language in ("bash", "sh", "") else ():
                line = line.split("#", 1)[0].strip()
                if line:
                    found.append((page.name, line))
    return found


def test_the_pages_print_the_two_commands_and_more():
    lines = [line for _, line in commands()]
    assert "scripts/demo.sh" in lines and "scripts/test.sh" in lines  # the README's two commands
    assert any(MODULE.search(line) for line in lines)


def test_every_script_a_page_names_is_executable_in_git():
    named = sorted({m for _, line in commands() for m in SCRIPT.findall(line)})
    assert "scripts/demo.sh" in named
    index = subprocess.run(["git", "ls-files", "-s", "--", *named], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    modes = {row.split()[3]: row.split()[0] for row in index}
    assert set(modes) == set(named), f"named but not in git: {set(named) - set(modes)}"
    assert all(mode == "100755" for mode in modes.values()), {p: m for p, m in modes.items() if m != "100755"}
    tests_calls = (ROOT / ".ci/run").read_text()
    assert "scripts/test.sh" in tests_calls and "bash scripts/test.sh" not in tests_calls  # CI runs it as printed


def test_every_module_a_page_names_answers_help():
    """One interpreter runs every `--help` (each as `python -m` would: run as __main__, its argv set)."""
    named = sorted({m for _, line in commands() for m in MODULE.findall(line)})
    assert any(m.startswith("benchmarks.") for m in named) and any(m.startswith("mobilekd ") for m in named)
    probe = """
import runpy, sys, io, contextlib
failed = []
for name in sys.argv[1:]:
    module, *verb = name.split(" ")
    sys.argv = [module, *verb, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code or 0
    except Exception as e:
        code = repr(e)
    if code != 0 or "usage" not in out.getvalue():
        failed.append(f"{name}: exit {code}")
print("\\n".join(failed))
"""
    proc = subprocess.run([sys.executable, "-c", probe, *named], cwd=ROOT, env=env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "", proc.stdout
