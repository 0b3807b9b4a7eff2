"""Write workflow/envs/*.yaml, the conda environment of each kind of stage, from requirements.lock
(src/precisionflow/pipeline/software.py says which packages each holds). `--check` says whether the
committed files are current; CI and tests/test_stage_envs.py run it.

    .venv/bin/python tools/stage_envs.py [--check]
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    from generated_page import write_or_check
    from precisionflow.pipeline import software

    pins = software.read_lock(ROOT / "requirements.lock")
    failed = 0
    for env in software.ENV_FILES:
        text = software.environment_text(env, pins)
        failed |= write_or_check(
            ROOT / "workflow" / "envs" / f"{env}.yaml", text, "tools/stage_envs.py", f"{len(software.packages(env))} packages"
        )
    return failed


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
