"""Sweep points -> content-addressed stage nodes -> one plan file for one Snakemake DAG.

A node's id is `<readable slug>-<hash>`. The hash covers exactly what the stage reads:
  * the parameters it declares (each stage module's `node_params(NodeContext)`: nothing else of the config),
  * its upstream node ids (which cover their own inputs in turn),
  * the content of the files it opens outside the results folder (model files, image folders),
  * the versions of the packages it calls (`PACKAGES`; engine and timing stages also carry the
    backend version and the device in their params),
  * its code: the hash of its module's import closure (identity.py).
Scheduler resources and pure thresholds (`limits`) travel with the node but stay out of the hash:
a changed threshold re-checks the existing node (precisionflow run does, before anything runs),
a changed resource only moves where the job runs.

Every node is made one way (PlanBuilder.place_at): the stage's reads, its inputs by the roles
flow.py declares, its readable name by the table's slug. What the planner itself decides is the
shape of a point's chain -- which model, which graphs the precisions need (a QAT fine-tune, a
calibration, the precision a mix builds on), one engine per target -- and the measurements are
placed by walking the table (place_measurements).

Sweep points that share a prefix therefore share nodes (a sweep over precisions trains once),
flipping a parameter back finds the old outputs, and editing a module gives new ids to exactly
the stages whose code imports it, and to their downstream.
"""

import hashlib
import importlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from precisionflow import precisions
from precisionflow import identity
from precisionflow.quant import qdq
from precisionflow.records import SIMULATES, TWIN_OF
from precisionflow.backends import READ_WHERE_BUILT
from precisionflow.budgets import budget_for
from precisionflow.reporting.budget import resolution_warning
from precisionflow.pipeline import flow
from precisionflow.errors import ConfigError
from precisionflow.stages import NodeContext

STAGES = tuple(stage.name for stage in flow.STAGES)  # in the order of the stage graph
TENSORRT = (qdq.TENSORRT, "")  # the TensorRT placement (PlanBuilder.placement): no CPU to name


@dataclass
class Node:
    stage: str
    id: str
    params: Dict[str, Any]
    inputs: Dict[str, str] = field(default_factory=dict)  # role -> upstream node key
    identity: Dict[str, Any] = field(default_factory=dict)  # code version and package versions hashed
    limits: Dict[str, Any] = field(default_factory=dict)  # thresholds checked against the summary; not hashed
    resources: Dict[str, Any] = field(default_factory=dict)  # scheduler resources; not hashed

    @property
    def key(self) -> str:
        return f"{self.stage}/{self.id}"

    def to_json(self) -> Dict[str, Any]:
        return {
            "stage": self.stage,
            "id": self.id,
            "params": self.params,
            "inputs": self.inputs,
            "identity": self.identity,
            "limits": self.limits,
            "resources": self.resources,
            # it runs an engine (flow.Stage.gpu): the runner holds a GPU slot for it where its target
            # runs on one (gpuslots), without importing the stage table into every node's code
            "runs_engine": flow.BY_NAME[self.stage].gpu if self.stage in flow.BY_NAME else False,
        }


def stage_module(stage: str):
    return importlib.import_module(f"precisionflow.stages.{stage}")


def code_hash_per_stage() -> Dict[str, str]:
    """Hash of each stage's import closure, read once per plan."""
    return {stage: identity.code_hash(stage) for stage in STAGES}


def stage_code_and_packages(stage: str, versions: Dict[str, str]) -> Dict[str, Any]:
    return {"code": versions[stage], "packages": identity.package_versions(getattr(stage_module(stage), "PACKAGES", ()))}


def _slugify(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "-", text).strip("-")[:60] or "node"


