"""Print the pinned requirements of korvet's base and of the given extras (one per line), from
pyproject.toml, leaving out the self-references (``korvet[...]``). Used by scripts/setup.sh."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
wanted = list(project["dependencies"])
for extra in sys.argv[1:]:
    wanted += [r for r in project["optional-dependencies"][extra] if not r.startswith("korvet")]
print("\n".join(dict.fromkeys(wanted)))
