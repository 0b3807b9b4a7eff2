"""Sweep points -> content-addressed stage nodes -> one plan file for one Snakemake DAG.

A node's id is `<readable slug>-<hash>`; the hash covers the stage name, the part of the config
that stage reads, its upstream node ids and the stage's code version. Sweep points that share a
prefix therefore share nodes (a sweep over precisions trains once), flipping a parameter back
finds the old outputs, and editing a stage's source gives its nodes (and their downstream) new
ids -- which is how Snakemake "notices" edits to imported modules.
"""

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

PACKAGE_DIR = Path(__file__).resolve().parent

# Source files (relative to the package) each stage's code version hashes. Shared helpers are
# listed where a stage uses them so a change there reruns exactly the stages that depend on it.
_COMMON = ["runner.py", "nodeio.py"]
_DATA = ["stages/prepare_dataset.py", "datasets/image_folder.py"]
_QUANT = ["quant/cache.py", "quant/qdq.py", "quant/reader.py", "quant/layer_error.py"]
_BACKENDS = ["backends/__init__.py", "backends/devices.py", "backends/onnxruntime_backend.py", "backends/tensorrt_backend.py"]
STAGE_SOURCES: Dict[str, List[str]] = {
    "prepare_dataset": _DATA,
    "train_model": ["stages/train_model.py", "models.py", "tfenv.py"] + _DATA,
    "finetune_model": ["stages/finetune_model.py", "stages/train_model.py", "qat.py", "models.py", "tfenv.py"] + _DATA,
    "export_onnx": ["stages/export_onnx.py", "tfenv.py", "quant/onnx_names.py"] + _DATA,
    "calibrate": ["stages/calibrate.py"] + _QUANT + _DATA,
    "quantize_onnx": ["stages/quantize_onnx.py"] + _QUANT + _DATA,
    "build_engine": ["stages/build_engine.py"] + _BACKENDS,
    "evaluate_engine": ["stages/evaluate_engine.py", "speed.py", "timing.py"] + _BACKENDS + _DATA,
    "benchmark_framework": ["stages/benchmark_framework.py", "speed.py", "timing.py", "tfenv.py"] + _DATA,
    "track_mlflow": ["stages/track_mlflow.py", "tracking.py", "compare.py"],
    "report": ["stages/report.py", "stages/report_pages.py", "compare.py"] + _DATA,
}
STAGE_ORDER = list(STAGE_SOURCES)


@dataclass
class Node:
    stage: str
    id: str
    params: Dict[str, Any]
    inputs: Dict[str, str] = field(default_factory=dict)  # role -> upstream node key

    @property
    def key(self) -> str:
        return f"{self.stage}/{self.id}"

    def to_json(self) -> Dict[str, Any]:
        return {"stage": self.stage, "id": self.id, "params": self.params, "inputs": self.inputs}


def code_versions() -> Dict[str, str]:
    """Hash of each stage's source files, read once per plan."""
    cache: Dict[str, str] = {}
    versions = {}
    for stage, files in STAGE_SOURCES.items():
        digest = hashlib.sha256()
        for rel in sorted(files + _COMMON):
            if rel not in cache:
                cache[rel] = hashlib.sha256((PACKAGE_DIR / rel).read_bytes()).hexdigest()
            digest.update(f"{rel}:{cache[rel]}\n".encode())
        versions[stage] = digest.hexdigest()[:12]
    return versions