class PlanBuilder:
    """Collects unique nodes across all sweep points."""

    def __init__(self, versions: Optional[Dict[str, str]] = None, cache_dir: Optional[Path] = None):
        self.versions = versions or code_hash_per_stage()
        self.identities = {stage: stage_code_and_packages(stage, self.versions) for stage in STAGES}
        self.nodes: Dict[str, Node] = {}
        self.cache_dir = cache_dir
        self.fingerprints: Dict[str, str] = {}
        self.file_hashes: Dict[str, str] = {}
        self.warned: set = set()
        self.runtimes: Dict[tuple, Dict[str, str]] = {}
        self.stage_resources: Dict[str, Dict[str, Any]] = {}
        self.data_facts: Dict[str, Any] = {}
        self.backend_versions: Dict[str, str] = {}

    def runtime(self, backend: str, target_def: Dict[str, Any]) -> Dict[str, str]:
        """The runtime an engine is built (or a model timed) with: part of the id, so upgrading the
        backend or moving to another machine builds new engines instead of failing on the old ones."""
        from precisionflow.devices import local_device_name

        # A cluster/GPU-node target names its engine backend's version there; TensorFlow's is this
        # machine's. A named target that declares none builds with whatever version its machine has,
        # read and recorded there (engine.json): this machine's installed version never enters its id,
        # so a plan made on a login node without ONNX Runtime is the plan the GPU node would make.
        declared = target_def.get("backend_version") if backend != "tensorflow" else ""
        if not declared and backend != "tensorflow" and target_def["device"] != "auto":
            declared = READ_WHERE_BUILT
        key = (backend, target_def["device"], target_def.get("expect_device") or "", declared or "")
        if key not in self.runtimes:
            # A named target's device is what it declares (expect_device, else its kind: "cuda" or
            # "cpu"), so a plan made on a login node without a GPU gives the ids the GPU node would
            # give; only `auto` (the default `local`: the machine that plans and runs) reads this machine.
            declared_device = target_def.get("expect_device") or (target_def["device"] if target_def["device"] != "auto" else "")
            device = declared_device or local_device_name(target_def["device"])
            self.runtimes[key] = {"backend_version": declared or identity.installed_version(backend), "device": device}
        return self.runtimes[key]

    def data_params(self, cfg: Dict[str, Any]) -> Dict[str, Any]:
        """The data set's declared settings, plus a content fingerprint for folder data sets."""
        at = NodeContext(cfg)
        params = stage_module("prepare_dataset").node_params(at)
        if params["name"] not in ("image_folder", "coco_folder"):
            return params
        from precisionflow import data_splits as splits
        from precisionflow.datasets import image_folder

        root = str(Path(params["path"]).expanduser().resolve())
        if params.get("conditions"):  # a relative sidecar: the current folder, else beside the data folder, else in it
            from precisionflow.datasets import conditions

            params = {**params, "conditions": str(conditions.sidecar_path(params["conditions"], root))}
        if root not in self.fingerprints:
            splits.check_folder(params)  # a broken folder fails here, before any job
        if params.get("conditions"):  # the sidecar's tags, checked against the folder before anything is written
            splits.folder_conditions(params)
        if root not in self.fingerprints:
            cache = (self.cache_dir or Path(root)) / "fingerprints.json"
            self.fingerprints[root] = image_folder.fingerprint(Path(root), cache)
        params = {**params, "path": root, "fingerprint": self.fingerprints[root]}
        if params.get("conditions"):  # its content is in the id
            sidecar = str(Path(params["conditions"]).expanduser().resolve())
            params.update({"conditions": sidecar, "conditions_sha256": identity.path_sha256(Path(sidecar))})
        return params

    def warn_once(self, warning: Optional[str]) -> None:
        """Print a planning warning once per plan, however many nodes share its cause."""
        if warning and warning not in self.warned:
            self.warned.add(warning)
            print(warning, file=sys.stderr)

    def facts(self, data: Node):
        """What the data node will hold (datasets.facts.DataFacts), stated by its stage once per plan."""
        if data.key not in self.data_facts:
            from precisionflow import data_splits as splits

            self.data_facts[data.key] = splits.facts(data.params)
        return self.data_facts[data.key]

    def split_sizes(self, data: Node) -> Dict[str, int]:
        return self.facts(data).split_sizes

    def model_files(self, model: Dict[str, Any]) -> Dict[str, str]:
        """{path: content sha256} of the files a model builder opens (user model, local weights)."""
        from precisionflow.modeling.models import FILE_KEYS

        found = {}
        for key in FILE_KEYS:
            if model.get(key):
                path = str(Path(model[key]).expanduser().resolve())
                if path not in self.file_hashes:
                    self.file_hashes[path] = identity.path_sha256(Path(path)) if Path(path).exists() else "missing"
                found[path] = self.file_hashes[path]
        return found

    def code_and_packages(self, stage: str, params: Dict[str, Any]) -> Dict[str, Any]:
        """The stage's code version and packages; an engine stage's covers only its own backend, a
        node of a precision its own precision's module (never the other precisions')."""
        backend, precision = identity.node_backend(params), params.get("precision")
        if backend is None and precision is None:
            return self.identities[stage]
        key = f"{stage}@{backend}@{precision}"
        if key not in self.backend_versions:
            self.backend_versions[key] = identity.code_hash(stage, identity.node_source_hashes(stage, params))
        return {**self.identities[stage], "code": self.backend_versions[key]}

    def add(
        self,
        stage: str,
        slug: str,
        params: Dict[str, Any],
        inputs: Dict[str, Node],
        resources: Optional[Dict[str, Any]] = None,
        at: Optional[NodeContext] = None,
    ) -> Node:
        """A node of `stage`, read at `at`: the stage contract's optional parts are called here for
        every stage that has them -- preflight(at, the data node's facts) before the node exists,
        limits(at) for the thresholds kept beside its id."""
        resources = {**self.stage_resources.get(stage, {}), **(resources or {})}  # never hashed
        module = stage_module(stage)
        if at is not None and hasattr(module, "preflight") and "data" in inputs:
            for warning in module.preflight(at, self.facts(inputs["data"])):
                self.warn_once(warning)
        limits = module.limits(at) if at is not None and hasattr(module, "limits") else None
        for role, node in inputs.items():
            flow.check_edge(stage, role, node.stage)
        input_keys = {role: node.key for role, node in sorted(inputs.items())}
        code = self.code_and_packages(stage, params)
        hashed = {"stage": stage, "params": params, "inputs": input_keys, **code}
        digest = hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:12]
        node = Node(stage, f"{_slugify(slug)}-{digest}", params, input_keys, code, limits or {}, resources or {})
        self.nodes.setdefault(node.key, node)
        return self.nodes[node.key]

    def add_point(self, cfg: Dict[str, Any]) -> List[Node]:
        """Add one configuration's chain; return its measured nodes (evaluations, ratios, baselines)."""
        self.stage_resources = cfg.get("stage_resources") or {}
        data = self.add("prepare_dataset", cfg["dataset"]["name"], self.data_params(cfg), {}, at=NodeContext(cfg))
        model = trained = self.place_at("train_model", NodeContext(cfg), {"data": data})
        if cfg["prune"]["method"] != "none":  # the QAT branch starts from the pruned model too
            model = trained = self.place_at("prune_model", NodeContext(cfg), {"model": model, "data": data})
        if cfg["finetune"]["mode"] != "none":
            model = self._add_finetune(cfg, cfg["finetune"], model, data)
        onnx = self._add_export(cfg, model, data)
        placements = {target: self.placement(cfg, target) for target in cfg["targets"]}
        graphs: Dict[tuple, Node] = {}  # (precision, placement: placement-dependent ones only) -> graph
        for precision in cfg["precisions"]:  # a precision may build on an earlier one's graph (int8_mixed: int8's report)
            for placement in sorted(set(placements.values())) if precisions.get(precision).graph.per_placement else [None]:
                graphs[(precision, placement)] = self._add_graph(cfg, precision, onnx, data, graphs, trained, placement)
        graph_of = {
            (p, t): graphs[(p, placements[t] if precisions.get(p).graph.per_placement else None)]
            for p in cfg["precisions"]
            for t in cfg["targets"]
        }
        engines = {key: self._add_engine(cfg, graph, key[1]) for key, graph in graph_of.items()}
        reference = precisions.reference().name
        measured = []
        for precision in cfg["precisions"]:  # int8_qat's fair reference: its fine-tune, run in fp32
            if precisions.get(precision).judging.against_twin:
                measured += self._add_qat_twin(cfg, trained, graph_of[(precision, cfg["targets"][0])], onnx, data)
        for (precision, target), engine in engines.items():
            # Every engine is compared with the same fp32 reference: the main path's exported model.
            available = {
                "engine": engine,
                "data": data,
                "reference": onnx,
                **self.trained_model_of(precision, graph_of[(precision, target)]),
            }
            if engines[(reference, target)].key != engine.key:
                available["fp32_engine"] = engines[(reference, target)]
            if cfg["target_defs"][target]["framework"]:
                available["model"] = model
            measured += self.place_measurements(cfg, "engine", target, available, precision)
            simulated = precisions.get(precision).tensorrt.simulated_on_cpu and cfg["int8"]["simulate_tensorrt"]
            if simulated and placements[target] != TENSORRT:
                measured.append(self._add_tensorrt_simulation(cfg, precision, target, onnx, data, graphs, trained))
        for target in cfg["targets"]:
            measured += self.place_measurements(cfg, "target", target, {"model": model, "data": data})
        return measured

    def place_measurements(
        self, cfg, each: str, target: str, available: Dict[str, Node], precision: Optional[str] = None
    ) -> List[Node]:
        """The generic walk over the flow table's measurements: every stage placed per engine (or per
        target) whose switch is on, fed what it declares of `available` -- a new measuring stage is a row
        in flow.STAGES and its module, nothing here."""
        return [
            self.place_on_target(stage.name, cfg, target, available, precision)
            for stage in flow.measurements(each)
            if flow.switched_on(stage, cfg, target)
        ]

    def place_on_target(
        self, stage: str, cfg, target: str, available: Dict[str, Node], precision=None, slug="", extra=None
    ) -> Node:
        """A node of a stage that runs on a target (an engine, a measurement): read there, with the
        runtime it runs on and the target's scheduler resources."""
        row = flow.BY_NAME[stage]
        runtime, resources = self._device(cfg, target, row.backend or cfg["engine"]["backend"])
        return self.place_at(stage, NodeContext(cfg, target, runtime, precision), available, slug, resources, extra)

    def place_at(self, stage: str, at: NodeContext, available: Dict[str, Node], slug="", resources=None, extra=None) -> Node:
        """The one way a stage's node is made: its params what the stage reads at `at` (plus `extra`,
        plus the content of the files a model spec opens), its inputs the roles flow.py declares for
        it taken from `available`, its readable name the table's (unless `slug` names it)."""
        row = flow.BY_NAME[stage]
        params = {**stage_module(stage).node_params(at), **(extra or {})}
        if isinstance(params.get("model"), dict):  # a model is built from these files: their content is in the id
            params["model"]["files"] = self.model_files(params["model"])
        inputs = {role: node for role, node in available.items() if flow.edge_kind(stage, role) in row.inputs}
        flow.check_roles(stage, inputs)
        upstream = {role: node.id.rsplit("-", 1)[0] for role, node in inputs.items()}
        return self.add(stage, slug or row.slug(params, at, upstream), params, inputs, resources=resources, at=at)

    def trained_model_of(self, precision: str, graph: Node) -> Dict[str, Node]:
        """A precision deployed as it was trained (int8_qat) is also compared with that model itself:
        the export its graph was made from, and the fine-tune behind it."""
        if not precisions.get(precision).judging.against_trained_model:
            return {}
        qat_export = self.nodes[graph.inputs["onnx"]]
        return {"qat_export": qat_export, "qat_model": self.nodes[qat_export.inputs["model"]]}

    def _device(self, cfg, target: str, backend: str) -> Tuple[Dict[str, str], Dict[str, Any]]:
        target_def = cfg["target_defs"][target]
        return self.runtime(backend, target_def), dict(target_def["resources"])

    def _add_finetune(self, cfg, finetune: Dict[str, Any], model: Node, data: Node) -> Node:
        return self.place_at("finetune_model", NodeContext(cfg, finetune=finetune), {"model": model, "data": data})

    def _add_export(self, cfg, model: Node, data: Node) -> Node:
        return self.place_at("export_onnx", NodeContext(cfg), {"model": model, "data": data})

    def placement(self, cfg, target: str) -> Tuple[str, str]:
        """Where a target's int8 Q/DQ goes: (the placement of the runtime that runs its engines, on
        ONNX Runtime's CPU placement the CPU's integer dot product as the target declares it, "" where
        it does not: read where the graph is made). Targets that agree share a graph."""
        from precisionflow.quant.qdq import placement_for

        from precisionflow.devices import runs_on_gpu

        target_def = cfg["target_defs"][target]
        placement = placement_for(cfg["engine"]["backend"], runs_on_gpu(target_def))
        return (placement, target_def.get("cpu_dot_product") or "") if placement == qdq.ORT_CPU else TENSORRT

    def _add_tensorrt_simulation(
        self, cfg, precision: str, target: str, onnx: Node, data: Node, graphs: Dict[tuple, Node], trained: Node
    ) -> Node:
        """The TensorRT-placed int8 graph run on this CPU target: what TensorRT would compute (its
        accuracy; its speed is not TensorRT's, so no timing ratio is planned), a row of its own."""
        graph = graphs.get((precision, TENSORRT)) or self._add_graph(cfg, precision, onnx, data, graphs, trained, TENSORRT)
        graphs[(precision, TENSORRT)] = graph
        available = {"engine": self._add_engine(cfg, graph, target), "data": data, "reference": onnx}
        available.update(self.trained_model_of(precision, graph))
        extra = {SIMULATES: qdq.TENSORRT}
        return self.place_on_target("evaluate_engine", cfg, target, available, precision, f"{precision}-trtsim-{target}", extra)

    def _add_graph(
        self,
        cfg,
        precision: str,
        onnx: Node,
        data: Node,
        graphs: Dict[tuple, Node],
        trained: Node,
        placement: Optional[Tuple[str, str]] = None,
    ) -> Node:
        spec = precisions.get(precision)
        runtime, cpu = placement or TENSORRT
        at = NodeContext(cfg, precision=precision, placement=runtime, cpu_dot_product=cpu)
        inputs = {"onnx": onnx}
        if spec.graph.from_qat_finetune:
            qat_model = self._add_finetune(cfg, dict(cfg["finetune"], mode="qat"), trained, data)
            inputs["onnx"] = self._add_export(cfg, qat_model, data)
        if spec.graph.calibration:
            calibration_at = NodeContext(cfg, source=spec.graph.calibration)
            inputs["calibration"] = self.place_at("calibrate", calibration_at, {"onnx": inputs["onnx"], "data": data})
            inputs["data"] = data
        if spec.graph.builds_on:  # the graph node of the precision it builds on, the same placement
            inputs[spec.graph.builds_on] = graphs.get((spec.graph.builds_on, placement)) or self._add_graph(
                cfg, spec.graph.builds_on, onnx, data, graphs, trained, placement
            )
        # its speed trials (CPU placement) run under the timing exclusivity (common.smk); never hashed
        timed_here = {"timing": 1} if spec.graph.times_candidates and runtime == qdq.ORT_CPU else {}
        graph = self.place_at("quantize_onnx", at, inputs, resources=timed_here)
        self.warn_once(spec.graph.planning_warning(graph.params, lambda: self.split_sizes(data)))
        return graph

    def _add_engine(self, cfg, graph: Node, target: str) -> Node:
        return self.place_on_target("build_engine", cfg, target, {"graph": graph})

    def _add_qat_twin(self, cfg, trained: Node, qat_graph: Node, onnx: Node, data: Node) -> List[Node]:
        """The QAT fine-tune run again in fp32 (same epochs, learning rate, seed, data), exported,
        built and evaluated like the fp32 engine: int8_qat's delta against it is what precision
        cost; against the base fp32 model it also holds what the extra training gave."""
        from precisionflow.reporting.budget import TWIN

        qat_model = self.nodes[self.nodes[qat_graph.inputs["onnx"]].inputs["model"]]
        twin_model = self._add_finetune(cfg, dict(cfg["finetune"], mode="fp32"), trained, data)
        reference = precisions.reference().name
        twin_graph = self._add_graph(cfg, reference, self._add_export(cfg, twin_model, data), data, {}, trained, None)
        evaluations = []
        for target in cfg["targets"]:
            available = {"engine": self._add_engine(cfg, twin_graph, target), "data": data, "reference": onnx}
            extra = {TWIN_OF: qat_model.key}
            evaluations.append(self.place_on_target("evaluate_engine", cfg, target, available, TWIN, f"{TWIN}-{target}", extra))
        return evaluations


