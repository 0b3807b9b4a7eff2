"""Where the files that travel inside the package live: the Hydra configuration (conf/), the
Snakemake workflow (workflow/Snakefile and its rules) and the executor profiles (profiles/).

They are package data, found next to this module whether precisionflow runs from a checkout
(src/precisionflow/...) or from an installed wheel (site-packages/precisionflow/...): nothing is
looked up relative to the current folder or the repository root. A user's own configuration
folder (`--config-dir`, or PRECISIONFLOW_CONFIG_DIR) is searched before the built-in one."""

import os
from importlib import resources
from pathlib import Path
from typing import List, Optional

from precisionflow.errors import ConfigError

USER_CONFIG_ENV = "PRECISIONFLOW_CONFIG_DIR"


def _packaged(name: str) -> Path:
    path = Path(str(resources.files("precisionflow") / name))
    if not path.exists():
        raise ConfigError(
            f"Expected precisionflow's packaged {name}/ at {path}, found nothing there: the installation "
            "is incomplete. Reinstall the package (pip install precisionflow-*.whl, or pip install -e . "
            "in a checkout)."
        )
    return path


def builtin_conf_dir() -> Path:
    return _packaged("conf")


def user_conf_dir() -> Optional[Path]:
    """The user's configuration folder named by --config-dir / PRECISIONFLOW_CONFIG_DIR, checked."""
    named = os.environ.get(USER_CONFIG_ENV)
    if not named:
        return None
    folder = Path(named).expanduser().resolve()
    if not folder.is_dir():
        raise ConfigError(
            f"--config-dir ({USER_CONFIG_ENV}): expected a folder of configuration groups "
            f"(dataset/, model/, experiment/, ...), found no folder at {folder}. Make one with "
            "`precisionflow init DIR`."
        )
    return folder


def conf_dirs() -> List[Path]:
    """The configuration folders, searched in this order: the user's (if any), then the built-in one."""
    user = user_conf_dir()
    return ([user] if user else []) + [builtin_conf_dir()]


def snakefile() -> Path:
    return _packaged("workflow") / "Snakefile"


def profiles_dir() -> Path:
    return _packaged("profiles")
