"""One module per workflow stage. Each is one contract the planner assembles the graph from:

    PACKAGES                     the distributions whose versions enter its nodes' ids
    node_params(at: NodeContext) -> dict   what of the configuration it reads: its node's params (hashed into
                                 the id; a key read nowhere else belongs nowhere here)
    run(params, inputs, out) -> summary dict   the work, writing only under `out`
  and where it has them:
    preflight(at, data_facts) -> [warning]  its settings against what its data node will hold
                                 (datasets.facts.DataFacts), before anything runs; raises ConfigError
    limits(at) / check(limits, summary)     thresholds kept outside the id, checked on its summary
  The planner calls preflight and limits for every stage that defines them (PlanBuilder.add), so a
  stage that gains one needs no edit of the planner.
    AGGREGATES = True            it reads every point of the sweep (report, track_mlflow): the
                                 planner hands it what was measured, not one point's NodeContext

No stage module imports another (tests/test_architecture.py); tests/test_stage_contracts.py
holds every module to this shape.
"""

from dataclasses import dataclass
from typing import Any, Dict, Optional

from precisionflow.placements import TENSORRT


@dataclass(frozen=True)
class NodeContext:
    """Where in the plan a stage is read: one sweep point's configuration, and for the nodes that
    exist per engine, which engine. Fields a stage has no use for stay None."""

    cfg: Dict[str, Any]
    target: Optional[str] = None  # a key of cfg["target_defs"]
    runtime: Optional[Dict[str, str]] = None  # the target's backend version and device name
    precision: Optional[str] = None  # a registered precision's name
    placement: str = TENSORRT  # the runtime an int8 graph's Q/DQ is placed for (placements.PLACEMENTS)
    # onnxruntime_cpu: the CPU's integer dot product as its targets declare it ("" = read where made)
    cpu_dot_product: str = ""
    source: Optional[str] = None  # calibrate: "ptq" or "qat"
    finetune: Optional[Dict[str, Any]] = None  # finetune_model: cfg["finetune"] or its QAT variant