def check_condition_budgets(builder: "PlanBuilder", cfg: Dict[str, Any], point: Dict[str, Node]) -> None:
    """Conditions a budget names exist in the test split, and per-condition budgets meet a data set
    that has conditions: a typo or a missing sidecar fails at planning, not as a silent PASS."""
    from precisionflow.datasets import conditions

    named = {
        (precision, tag)
        for precision in ["(all)"] + list(cfg["evaluate"].get("budgets", {}))
        for tag in (budget_for(cfg["evaluate"], precision).get("condition_limits") or {})
    }
    wants = any(
        budget_for(cfg["evaluate"], precision).get(key) is not None
        for precision in ["(all)"] + list(cfg["evaluate"].get("budgets", {}))
        for key in ("max_condition_drop", "max_condition_spurious_per_image")
    )
    if not named and not wants:
        return
    evaluation = next(node for node in point.values() if node.stage == "evaluate_engine")
    data = builder.nodes[evaluation.inputs["data"]]
    tags = builder.facts(data).conditions("test")
    if tags is None:
        raise ConfigError(
            "evaluate.budget: a per-condition budget is set, but the data set has no conditions. Tag images "
            "with a sidecar (dataset.conditions=<file.csv>), use a data set that has them (shadow_cars), or drop it."
        )
    for precision, tag in sorted(named):
        conditions.check_named([tag], tags, f"evaluate.budget(s) condition_limits ({precision})")


