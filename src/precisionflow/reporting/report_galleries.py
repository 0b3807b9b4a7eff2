"""The report's pictures drawn from the engines' outputs: flipped samples and worst boxes, per-
condition galleries and changes, serving curves, per-op sensitivity maps, per-class changes. Each
writes PNGs into the report node's figures folder (FIGURES), which Snakemake's report collects."""

import csv
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional

from precisionflow.nodeio import named_lineage, node_key, read_json, read_node
from precisionflow.reporting import report_pages
from precisionflow.reporting.compare import engine_key, of_kind, variant

FIGURES = "figures"  # pictures live in one folder of the node: Snakemake's report collects it


def test_split_of(eval_dir: Path, data_cache: Dict[str, Any]):
    """The test split an evaluation scored (one Split per data node; images are read one by one,
    only those drawn)."""
    from precisionflow.datasets.store import Split

    data_dir = eval_dir.parent.parent / read_node(eval_dir)["inputs"]["data"]
    if str(data_dir) not in data_cache:
        data_cache[str(data_dir)] = Split(data_dir, "test")
    return data_cache[str(data_dir)]


def engine_label(eval_dir: Path, precision: str) -> str:
    """An engine as the figures name it: precision, variant (TRT-sim for a simulation) and the
    end of its node id -- two int8 rows are never told apart by a hash alone."""
    return f"{precision} {variant(named_lineage(eval_dir))}".strip() + f" [{eval_dir.name[-6:]}]"


def draw_flipped(eval_dir: Path, out: Path, data_cache: Dict[str, Any]) -> str:
    """A picture grid of the samples this engine decides differently from fp32; returns its file name."""
    images = test_split_of(eval_dir, data_cache)
    classes = images.classes
    with open(eval_dir / "flipped.csv") as handle:
        flipped = list(csv.DictReader(handle))
    name = f"{FIGURES}/flipped-{eval_dir.name}.png"
    report_pages.flipped_grid(images, flipped, classes, eval_dir.name, out / name)
    return name


def draw_worst_boxes(eval_dir: Path, out: Path, data_cache: Dict[str, Any]) -> str:
    """A picture grid of the test images where this engine's boxes differ most from fp32's, each
    captioned with its conditions (where the data set has them): which condition the loss lives in."""
    from precisionflow.reporting.budget import test_tags

    test = test_split_of(eval_dir, data_cache)
    classes = test.classes
    tags = test_tags(eval_dir.parent.parent, f"{eval_dir.parent.name}/{eval_dir.name}")
    name = f"{FIGURES}/boxes-{eval_dir.name}.png"
    report_pages.boxes_grid(test, read_json(eval_dir / "worst_boxes.json"), classes, eval_dir.name, out / name, tags=tags)
    return name


GALLERY_CONDITIONS = 3  # per engine: its most damaged conditions get a gallery each


def condition_galleries(found: List[Dict[str, Any]], evals: List[Path], out: Path, data_cache: Dict[str, Any]) -> List[str]:
    """Per engine, a gallery for each of its most damaged conditions (largest top-1 drop, or most
    spurious boxes per image): the flipped samples, or the worst boxes, among that condition's
    images alone -- what the loss the heat map shows looks like there."""
    from precisionflow.reporting.budget import test_tags

    by_node = {f"{path.parent.name}/{path.name}": path for path in evals}
    pictures = []
    for entry in found:
        path = by_node.get(entry["node"])
        figures = entry.get("per_condition") or {}
        if path is None or not figures:
            continue
        damaged = most_damaged(figures)
        tags = test_tags(path.parent.parent, entry["node"]) if damaged else None
        for tag in damaged:
            picture = condition_gallery(path, tag, tags, out, data_cache)
            if picture:
                pictures.append(picture)
    return pictures


def most_damaged(figures: Dict[str, Dict[str, Any]]) -> List[str]:
    """The conditions with a loss (a top-1 drop, or spurious boxes), largest first, at most GALLERY_CONDITIONS."""
    loss = {tag: each.get("drop", each.get("spurious_per_image", 0.0)) for tag, each in figures.items()}
    return [tag for tag in sorted(loss, key=lambda tag: (-loss[tag], tag)) if loss[tag] > 0][:GALLERY_CONDITIONS]


def condition_gallery(eval_dir: Path, tag: str, tags, out: Path, data_cache: Dict[str, Any]) -> Optional[str]:
    """One engine's gallery on one condition's images, or None where nothing there changed."""
    test = test_split_of(eval_dir, data_cache)
    name = f"{FIGURES}/condition-{tag}-{eval_dir.name}.png"
    title = f"{eval_dir.name} on '{tag}' images"
    if (eval_dir / "worst_boxes_by_condition.json").is_file():
        worst = read_json(eval_dir / "worst_boxes_by_condition.json").get(tag)
        if not worst:
            return None
        report_pages.boxes_grid(test, worst, test.classes, title, out / name, tags=tags)
        return name
    if not (eval_dir / "flipped.csv").is_file():
        return None
    with open(eval_dir / "flipped.csv") as handle:
        flipped = [row for row in csv.DictReader(handle) if tag in tags[int(row["test_index"])]]
    if not flipped:
        return None
    report_pages.flipped_grid(test, flipped, test.classes, title, out / name)
    return name


def serving_curves(served: Dict[str, Any], metrics, evals: List[Path], out: Path) -> List[str]:
    """One picture per target: each engine's Server runs, p99 latency against the offered rate,
    valid runs filled, with the bound as a line."""
    by_target: Dict[str, Dict[str, Any]] = {}
    for path in evals:
        entry = served.get(engine_key(path))
        if entry:
            by_target.setdefault(metrics[path]["target"], {})[engine_label(path, metrics[path]["precision"])] = entry
    pictures = []
    for target, engines in sorted(by_target.items()):
        pictures.append(f"{FIGURES}/serving-{target}.png")
        report_pages.serving_plot(engines, target, out / pictures[-1])
    return pictures


