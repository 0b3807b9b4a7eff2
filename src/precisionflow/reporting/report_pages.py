"""Pictures and a page for the report stage: Pareto plots, per-class changes, flipped-sample grids,
and report.html -- verdicts first, then the table, the plots and the galleries."""

from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

from precisionflow import precisions

DATA_FILES = ("reporting/templates/report.html.j2",)  # read by html_page: part of the report stage's code id
RIGHT_COLOURS = {"engine": "#2e7d32", "fp32": "#c62828", "neither": "#555555"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def pareto_front(points: List[tuple]) -> List[tuple]:
    """(throughput, accuracy, ...) points no other point beats on both (higher throughput, higher accuracy)."""
    front = []
    for point in sorted(points, key=lambda p: (-p[0], -p[1])):
        if not front or point[1] > front[-1][1]:
            front.append(point)
    return front


def number(value) -> float:
    """A table figure as a float (noisy figures carry a trailing mark)."""
    return float(str(value).rstrip("*"))


def point_label(row: Dict[str, Any], name_model: bool) -> str:
    """precision and variant; with several trainings in the sweep, which one (its node id's hash)."""
    text = f"{row['precision']} {row['variant']}".strip()
    return f"{text} [{row['model'].rsplit('-', 1)[-1][:6]}]" if name_model else text


class SpeedPoint(NamedTuple):
    ratio: float  # throughput over fp32's, measured side by side in one job
    low: float  # its interval
    high: float
    accuracy: float
    label: str


def speed_points(rows: List[Dict[str, Any]], target: str, at: str, column: str, name_model: bool) -> List[SpeedPoint]:
    """One point per timed engine of `target`, placed by its side-by-side ratio to fp32 at `at`
    (the ratio the verdicts read, with its interval) -- never by throughputs timed in different
    jobs, which drew identical kernels 3.3x apart. fp32 sits at 1 (the reference); an engine that
    ran fp32's kernels sits at 1 too, and says so. Rows with no ratio (the TensorFlow baseline,
    TensorRT simulations) are left out."""
    points = []
    for row in rows:
        if row["target"] != target or row.get(column, "") in ("", None):
            continue
        label, accuracy, ratio = point_label(row, name_model), number(row[column]), row.get(f"x_fp32_{at}", "")
        if precisions.is_reference(row["precision"]):
            points.append(SpeedPoint(1.0, 1.0, 1.0, accuracy, f"{label} (reference)"))
        elif ratio == "=fp32":
            points.append(SpeedPoint(1.0, 1.0, 1.0, accuracy, f"{label} (ran fp32's kernels)"))
        elif ratio not in ("", None):
            interval = row.get("x_fp32_at") == at and row.get("x_fp32_low", "") != "" and row.get("x_fp32_high", "") != ""
            value = number(ratio)
            low, high = (number(row["x_fp32_low"]), number(row["x_fp32_high"])) if interval else (value, value)
            # the row's ratio is rounded to 2 decimals, its interval's ends are not: a ratio rounded
            # past an end (1.004 shown 1.00 beside 1.002) is drawn at that end, within its rounding
            points.append(SpeedPoint(min(max(value, low), high), low, high, accuracy, label))
    return points


def pareto_plot(rows: List[Dict[str, Any]], target: str, path: Path, at: str = "bmax") -> None:
    """Accuracy against the speed-up over fp32 at the setting the headline judges (`at`: b1, bmax
    or streams), each with the interval of its side-by-side ratio; the Pareto front over both."""
    plt = _pyplot()
    models = sorted({r["model"] for r in rows if r["target"] == target})
    # A detector's rows carry mAP@.5 where a classifier's carry top-1.
    column = "map50" if any(r.get("map50", "") != "" for r in rows if r["target"] == target) else "top1"
    points = speed_points(rows, target, at, column, len(models) > 1)
    front = pareto_front([(p.ratio, p.accuracy, p.label) for p in points])
    fig, axis = plt.subplots(figsize=(8, 4.8))
    axis.errorbar(
        [p.ratio for p in points],
        [p.accuracy for p in points],
        xerr=[[p.ratio - p.low for p in points], [p.high - p.ratio for p in points]],
        fmt="o",
        color="#4f81bd",
        ecolor="#9bb7d4",
        capsize=3,
        label="engines (bars: the ratio's interval)",
    )
    axis.step([p[0] for p in front], [p[1] for p in front], where="post", color="#c0504d", label="Pareto front")
    axis.axvline(1.0, color="#999999", linestyle=":", linewidth=1)
    for index, point in enumerate(sorted(points, key=lambda p: (p.ratio, p.accuracy))):
        # alternate above and below so labels of engines at one speed do not print over each other
        axis.annotate(
            point.label,
            (point.ratio, point.accuracy),
            fontsize=8,
            xytext=(4, 6 if index % 2 else -11),
            textcoords="offset points",
        )
    axis.set_xlabel(f"throughput / fp32's at {at}, both timed side by side in one job")
    axis.set_ylabel("mAP@.5" if column == "map50" else "top-1 accuracy")
    axis.set_title(f"accuracy vs speed-up over fp32 -- target {target}")
    axis.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def serving_plot(engines: Dict[str, Dict[str, Any]], target: str, path: Path) -> None:
    """p99 latency (ms) against offered Server rate, one line per engine; filled markers = VALID runs."""
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(7, 4.2))
    bound = None
    for label, served in engines.items():
        curve = sorted((served["results"]["engine"].get("Server") or {}).get("curve", []), key=lambda p: p["target_qps"])
        points = [(p["target_qps"], p["p99_ns"] / 1e6, p["valid"]) for p in curve if p.get("p99_ns")]
        if not points:
            continue
        line = axis.plot([p[0] for p in points], [p[1] for p in points], marker="", label=label)[0]
        for rate, p99, valid in points:
            axis.scatter([rate], [p99], color=line.get_color(), facecolors=line.get_color() if valid else "none")
        bound = served["settings"]["latency_bound_ms"]
    if bound:
        axis.axhline(bound, color="#c0504d", linestyle="--", label=f"bound {bound:g} ms")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("offered rate (queries/s, Poisson)")
    axis.set_ylabel("p99 latency (ms)")
    axis.set_title(f"serving within the bound -- target {target} (filled: VALID)")
    axis.legend(loc="best", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def per_class_changes(
    changes: Dict[str, Dict[str, float]], classes: Sequence[str], title: str, path: Path, unit: str = "points", floor: float = 1.0
) -> None:
    """One row per engine (or op), one column per class (or condition): the change against fp32 in
    `unit`, negative = worse; the colour scale spans at least +-`floor`."""
    import numpy as np

    plt = _pyplot()
    engines = list(changes)
    grid = np.array([[changes[engine].get(name, np.nan) for name in classes] for engine in engines])
    limit = max(floor, float(np.nanmax(np.abs(grid)))) if grid.size else floor
    digits = 1 if floor >= 1 else 3
    import textwrap

    labels_inches = 0.07 * max((len(engine) for engine in engines), default=0)  # long op names need the room
    fig, axis = plt.subplots(figsize=(max(6.0, 0.7 * len(classes) + 3 + labels_inches), 0.5 * len(engines) + 1.6))
    image = axis.imshow(grid, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
    axis.set_xticks(range(len(classes)), labels=list(classes), fontsize=8)
    axis.set_yticks(range(len(engines)), labels=engines, fontsize=8)
    for (row, col), value in np.ndenumerate(grid):
        if np.isfinite(value) and value != 0:  # white on the dark end of the scale, black on the pale middle
            ink = "white" if abs(value) > 0.55 * limit else "black"
            axis.text(col, row, f"{value:+.{digits}f}", ha="center", va="center", fontsize=8, color=ink)
    fig.colorbar(image, ax=axis, label=f"change vs fp32 ({unit}; red = loss)")
    axis.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")  # the colour bar's label was cut at the right edge
    plt.close(fig)


def flipped_grid(images, rows: List[Dict[str, str]], class_names: List[str], title: str, path: Path, limit: int = 24) -> None:
    """The test images whose prediction changed against fp32: label, both predictions with their
    confidence, captioned in the colour of the side that was right (green: the engine, red: fp32,
    grey: neither). Drawn with Pillow: a hundred engines' grids take a second, not a minute."""
    import numpy as np
    from PIL import Image, ImageDraw

    shown, cell, caption = rows[:limit], 72, 26
    columns = max(1, min(8, len(shown)))
    lines = -(-len(shown) // columns)
    header = [  # above the pictures, never over them; the sheet is as wide as its longest line
        f"{title} ({len(rows)} flipped{f', first {len(shown)} shown' if len(rows) > len(shown) else ''})",
        "caption: true label: fp32's prediction (confidence)",
        "         -> the engine's prediction (confidence)",
        "green = the engine right, red = fp32 right, grey = neither",
    ]
    top = 8 + 12 * len(header)
    width = max(columns * (cell + 8) + 8, 6 * max(len(line) for line in header) + 16)
    sheet = Image.new("RGB", (width, lines * (cell + caption + 8) + top), "white")
    pen = ImageDraw.Draw(sheet)
    for index, line in enumerate(header):
        pen.text((6, 4 + 12 * index), line, fill="black")
    for position, row in enumerate(shown):
        picture = np.asarray(images[int(row["test_index"])], dtype=np.float32)
        picture = np.repeat(picture, 3, axis=-1) if picture.shape[-1] == 1 else picture
        scaled = Image.fromarray((np.clip(picture, 0, 1) * 255).astype(np.uint8)).resize((cell, cell), Image.NEAREST)
        x, y = 8 + (position % columns) * (cell + 8), top + (position // columns) * (cell + caption + 8)
        sheet.paste(scaled, (x, y))
        name = lambda key, row=row: class_names[int(row[key])]
        confidence = lambda key, row=row: f" {float(row[key]):.2f}" if row.get(key) not in (None, "") else ""
        colour = RIGHT_COLOURS.get(row.get("right", "neither"), "#555555")
        pen.text((x, y + cell + 1), f"{name('label')}: {name('fp32_prediction')}{confidence('fp32_confidence')}", fill=colour)
        pen.text((x, y + cell + 13), f"-> {name('engine_prediction')}{confidence('engine_confidence')}", fill=colour)
    sheet.save(path)


BOX_COLOURS = {"truth": "#2e7d32", "reference": "#1f5fbf", "engine": "#d62728"}


def boxes_grid(
    split,
    worst: List[Dict[str, Any]],
    class_names: List[str],
    title: str,
    path: Path,
    scale: int = 3,
    tags: Optional[List[List[str]]] = None,
) -> None:
    """The test images with the most spurious + lost boxes: true boxes green, fp32's blue, the
    engine's red (above the score threshold), captioned with the counts and, where the data set has
    conditions, a second line with the image's tags. Pillow, like flipped_grid."""
    import numpy as np
    from PIL import Image, ImageDraw

    height, width = split.image_shape[:2]
    cell_w, cell_h, caption = width * scale, height * scale, 28 if tags else 14
    columns = max(1, min(4, len(worst)))
    lines = -(-len(worst) // columns)
    sheet = Image.new("RGB", (columns * (cell_w + 8) + 8, lines * (cell_h + caption + 8) + 24), "white")
    pen = ImageDraw.Draw(sheet)
    pen.text((6, 4), f"{title}: green = truth, blue = fp32, red = engine"[:160], fill="black")
    for position, entry in enumerate(worst):
        picture = np.clip(split[int(entry["test_index"])], 0, 1)
        picture = np.repeat(picture, 3, axis=-1) if picture.shape[-1] == 1 else picture
        x, y = 8 + (position % columns) * (cell_w + 8), 24 + (position // columns) * (cell_h + caption + 8)
        sheet.paste(Image.fromarray((picture * 255).astype(np.uint8)).resize((cell_w, cell_h), Image.NEAREST), (x, y))
        for side in ("truth", "reference", "engine"):
            for box in entry[side]["boxes"]:
                pen.rectangle(
                    [x + box[0] * scale, y + box[1] * scale, x + box[2] * scale - 1, y + box[3] * scale - 1],
                    outline=BOX_COLOURS[side],
                    width=1 if side == "truth" else 2,
                )
        pen.text(
            (x, y + cell_h + 1),
            f"#{entry['test_index']}: +{entry['spurious']} spurious ({entry['shadow']} shadow), -{entry['lost']} lost",
            fill="black",
        )
        if tags:
            pen.text((x, y + cell_h + 14), ", ".join(tags[int(entry["test_index"])]) or "(no condition)", fill="dimgray")
    sheet.save(path)


STYLE = (
    "body{font-family:sans-serif;max-width:1330px;margin:0 auto;padding:0 12px}"
    "table{border-collapse:collapse;font-size:11px;margin-bottom:8px}td,th{border:1px solid #ccc;padding:2px 3px}"
    "th{background:#f0f0f0;font-size:10px}tr.ref td{font-weight:bold;background:#eef4fb}tr.fail td{background:#fde7e7}"
    "td.noisy{background:#fff4c2}td.pass{color:#2e7d32;font-weight:bold}td.fail{color:#c62828;font-weight:bold}td.undecided{color:#b26a00;font-weight:bold}"
    "img{max-width:100%;height:auto}.note{font-size:12px;color:#333;margin:2px 0}.wide{overflow-x:auto;max-width:100%}"
)
# After load: each picture says whether it loaded, and the page whether it is wider than the window.
CHECK_SCRIPT = (
    "<script>window.addEventListener('load',function(){document.querySelectorAll('img').forEach(function(i){"
    "i.setAttribute('data-loaded',i.complete&&i.naturalWidth>0?'yes':'no');});"
    "document.body.setAttribute('data-overflow',document.documentElement.scrollWidth>window.innerWidth?'yes':'no');});"
    "</script>"
)


def accuracy_change(entry: Dict[str, Any]) -> str:
    """ "top-1 -0.44 [-1.8, +0.9] vs its fp32 twin; +27.1 [..] vs base fp32" and int8_mixed's validation."""
    from precisionflow.reporting.verdict_lines import interval_text

    against = "vs its fp32 twin" if entry.get("vs_base_fp32") else "vs fp32"
    text = f"{entry['accuracy_name']} {0.0 - entry['drop_points']:+.2f}{interval_text(entry.get('drop'))} points {against}"
    base = entry.get("vs_base_fp32")
    if base:
        text += f"; {0.0 - base['drop_points']:+.2f}{interval_text(base['drop'])} vs base fp32 (the fine-tune's extra training)"
    if entry.get("validation"):
        text += f"; {entry['validation']}" + (f" ({entry['validation_not_held']})" if entry.get("validation_not_held") else "")
    from precisionflow.reporting.verdict_lines import condition_side_by_side

    for line in condition_side_by_side(entry):  # int8_mixed: each budgeted condition, selection beside test
        text += f"; {line}"
    return text


def costly_ops_text(entry: Dict[str, Any]) -> List[str]:
    """For a condition the row FAILed: the ops that cost it most, from int8_mixed's sensitivity table."""
    from precisionflow.reporting.verdict_lines import costly_text

    return [
        f"ops that cost '{tag}' most (each alone in int8): " + costly_text(entry, ops)
        for tag, ops in (entry.get("costly_ops") or {}).items()
    ]


def verdict_rows(verdicts: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The verdict table's cells, as text (the template escapes them)."""
    from precisionflow.reporting.verdict_lines import speed_text

    rows = []
    for entry in verdicts:
        worst = entry["worst_class"]
        rows.append(
            {
                "failed": bool(entry["breaches"]),
                "verdict": entry["verdict"],
                "tip": f"{entry['node']} from {entry['model']}",
                "model": str(entry["model"]).rsplit("-", 1)[0],  # as the comparison table shows it: the hash is the tip
                # named as the console names it: two int8 rows of a calibration sweep told apart
                "precision": entry["precision"] + (f" [{entry['variant']}]" if entry.get("variant") else ""),
                "target": entry["target"],
                "ran": entry["ran"],
                "accuracy": accuracy_change(entry),
                "agreement": f"{entry['agreement']:.4f}",
                "worst": f"{worst[0]}: {0.0 - worst[1]:+.1f}" if worst else "",
                "speed": speed_text(entry).lstrip(", "),
                "why": "; ".join(entry["breaches"] + entry.get("undecided", []) + costly_ops_text(entry)),
            }
        )
    return rows


def table_rows(rows: List[Dict[str, Any]], columns: List[str], failed: set) -> List[Dict[str, Any]]:
    """The comparison table's rows: models show by their hash (the full id and the node are tooltips)."""
    shaped = []
    for row in rows:
        shown = dict(row, model=str(row.get("model", "")).rsplit("-", 1)[0])  # resnet_mini-fp32-e12: the hash is the tip
        tips = {"precision": row["node"], "model": row.get("model", "")}
        cells = [{"text": str(shown[c]), "noisy": str(shown[c]).endswith("*"), "tip": tips.get(c, "")} for c in columns]
        shaped.append(
            {
                "css": "ref" if precisions.is_reference(row["precision"]) else "fail" if row["node"] in failed else "",
                "cells": cells,
            }
        )
    return shaped


def html_page(
    rows: List[Dict[str, Any]],
    columns: List[str],
    plots: Dict[str, List[str]],
    notes: List[str] = (),
    verdicts: List[Dict[str, Any]] = (),
) -> str:
    """report.html from templates/report.html.j2 (Jinja2, every value escaped); `plots`: {section title: [image file names]}."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    environment = Environment(
        loader=PackageLoader("precisionflow.reporting", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    failed = {entry["node"].split("/", 1)[-1] for entry in verdicts if entry["breaches"]}
    return environment.get_template("report.html.j2").render(
        style=STYLE,
        check_script=CHECK_SCRIPT,
        verdicts=verdict_rows(list(verdicts)),
        verdict_models=len({entry["model"] for entry in verdicts}) > 1,  # a model column where several are judged
        notes=list(notes),
        rows=table_rows(rows, columns, failed),
        plots=plots,
        headers=[c.replace("_", "_\u200b") for c in columns],
    )  # header words may break at their underscores