def build_plan(points: List[Dict[str, Any]], results_dir: str, overrides: Sequence[str] = ()) -> Dict[str, Any]:
    """All sweep points -> {nodes, final, report}: the document the Snakefile executes."""
    builder = PlanBuilder(cache_dir=Path(results_dir) / ".cache")
    measured: Dict[str, Node] = {}
    measured_by_tracking: Dict[str, Dict[str, Node]] = {}
    budgets: Dict[str, Dict[str, Any]] = {}
    for cfg in points:
        point = {node.key: node for node in builder.add_point(cfg)}
        measured.update(point)
        check_condition_budgets(builder, cfg, point)
        budgets.update(
            {
                key: budget_for(cfg["evaluate"], node.params["precision"])
                for key, node in point.items()
                if node.stage == "evaluate_engine"
            }
        )
        if cfg["tracking"]["enabled"]:
            tracking = stage_module("track_mlflow").node_params(NodeContext(cfg))
            measured_by_tracking.setdefault(json.dumps(tracking, sort_keys=True), {}).update(point)
    warn_unresolvable(builder, budgets)
    report_params = {**stage_module("report").node_params(dict(sorted(budgets.items()))), **declared_figures()}
    report = _add_aggregate(builder, "report", "sweep", report_params, measured)
    final = [report]
    for tracking_key, nodes in measured_by_tracking.items():
        params = {**json.loads(tracking_key), "overrides": list(overrides), **declared_figures()}
        final.append(_add_aggregate(builder, "track_mlflow", "sweep", params, nodes, {"report": report}))
    return {
        "results_dir": results_dir,
        "overrides": list(overrides),
        "nodes": {key: node.to_json() for key, node in builder.nodes.items()},
        "final": [node.key for node in final],
        "report": report.key,
        "budgets": budgets,  # thresholds per evaluation: checked by precisionflow check, never hashed
    }


