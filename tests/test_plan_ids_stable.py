"""Restructuring keeps every node id: the plan of the default experiment and of sweeps over every
precision, with code and package versions held fixed (they are meant to change ids when code
changes), compared with the ids recorded before precisions became objects (issue 41).

Regenerate only for a deliberate change of what a stage reads:
    python -m tests.test_plan_ids_stable > tests/data/plan_ids.json
"""

import json
from pathlib import Path

import pytest

from precisionflow.config.compose import expand
from precisionflow.pipeline import plan as planning

RECORDED = Path(__file__).parent / "data" / "plan_ids.json"
PLANS = {
    "default": ([], False),
    "every_precision": (["precisions=[fp32,fp16,int8,int8_qat,int8_mixed]"], False),
    "sweep": (["train.epochs=2,4", "precisions=[fp32,fp16,int8]", "int8.mixed_max_val_drop=null"], True),
    "mixed_by_count": (["precisions=[fp32,int8,int8_mixed]", "int8.mixed_max_val_drop=null", "int8.mixed_keep_fp=1,3"], True),
    "h200": (["experiment=h200", "precisions=[fp32,fp16,int8,int8_qat]"], False),
}


class FixedVersions(planning.PlanBuilder):
    """A planner whose code, package, runtime and device identity is a constant."""

    def code_and_packages(self, stage, params):
        return {"code": "fixed", "packages": {}}

    def runtime(self, backend, target_def):
        return {"backend_version": "fixed", "device": "fixed"}


def plan_ids(overrides, multirun):
    from precisionflow import identity
    from precisionflow import devices

    # What `local` reads of the planning machine is held fixed here: whether it has a GPU (the
    # default target's engine settings) and the TensorFlow versions compare_speed's id names (absent
    # where TensorFlow is not installed). The CPU's dot product is not read at planning (the int8
    # graph's maker reads it), so this machine's answer stands: the ids must not depend on it.
    fixed = {
        (devices, "has_nvidia_gpu"): lambda: False,
        (identity, "package_versions"): lambda packages: {name: "fixed" for name in sorted(packages)},
    }
    real = {key: getattr(*key) for key in fixed}
    try:
        for (module, name), replacement in fixed.items():
            setattr(module, name, replacement)
        return _plan_ids(overrides, multirun)
    finally:
        for (module, name), original in real.items():
            setattr(module, name, original)


def _plan_ids(overrides, multirun):
    builder = FixedVersions(versions={stage: "fixed" for stage in planning.STAGES})
    for point in expand(overrides, multirun):
        builder.add_point(point)
    return sorted(builder.nodes)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_node_id_is_the_recorded_one(name):
    recorded = json.loads(RECORDED.read_text())[name]
    found = plan_ids(*PLANS[name])
    assert found == recorded, {"new": sorted(set(found) - set(recorded)), "gone": sorted(set(recorded) - set(found))}


if __name__ == "__main__":
    print(json.dumps({name: plan_ids(*PLANS[name]) for name in sorted(PLANS)}, indent=1))