def condition_changes(found: List[Dict[str, Any]], out: Path, labels: Dict[str, str]) -> List[str]:
    """per_condition.csv (every engine, every condition: its figure with the interval, and the
    calibration sample's images of that condition) and one condition x engine heat map per target."""
    rows, by_target = [], {}
    for entry in found:
        for tag, figures in (entry.get("per_condition") or {}).items():
            rows.append(
                {
                    "engine": entry["node"],
                    "precision": entry["precision"],
                    "target": entry["target"],
                    "condition": tag,
                    "measure": entry["condition_figure"],
                    **figures,
                    "calibration_images": (entry.get("calibration_coverage") or {}).get(tag, ""),
                }
            )
            # loss reads red: a top-1 change (points), or spurious boxes per 100 images as a negative
            shown = -figures["drop"] if "drop" in figures else -100 * figures["spurious_per_image"]
            label = labels.get(entry["node"], f"{entry['precision']} [{entry['node'][-6:]}]")
            by_target.setdefault(entry["target"], {}).setdefault(label, {})[tag] = round(shown, 2)
    if not rows:
        return []
    fields = [
        "engine",
        "precision",
        "target",
        "condition",
        "measure",
        "drop",
        "spurious_per_image",
        "low",
        "high",
        "lost_per_image",
        "shadow_per_image",
        "map50",
        "map50_fp32",
        "agreement",
        "agreement_low",
        "agreement_high",
        "images",
        "p_value",
        "calibration_images",
    ]
    with open(out / "per_condition.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    pictures = []
    for target, changes in sorted(by_target.items()):
        tags = sorted({tag for engine in changes.values() for tag in engine})
        pictures.append(f"{FIGURES}/per-condition-{target}.png")
        what = "top-1 change vs fp32 (points)" if "drop" in rows[0] else "spurious boxes per 100 images (negated)"
        report_pages.per_class_changes(changes, tags, f"{what} per condition -- target {target}", out / pictures[-1])
    return pictures


SENSITIVITY_OPS = 20  # rows of a heat map: the ops that cost any condition most


def sensitivity_maps(inputs: Dict[str, Path], out: Path) -> List[str]:
    """One heat map per int8_mixed search in the sweep (built or declined: the table answers "which
    ops lose the dim images" either way): ops x (all images, each condition), worst first, with the
    table copied beside the report as sensitivity-<graph id>.csv."""
    from precisionflow.quant import sensitivity

    pictures, seen = [], set()
    for path in of_kind(inputs, "eval"):
        graph = named_lineage(path)["quantize_onnx"]
        folder = path.parent.parent / node_key(graph)
        table = folder / "sensitivity.csv"
        if folder in seen or not table.is_file():
            continue
        seen.add(folder)
        shutil.copyfile(table, out / f"sensitivity-{graph['id']}.csv")
        rows = sensitivity.read_csv(table)
        ops = sensitivity.worst_ops(rows, SENSITIVITY_OPS)
        # worse is lower in both: the top-1 change, or minus the spurious boxes per image
        changes = {op: {row["condition"]: -sensitivity.value(row) for row in rows if row["op"] == op} for op in ops}
        subsets = list(dict.fromkeys(row["condition"] for row in rows))
        pictures.append(f"{FIGURES}/sensitivity-{graph['id']}.png")
        placement = (graph["params"].get("int8") or {}).get("placement", "?")
        shown = "top-1 change" if "top1_drop_points" in rows[0] else "minus spurious boxes per image"
        title = f"int8_mixed graph {graph['id'][-6:]} ({placement} placement): {shown}, only that op in int8"
        unit, floor = ("points", 1.0) if "top1_drop_points" in rows[0] else ("spurious boxes per image", 0.1)
        report_pages.per_class_changes(changes, subsets, title, out / pictures[-1], unit, floor)
    return pictures


def class_changes(eval_dirs: List[Path], out: Path) -> List[str]:
    """per_class.csv (every engine, every class: top-1 -- AP for a detector -- against fp32) and
    one picture per target."""
    from precisionflow.reporting.budget import verdict_inputs

    rows, pictures, by_target, measure = [], [], {}, "top-1"
    for eval_dir, metrics, fp32 in verdict_inputs(eval_dirs):
        key, measure = ("per_class_ap", "AP") if metrics.get("task") == "detection" else ("per_class_top1", "top-1")
        label = engine_label(eval_dir, metrics["precision"])
        changes = {name: round(100 * (value - fp32[key][name]), 2) for name, value in metrics[key].items() if name in fp32[key]}
        by_target.setdefault(metrics["target"], {})[label] = changes
        rows += [
            {
                "engine": eval_dir.name,
                "class": name,
                "measure": measure,
                "fp32": fp32[key][name],
                "engine_value": metrics[key][name],
                "change_points": change,
            }
            for name, change in changes.items()
        ]
    with open(out / "per_class.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["engine", "class", "measure", "fp32", "engine_value", "change_points"])
        writer.writeheader()
        writer.writerows(rows)
    for target, changes in sorted(by_target.items()):
        classes = sorted({name for engine in changes.values() for name in engine}, key=lambda c: (len(c), c))
        pictures.append(f"{FIGURES}/per-class-{target}.png")
        report_pages.per_class_changes(
            changes, classes, f"{measure} change per class vs fp32 (points) -- target {target}", out / pictures[-1]
        )
    return pictures