def resolution_warnings(builder: PlanBuilder, budgets: Dict[str, Dict[str, Any]]) -> List[str]:
    """Each evaluation's budget held against the test split its data node will hold
    (reporting.budget.resolution_warning decides; the planner only knows the split sizes)."""
    found = set()
    for key, budget in budgets.items():
        node = builder.nodes[key]
        images = builder.split_sizes(builder.nodes[node.inputs["data"]])["test"]
        found.add(resolution_warning(budget, node.params["precision"], node.params.get("task", "classification"), images))
    return sorted(found - {None})


def warn_unresolvable(builder: PlanBuilder, budgets: Dict[str, Dict[str, Any]]) -> None:
    import sys

    for line in resolution_warnings(builder, budgets):
        print(line, file=sys.stderr)


def declared_figures() -> Dict[str, Any]:
    """{"figures": {role: keys}} of the measuring stages the report and MLflow read under their own
    name (flow.Stage.figures), for their params; {} where none declares any (no id changes)."""
    figures = {role: list(keys) for role, keys in flow.declared_figures().items()}
    return {"figures": figures} if figures else {}


def _add_aggregate(builder: PlanBuilder, stage: str, slug: str, params, measured: Dict[str, Node], extra=None) -> Node:
    # Inputs are numbered in a sorted order so the same set of nodes gives the same node id.
    inputs = dict(extra or {})
    for measured_stage, role in flow.aggregated_roles().items():
        keys = sorted(key for key in measured if key.startswith(measured_stage + "/"))
        inputs.update({f"{role}{i:05d}": measured[key] for i, key in enumerate(keys)})
    engines = sum(1 for key in measured if key.startswith("evaluate_engine/"))
    return builder.add(stage, f"{slug}-{engines}engines", params, inputs)


