"""Where the files the program runs from live: the Hydra configuration (conf/), the Snakemake
workflow (workflow/Snakefile and its rules) and the executor profiles (profiles/).

In a checkout, conf/ and workflow/ stand at the repository's top level, where Hydra and Snakemake
users look for them; the wheel maps them into the package at build time (setup.py), so an installed
precisionflow finds them next to this module. One source of truth, two places it is read from:
never the current folder. A user's own configuration folder (`--config-dir`, or
PRECISIONFLOW_CONFIG_DIR) is searched before the built-in one."""

import os
from importlib import resources
from pathlib import Path
from typing import List, Optional

from precisionflow.errors import ConfigError

USER_CONFIG_ENV = "PRECISIONFLOW_CONFIG_DIR"


CHECKOUT_ROOT = Path(__file__).resolve().parents[2]  # src/precisionflow/assets.py -> the repository


def _packaged(name: str) -> Path:
    """`name` inside the installed package (a wheel), else at the top of the checkout this module runs from."""
    packaged = Path(str(resources.files("precisionflow") / name))
    for path in (packaged, CHECKOUT_ROOT / name):
        if path.exists():
            return path
    raise ConfigError(
        f"Expected precisionflow's {name}/ in the package ({packaged}) or at the top of its checkout "
        f"({CHECKOUT_ROOT / name}), found neither: the installation is incomplete. Reinstall the package "
        "(pip install precisionflow-*.whl, or pip install -e . in a checkout)."
    )


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