def installed_version(packages) -> str:
    """Version of the first of `packages` installed (read from metadata: nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    for name in packages:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "not installed"


def _slugify(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "-", text).strip("-")[:60] or "node"


class PlanBuilder:
    """Collects unique nodes across all sweep points."""

    def __init__(self, versions: Optional[Dict[str, str]] = None, cache_dir: Optional[Path] = None):
        self.versions = versions or code_versions()
        self.nodes: Dict[str, Node] = {}
        self.cache_dir = cache_dir
        self.fingerprints: Dict[str, str] = {}
        self.runtimes: Dict[tuple, Dict[str, str]] = {}

    def runtime(self, backend: str, target_def: Dict[str, Any]) -> Dict[str, str]:
        """The runtime an engine is built with: part of its id, so upgrading the backend or moving
        to another machine builds new engines instead of failing on the old ones."""
        from precisionflow.backends.devices import local_device_name

        key = (backend, target_def["device"], target_def.get("expect_device") or "")
        if key not in self.runtimes:
            packages = {"onnxruntime": ("onnxruntime", "onnxruntime-gpu")}.get(backend, (backend,))
            # A cluster target names its device; `local` means whatever this machine has.
            device = target_def.get("expect_device") or local_device_name(target_def["device"])
            self.runtimes[key] = {"backend_version": installed_version(packages), "device": device}
        return self.runtimes[key]

    def data_params(self, dataset: Dict[str, Any]) -> Dict[str, Any]:
        """The data set's config, plus a fingerprint of the files for folder data sets."""
        if dataset["name"] != "image_folder":
            return dataset
        from precisionflow.datasets import image_folder

        root = str(Path(dataset["path"]).expanduser().resolve())
        if root not in self.fingerprints:
            cache = (self.cache_dir or Path(root)) / "fingerprints.json"
            self.fingerprints[root] = image_folder.fingerprint(Path(root), cache)
        return {**dataset, "path": root, "fingerprint": self.fingerprints[root]}

    def add(self, stage: str, slug: str, params: Dict[str, Any], inputs: Dict[str, Node]) -> Node:
        input_keys = {role: node.key for role, node in sorted(inputs.items())}
        identity = {"stage": stage, "params": params, "inputs": input_keys, "code": self.versions[stage]}
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
        node = Node(stage, f"{_slugify(slug)}-{digest}", params, input_keys)
        self.nodes.setdefault(node.key, node)
        return self.nodes[node.key]

    def add_point(self, cfg: Dict[str, Any]) -> Tuple[List[Node], List[Node]]:
        """Add one configuration's chain; return its evaluate_engine and benchmark_framework nodes."""
        data = self.add("prepare_dataset", cfg["dataset"]["name"], self.data_params(cfg["dataset"]), {})
        model = trained = self.add(
            "train_model",
            f"{cfg['model']['name']}-{cfg['train']['precision_policy']}-e{cfg['train']['epochs']}",
            {"model": cfg["model"], "train": cfg["train"]},
            {"data": data},
        )
        if cfg["finetune"]["mode"] != "none":
            model = self._add_finetune(cfg, cfg["finetune"], model, data)
        onnx = self._add_export(cfg, model, data)
        graphs = {}
        for precision in cfg["precisions"]:  # int8_mixed needs the int8 graph's report: order matters
            graphs[precision] = self._add_graph(cfg, precision, onnx, data, graphs, trained)
        # Every engine is compared with the same fp32 reference: the main path's exported model.
        evaluations = [ev for p in cfg["precisions"] for ev in self._add_engines(cfg, p, graphs[p], onnx, data)]
        return evaluations, [self._add_framework(cfg, target, model, data) for target in cfg["targets"]]

    def _add_framework(self, cfg, target: str, model: Node, data: Node) -> Node:
        timing = {k: v for k, v in cfg["evaluate"].items() if k != "batch_size"}
        params = {"evaluate": timing, "target": target, "target_def": cfg["target_defs"][target],
                  "threads": cfg["engine"]["intra_op_threads"]}
        return self.add("benchmark_framework", f"tf-{target}", params, {"model": model, "data": data})

    def _add_finetune(self, cfg, finetune: Dict[str, Any], model: Node, data: Node) -> Node:
        slug = f"{finetune['mode']}-e{finetune['epochs']}"
        return self.add("finetune_model", slug, {"finetune": finetune, "model": cfg["model"]}, {"model": model, "data": data})

    def _add_export(self, cfg, model: Node, data: Node) -> Node:
        return self.add("export_onnx", f"{model.id.rsplit('-', 1)[0]}-opset{cfg['export']['opset']}", cfg["export"],
                        {"model": model, "data": data})

    def _add_calibration(self, cfg, onnx: Node, data: Node, source: str) -> Node:
        calibration = dict(cfg["calibration"], source=source)
        if source == "qat":  # learned ranges; minmax only fills tensors QAT has no quantizer on
            calibration.update(method="minmax", percentile=None)
        slug = f"{source}-{calibration['method']}-n{calibration['num_samples']}"
        return self.add("calibrate", slug, calibration, {"onnx": onnx, "data": data})

    def _add_graph(self, cfg, precision: str, onnx: Node, data: Node, graphs: Dict[str, Node], trained: Node) -> Node:
        params: Dict[str, Any] = {"precision": precision}
        inputs = {"onnx": onnx}
        if precision == "fp16":
            params["fp16"] = cfg["fp16"]
        if precision == "int8_qat":
            qat_model = self._add_finetune(cfg, dict(cfg["finetune"], mode="qat"), trained, data)
            inputs["onnx"] = self._add_export(cfg, qat_model, data)
        if precision.startswith("int8"):
            inputs["calibration"] = self._add_calibration(cfg, inputs["onnx"], data, "qat" if precision == "int8_qat" else "ptq")
            inputs["data"] = data
            params["int8"] = {k: v for k, v in cfg["int8"].items() if precision == "int8_mixed" or k != "mixed_keep_fp"}
        if precision == "int8_mixed":
            inputs["int8"] = graphs.get("int8") or self._add_graph(cfg, "int8", onnx, data, graphs, trained)
        slug = f"{precision}-keep{cfg['int8']['mixed_keep_fp']}" if precision == "int8_mixed" else precision
        return self.add("quantize_onnx", slug, params, inputs)

    def _add_engines(self, cfg, precision: str, graph: Node, onnx: Node, data: Node) -> List[Node]:
        evaluations = []
        for target in cfg["targets"]:
            target_def = cfg["target_defs"][target]
            engine_params = {"engine": engine_settings(cfg["engine"]), "target": target, "target_def": target_def,
                             "runtime": self.runtime(cfg["engine"]["backend"], target_def)}
            engine = self.add("build_engine", f"{graph.id.rsplit('-', 1)[0]}-{target}", engine_params, {"graph": graph})
            eval_params = {"evaluate": cfg["evaluate"], "precision": precision, "target": target}
            inputs = {"engine": engine, "data": data, "reference": onnx}
            evaluations.append(self.add("evaluate_engine", f"{graph.id.rsplit('-', 1)[0]}-{target}", eval_params, inputs))
        return evaluations


