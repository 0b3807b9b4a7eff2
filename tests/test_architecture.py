"""The rooms stand apart: read from the source's own import statements (top-level and inside
functions alike, since a node's id hashes the import closure of its stage).

- no stage module imports another stage module: what stages share lives in the library below;
- nothing outside precisionflow.stages imports a stage module except the top layer: the planner
  reaches a stage through `stage_module("<name>")`, which this reader counts as an import of that
  stage (an arrow down from the planner, visible here), and the runner by the planned node's stage;
- the library never imports the planning and execution layer (cli, plan, runner, remote, ...);
- no import cycles, between files or between folders: read a folder of the package (pipeline/,
  config/, reporting/, ...) as one room, and every arrow still runs one way (issue 41: schema,
  identity and assets stand on the ground, since the library reads them too).
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "precisionflow"
TOP_LAYER = {
    "precisionflow.cli",
    "precisionflow.pipeline.plan",
    "precisionflow.pipeline.runner",
    "precisionflow.pipeline.remote",
    "precisionflow.pipeline.software",
    "precisionflow.pipeline.why",
    "precisionflow.doctor",
    "precisionflow.starter",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


# Calls whose first argument names a stage: stage_module("report"), and the planner's one way of
# making a node, place_at("quantize_onnx", ...) / place(...) / add("prepare_dataset", ...).
STAGE_NAMING_CALLS = ("stage_module", "place_at", "place", "add")


def stage_calls(path: Path) -> set:
    """The stage modules a file reaches by name: a STAGE_NAMING_CALLS call with a literal name."""
    return {
        f"precisionflow.stages.{node.args[0].value}"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) in STAGE_NAMING_CALLS
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }


def imported(path: Path) -> set:
    """The package's modules this file imports anywhere in it."""
    found = stage_calls(path)  # stage_module("quantize_onnx"): an import by name
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:  # `from precisionflow.measure import speed` imports the module precisionflow.measure.speed
                child = f"{node.module}.{alias.name}"
                found.add(child if child in MODULES else node.module)
    return {name for name in found if name in MODULES}


GRAPH = {name: imported(path) - {name} for name, path in MODULES.items()}


def is_stage(name: str) -> bool:
    return name.startswith("precisionflow.stages.")


def test_the_import_reader_sees_imports_inside_functions_too():
    assert "precisionflow.measure.keras_runner" in GRAPH["precisionflow.stages.compare_speed"]  # imported inside a function
    assert "precisionflow.modeling.training" in GRAPH["precisionflow.stages.finetune_model"]


def test_no_stage_module_imports_another_stage_module():
    found = sorted((name, target) for name, targets in GRAPH.items() if is_stage(name) for target in targets if is_stage(target))
    assert found == [], "move what both need into the library layer (e.g. precisionflow/training.py): " + str(found)


def test_only_the_registry_and_the_top_layer_reach_stage_modules():
    found = sorted(
        (name, target)
        for name, targets in GRAPH.items()
        if not is_stage(name) and name != "precisionflow.stages" and name not in TOP_LAYER
        for target in targets
        if is_stage(target)
    )
    assert found == [], found


def test_the_reader_sees_the_planners_calls_of_stages_by_name():
    """The planner's stage_module("...") calls are arrows the reader follows (issue 41: a call by
    string name that no test could follow)."""
    called = stage_calls(MODULES["precisionflow.pipeline.plan"])
    assert {"precisionflow.stages.prepare_dataset", "precisionflow.stages.quantize_onnx", "precisionflow.stages.report"} <= called
    assert sorted(called - set(MODULES)) == []  # a misspelt stage name would be no arrow at all
    assert called <= GRAPH["precisionflow.pipeline.plan"]


def test_the_library_never_imports_the_planning_and_execution_layer():
    found = sorted(
        (name, target) for name, targets in GRAPH.items() if name not in TOP_LAYER for target in targets if target in TOP_LAYER
    )
    assert found == [], found


def test_there_are_no_import_cycles():
    cycles, state = [], {}

    def visit(name, path):
        state[name] = "open"
        for target in sorted(GRAPH[name]):
            if state.get(target) == "open":
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[name] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert cycles == [], cycles


def room(name: str) -> str:
    """The room a module stands in: its folder under the package (precisionflow.reporting), or
    itself for a module at the package's top (precisionflow.schema)."""
    return ".".join(name.split(".")[:2])


ROOMS = {}
for _name, _targets in GRAPH.items():
    ROOMS.setdefault(room(_name), set()).update(room(target) for target in _targets if room(target) != room(_name))


def rooms_in_a_circle(rooms) -> list:
    def reached(start):
        seen, todo = set(), [start]
        while todo:
            for target in rooms.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    return sorted(name for name in rooms if name in reached(name))


def test_the_folders_import_each_other_one_way_only():
    """A folder imports a lower one, never back: reporting/ reading a config key must not reach up to
    config/, which imports reporting/ to check a budget (the three arrows up of the fifth batch)."""
    found = rooms_in_a_circle(ROOMS)
    witnesses = sorted(
        (name, target)
        for name, targets in GRAPH.items()
        for target in targets
        if room(name) in found and room(target) in found and room(name) != room(target)
    )
    assert found == [], f"folders in a circle: {found}; the imports between them: {witnesses}"


def test_the_folder_reader_finds_a_circle_when_there_is_one():
    assert rooms_in_a_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c"]
    assert rooms_in_a_circle({"a": {"b"}, "b": set()}) == []
