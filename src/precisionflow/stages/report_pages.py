"""Pictures and a page for the report stage: accuracy-vs-latency Pareto plots and report.html."""

import html
from pathlib import Path
from typing import Any, Dict, List


def pareto_front(points: List[tuple]) -> List[tuple]:
    """(latency, accuracy, label) points no other point beats on both (lower latency, higher accuracy)."""
    front = []
    for point in sorted(points, key=lambda p: (p[0], -p[1])):
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


def pareto_plot(rows: List[Dict[str, Any]], target: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted({r["model"] for r in rows if r["target"] == target})
    points = [(number(r["p50_ms_b1"]), float(r["top1"]), point_label(r, len(models) > 1))
              for r in rows if r["target"] == target and r["top1"] != ""]
    front = pareto_front(points)
    fig, axis = plt.subplots(figsize=(7, 4.2))
    axis.scatter([p[0] for p in points], [p[1] for p in points], color="#4f81bd", label="engines")
    axis.scatter([p[0] for p in front], [p[1] for p in front], facecolors="none", edgecolors="#c0504d", s=90,
                 label="on the front")
    axis.step([p[0] for p in front], [p[1] for p in front], where="post", color="#c0504d", label="Pareto front")
    for latency, accuracy, label in points:
        axis.annotate(label, (latency, accuracy), fontsize=7, xytext=(3, 3), textcoords="offset points")
    axis.set_xlabel("batch-1 p50 latency (ms)")
    axis.set_ylabel("top-1 accuracy")
    axis.set_title(f"accuracy vs latency -- target {target}")
    axis.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def html_page(rows: List[Dict[str, Any]], columns: List[str], plots: List[str], notes: List[str] = ()) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in columns) + "</tr>" for r in rows)
    images = "".join(f'<p><img src="{html.escape(name)}" alt="{html.escape(name)}"></p>' for name in plots)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>precisionflow report</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:2px 6px}</style></head><body>"
        "<h1>precisionflow report</h1><p>sps = samples/s; agreement = share of test samples whose prediction "
        "equals the fp32 reference's.</p>" + "".join(f"<p>{html.escape(line)}</p>" for line in notes) +
        f"<table><tr>{head}</tr>{body}</table>{images}</body></html>\n"
    )


def flipped_grid(images, rows: List[Dict[str, str]], class_names: List[str], title: str, path: Path, limit: int = 24) -> None:
    """The test images whose prediction changed against fp32, captioned label / fp32 / engine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = rows[:limit]
    columns = min(8, len(shown))
    lines = -(-len(shown) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(1.4 * columns, 1.6 * lines + 0.4), squeeze=False)
    for axis in axes.flat:
        axis.axis("off")
    for axis, row in zip(axes.flat, shown):
        image = images[int(row["test_index"])]
        axis.imshow(image[..., 0] if image.shape[-1] == 1 else image, cmap="gray" if image.shape[-1] == 1 else None)
        name = lambda key: class_names[int(row[key])]
        axis.set_title(f"{name('label')}: {name('fp32_prediction')}->{name('engine_prediction')}", fontsize=7)
    fig.suptitle(f"{title}: label: fp32 -> engine ({len(rows)} flipped)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