# The engine settings each backend reads; the others do not enter its engines' ids.
BACKEND_SETTINGS = {
    "onnxruntime": ("backend", "optimization_level", "intra_op_threads"),
    "tensorrt": ("backend", "intra_op_threads", "trt_builder_optimization_level", "trt_workspace_mb", "min_batch",
                 "opt_batch", "max_batch", "min_spatial", "opt_spatial", "max_spatial", "sparse_weights"),
}


def engine_settings(engine: Dict[str, Any]) -> Dict[str, Any]:
    keys = BACKEND_SETTINGS.get(engine["backend"], tuple(engine))
    return {key: engine[key] for key in keys}


def build_plan(points: List[Dict[str, Any]], results_dir: str) -> Dict[str, Any]:
    """All sweep points -> {nodes, targets}: the document the Snakefile executes."""
    builder = PlanBuilder(cache_dir=Path(results_dir) / ".cache")
    measured: Dict[str, Node] = {}  # evaluate_engine and benchmark_framework nodes of the sweep
    measured_by_tracking: Dict[str, Dict[str, Node]] = {}
    for cfg in points:
        evals, frameworks = builder.add_point(cfg)
        point = {node.key: node for node in evals + frameworks}
        measured.update(point)
        if cfg["tracking"]["enabled"]:
            measured_by_tracking.setdefault(json.dumps(cfg["tracking"], sort_keys=True), {}).update(point)
    report = _add_aggregate(builder, "report", "sweep", {}, measured)
    final = [report]
    for tracking_key, nodes in measured_by_tracking.items():
        final.append(_add_aggregate(builder, "track_mlflow", "sweep", json.loads(tracking_key), nodes))
    return {
        "results_dir": results_dir,
        "nodes": {key: node.to_json() for key, node in builder.nodes.items()},
        "final": [node.key for node in final],
        "report": report.key,
    }


def _add_aggregate(builder: PlanBuilder, stage: str, slug: str, params, measured: Dict[str, Node]) -> Node:
    # Inputs are numbered in a sorted order so the same set of nodes gives the same node id.
    evals = sorted(key for key in measured if key.startswith("evaluate_engine/"))
    frameworks = sorted(key for key in measured if key.startswith("benchmark_framework/"))
    inputs = {f"eval{i:05d}": measured[key] for i, key in enumerate(evals)}
    inputs.update({f"framework{i:05d}": measured[key] for i, key in enumerate(frameworks)})
    return builder.add(stage, f"{slug}-{len(evals)}engines", params, inputs)


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
    return write_plan(build_plan(points, default_results_dir(points)))