def default_results_dir(points: List[Dict[str, Any]]) -> str:
    chosen = {p.get("results_dir") for p in points} - {None}
    if len(chosen) > 1:
        from precisionflow.errors import ConfigError

        raise ConfigError(f"results_dir: one run writes one results folder; the sweep names {sorted(chosen)}.")
    return os.path.abspath(chosen.pop() if chosen else "results")


def write_plan(plan: Dict[str, Any]) -> Path:
    """Write the plan under results/.plans/<content hash>.json (atomically, once) and return its path."""
    from precisionflow.nodeio import write_json_atomic

    text = json.dumps(plan, sort_keys=True)
    path = Path(plan["results_dir"]) / ".plans" / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.exists():
        write_json_atomic(path, plan)
    return path


def plan_from_overrides(overrides=(), multirun: bool = False) -> Path:
    from precisionflow.config.compose import expand

    points = expand(overrides, multirun=multirun)
    return write_plan(build_plan(points, default_results_dir(points), overrides))


def missing_under_finished(plan: Dict[str, Any]) -> List[str]:
    """Nodes whose folder is gone (deleted, as a refusal's advice says) while a node built from them
    is finished. Snakemake would leave them missing (nothing up to date needs them), so the lineage
    of what was built from them could no longer be walked: the run recomputes them and everything
    downstream."""
    from precisionflow.nodeio import NODE_FILE

    results = Path(plan["results_dir"])
    finished = {key for key in plan["nodes"] if (results / key / NODE_FILE).is_file()}
    return sorted(
        {upstream for key in finished for upstream in plan["nodes"][key]["inputs"].values() if upstream not in finished}
    )


def recheck_finished(plan: Dict[str, Any]) -> None:
    """Before anything runs, check the nodes that already exist: their files are as they wrote them
    (an engine or calibration cache copied in, a graph edited: refused here, not after Snakemake
    decided they are up to date), and their thresholds hold (ids do not cover thresholds, so a
    tightened threshold must still fail the run)."""
    from precisionflow.nodeio import NODE_FILE, verify_finished_node

    results = Path(plan["results_dir"])
    for key, spec in plan["nodes"].items():
        if not (results / key / NODE_FILE).is_file():
            continue
        record = verify_finished_node(results / key)
        if spec.get("limits"):
            stage_module(spec["stage"]).check(spec["limits"], record["summary"])
