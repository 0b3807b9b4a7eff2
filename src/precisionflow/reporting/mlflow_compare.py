"""`precisionflow compare` and `precisionflow ui`: the comparison table from MLflow itself.

Runs logged from other machines to the same tracking server line up here: the table is built
from `search_runs` over the engine runs (those tagged with a precision), optionally restricted to
some sweeps and to an MLflow filter. Ratios are the ones each engine's own side-by-side job
measured; nothing is divided across runs here either.
"""

import subprocess
import sys
from pathlib import Path
from typing import List, Optional

from precisionflow import precisions
from precisionflow.errors import ConfigError
from precisionflow.reporting.tracking import SWEEP_TAG

# (column, MLflow field); the derived columns (variant, ran, change, x_fp32) are made in `table`
# from the fields beside them, so two engines of one precision are told apart and every change
# and ratio carries its sign and interval, as the console prints them.
COLUMNS = [
    ("precision", "tags.precision"),
    ("variant", None),
    ("ran", None),
    ("verdict", "tags.verdict"),
    ("change", None),
    ("x_fp32", None),
    ("x_server", "metrics.x_server"),
    ("model", "tags.node.train_model"),
    ("target", "tags.target"),
    ("device", "tags.device_name"),
    ("top1", "metrics.top1"),
    ("worst_condition", "tags.worst_condition"),
    ("agreement", "metrics.agreement"),
    ("flipped", "metrics.flipped"),
    ("map50", "metrics.map50"),
    ("map", "metrics.map"),
    ("spurious_per_100", "metrics.spurious_per_100"),
    ("shadow_per_100", "metrics.shadow_per_100"),
    ("x_fp32_b1", "metrics.x_fp32_b1"),
    ("x_fp32_bmax", "metrics.x_fp32_bmax"),
    ("x_tf_b1", "metrics.x_tf_b1"),
    ("x_tf_bmax", "metrics.x_tf_bmax"),
    ("b1_p50_ms", "metrics.b1_p50_ms"),
    ("executed", "tags.executed"),
    ("evaluation", "tags.precisionflow.node"),
    ("commit", "tags.git_commit"),
]
SOURCES = {  # what the derived columns read
    "method": "params.calibrate.method",
    "simulates": "tags.simulates",
    "differs": "tags.differs",  # what sets the engine apart in its results folder (track_mlflow: n64, e4)
    "drop": "metrics.top1_drop_points",
    "drop_low": "metrics.top1_drop_low",
    "drop_high": "metrics.top1_drop_high",
    "x_fp32_verdict": "metrics.x_fp32_verdict",
    "x_fp32_low": "metrics.x_fp32_low",
    "x_fp32_high": "metrics.x_fp32_high",
    "x_server_low": "metrics.x_server_low",
    "x_server_high": "metrics.x_server_high",
    "as_requested": "tags.executed_as_requested",
}
# Shown in every table, in this order, filled or not: the same shape whatever was swept.
CORE = ("precision", "variant", "ran", "verdict", "change", "x_fp32", "x_server", "target")
# One number format per column (as the run's console prints them).
FORMATS = {
    **{name: "{:.4f}" for name in ("top1", "agreement", "map50", "map")},
    **{name: "{:.2f}" for name in ("x_fp32_b1", "x_fp32_bmax", "x_tf_b1", "x_tf_bmax", "spurious_per_100", "shadow_per_100")},
    "b1_p50_ms": "{:.3f}",
    "flipped": "{:.0f}",
}


def default_uri(results: Path) -> str:
    return f"sqlite:///{Path(results).resolve() / 'mlflow.db'}"


def engine_runs(uri: str, experiment: str, sweeps: List[str], where: Optional[str]):
    """The engine runs (a pandas DataFrame) of `experiment`, in the given sweeps, matching `where`."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    if mlflow.get_experiment_by_name(experiment) is None:
        raise ConfigError(
            f"compare: no experiment '{experiment}' at {uri}; expected one that precisionflow run logged to "
            "(tracking.experiment), or pass --experiment / --uri."
        )
    filters = [where] if where else []
    runs = mlflow.search_runs(experiment_names=[experiment], filter_string=" and ".join(filters) or "", max_results=50000)
    if runs.empty or "tags.precision" not in runs:
        return runs.iloc[0:0]
    runs = runs[runs["tags.precision"].notna()]
    if sweeps:
        tags = [f"tags.{SWEEP_TAG}.{sweep}" for sweep in sweeps]
        present = [tag for tag in tags if tag in runs]
        runs = runs[runs[present].notna().any(axis=1)] if present else runs.iloc[0:0]
    return runs


def model_name(node: str) -> str:
    """'train_model/resnet_mini-fp32-e12-1090633d2503' -> 'resnet_mini-fp32-e12' (the id's hash left off)."""
    return node.split("/", 1)[-1].rsplit("-", 1)[0] if node else node


def _field(run, column: str):
    value = run.get(column) if column else None
    return None if value is None or value != value else value  # NaN: not logged


def ran_of(label: str, as_requested: str) -> str:
    """'int8 graph, ran int8 9/10 on CPUExecutionProvider -- ...' -> 'int8 9/10' ('(!)' when not as asked)."""
    if ", ran " not in (label or ""):
        return ""
    ran = label.split(", ran ", 1)[1].split(" on ", 1)[0]
    return ran + (" (!)" if as_requested == "False" else "")


def signed(value: float) -> str:
    return f"{value + 0.0:+.2f}" if round(value, 2) != 0 else "+0.00"  # no "-0.00"


def derived(run, row: dict) -> dict:
    """variant, ran, the signed change with its interval, the speed-up with its interval."""
    get = {name: _field(run, column) for name, column in SOURCES.items()}
    calibrated = precisions.calibrated_by(row["precision"]) == "ptq"  # QAT's ranges are learned
    variant = [str(get["method"])] if get["method"] and calibrated else []
    variant += ["TRT-sim"] if get["simulates"] else []
    variant += [str(get["differs"])] if get["differs"] else []
    change = ""
    if get["drop"] is not None:  # the budget's figure is a drop; the column is the change (a drop is negative)
        change = signed(-get["drop"])
        if get["drop_low"] is not None and get["drop_high"] is not None:
            change += f" [{signed(-get['drop_high'])}, {signed(-get['drop_low'])}]"
    ran = ran_of(row["executed"], str(get["as_requested"]))
    speed = ""
    if None not in (get["x_fp32_verdict"], get["x_fp32_low"], get["x_fp32_high"]):  # the ratio the verdict read
        speed = f"{get['x_fp32_verdict']:.2f} [{get['x_fp32_low']:.2f}, {get['x_fp32_high']:.2f}]"
    elif row["x_fp32_bmax"] != "" and not get["simulates"]:  # measured, no verdict read it: the ratio alone
        speed = f"{float(row['x_fp32_bmax']):.2f} (bmax)"
    server = row["x_server"]
    if server != "" and None not in (get["x_server_low"], get["x_server_high"]):
        server = f"{float(server):.2f} [{get['x_server_low']:.2f}, {get['x_server_high']:.2f}]"
    elif server != "":
        server = f"{float(server):.2f} (1 ratio)"  # one pair, or pairs that agree: no interval to give
    found = {"variant": ", ".join(variant), "ran": ran, "change": change, "x_fp32": speed, "x_server": server}
    return {**found, **blank_reasons(found, row["precision"], bool(get["simulates"]))}


def blank_reasons(found: dict, precision: str, simulates: bool) -> dict:
    """A blank ratio or change says why (the reference, a simulation, the QAT twin), never a guess:
    "not logged (ran fp32's kernels)" once stood beside a twin that is never timed at all."""
    why = (
        "not timed (a simulation)"
        if simulates
        else "not timed (int8_qat's twin)"
        if precision == "fp32_twin"
        else "ref"
        if precision == precisions.reference().name
        else "n/a (TensorFlow)"
        if precision == "tensorflow"
        else "no ratio logged"
    )
    filled = {name: why for name in ("x_fp32", "x_server") if found[name] == ""}
    if found["change"] == "" and precision == precisions.reference().name and not simulates:
        filled["change"] = "ref"
    return filled


def table(runs) -> List[dict]:
    rows = []
    for _, run in runs.iterrows():
        row = {}
        for name, column in COLUMNS:
            value = _field(run, column)
            row[name] = (
                "" if value is None else (FORMATS.get(name, "{}").format(value) if isinstance(value, float) else str(value))
            )
        row.update(derived(run, row))
        row["model"] = model_name(row["model"])
        rows.append(row)
    return sorted(rows, key=lambda r: (r["model"], r["target"], r["precision"], r["variant"]))


# The markdown table fits this many columns (like the run's table): the first columns that fit,
# less those no row fills; --all-columns keeps every column (csv always does).
WIDTH = 120


def shown_columns(rows: List[dict], all_columns: bool) -> List[str]:
    """The columns, most important first, that keep the rendered markdown table within WIDTH."""

    names = [name for name, _ in COLUMNS]
    if len({row["model"] for row in rows}) > 1:  # engines of several models: the model names the row, so it comes second
        names.remove("model")
        names.insert(1, "model")
    if all_columns:
        return names
    core = [name for name in names if name in CORE or (name == "model" and names.index("model") == 1)]
    chosen: List[str] = list(core)
    for name in [name for name in names if name not in core and any(row[name] != "" for row in rows)]:
        trial = chosen + [name]
        if rendered_width(rows, trial) <= WIDTH:
            chosen = trial
    chosen = [name for name in names if name in chosen]  # the table's order, whatever fitted
    # the core columns themselves can be wider than WIDTH (long intervals): the last ones give way
    while len(chosen) > 4 and rendered_width(rows, chosen) > WIDTH:
        chosen.pop()
    return chosen


def rendered_width(rows: List[dict], names: List[str]) -> int:
    from tabulate import tabulate

    text = tabulate([[row[n] for n in names] for row in rows], headers=names, tablefmt="github", disable_numparse=True)
    return max(len(line) for line in text.splitlines())


def render(rows: List[dict], fmt: str, all_columns: bool = False) -> str:
    names = [name for name, _ in COLUMNS] if fmt == "csv" else shown_columns(rows, all_columns)
    if fmt in ("csv", "markdown"):
        return rendered(rows, names, fmt)
    raise ConfigError(f"compare --format: expected csv or markdown, found '{fmt}'.")


def compare(
    uri: str, experiment: str, sweeps: List[str], where: Optional[str], fmt: str, all_columns: bool = False, models: str = ""
) -> str:
    """The engine runs' comparison table; with `models` (DATASET:METRIC, e.g. test/dim:agreement)
    the engines as logged models ranked on that data set (compare_models)."""
    if models:
        data_set, _, metric = models.rpartition(":")
        return compare_models(uri, experiment, data_set or "test", metric, fmt)
    rows = table(engine_runs(uri, experiment, sweeps, where))
    if not rows:
        raise ConfigError(
            f"compare: no engine runs in experiment '{experiment}' at {uri}"
            + (f" for sweeps {sweeps}" if sweeps else "")
            + (f" matching {where!r}" if where else "")
            + "."
        )
    return render(rows, fmt, all_columns)


MODEL_COLUMNS = ("rank", "model", "precision", "target", "verdict", "ran")


def compare_models(uri: str, experiment: str, data_set: str, metric: str, fmt: str) -> str:
    """The engines as MLflow's logged models, ranked by `metric` on the data set named `data_set`
    (`test`, `test/<condition>`, the selection split), read back through search_logged_models:
    one table per data set of that name (one per data node)."""
    from precisionflow.reporting import engine_models, tracking

    client = tracking.client_for(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ConfigError(f"compare: no experiment '{experiment}' at {uri}; pass --experiment / --uri.")
    tables = engine_models.ranked(client, found.experiment_id, data_set, metric)
    if not tables:
        raise ConfigError(
            f"compare --models: no engine model has '{metric}' on a data set named '{data_set}' in '{experiment}'; "
            "data sets are named test, test/<condition> and the selection split (int8_mixed)."
        )
    parts = []
    for digest, models in tables:
        rows = []
        for rank, model in enumerate(models, 1):
            on_set = {m.key[len(engine_models.PREFIX) :]: m.value for m in model.metrics or [] if m.dataset_digest == digest}
            row = {
                "rank": rank,
                "model": model.name,
                "precision": model.params.get("precision", ""),
                "target": model.params.get("target", ""),
                "verdict": model.tags.get("verdict", ""),
                "ran": model.tags.get("ran", ""),
                metric: round(on_set[metric], 4) if metric in on_set else "",
            }
            low, high = on_set.get("drop_low", on_set.get("low")), on_set.get("drop_high", on_set.get("high"))
            row["drop [low, high]"] = (
                f"{on_set.get('drop_points', on_set.get('drop')):+.2f} [{low:+.2f}, {high:+.2f}]"
                if low is not None and high is not None
                else ""
            )
            rows.append(row)
        parts.append(f"{data_set} (digest {digest}), by {metric}:\n" + _render_rows(rows, fmt))
    return "\n".join(parts)


def _render_rows(rows: List[dict], fmt: str) -> str:
    return rendered(rows, list(rows[0]) if rows else list(MODEL_COLUMNS), fmt)


def rendered(rows: List[dict], names: List[str], fmt: str) -> str:
    """`rows` as CSV (every row, these columns) or a GitHub markdown table."""
    if fmt == "csv":
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)
        return buffer.getvalue()
    from tabulate import tabulate

    return tabulate([[row[n] for n in names] for row in rows], headers=names, tablefmt="github", disable_numparse=True) + "\n"


def ui(uri: str, port: int, answer_timeout_s: float = 300.0) -> int:
    """MLflow's UI on the project's store, quiet, until Ctrl-C or SIGTERM (either stops the server
    and its workers: a SIGTERM once left `mlflow server` serving on the port). The links are printed
    once the server answers -- printed at start they answered only 20 s (quiet machine) to 110 s
    (loaded) later."""
    import os
    import signal

    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "GUNICORN_CMD_ARGS": "--log-level warning", "UVICORN_LOG_LEVEL": "warning"}
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def stop(signum=None, _frame=None):  # the server and every worker it started: its own process group
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        print("MLflow UI stopped.", flush=True)
        if signum is not None:
            raise SystemExit(0)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        print(f"MLflow UI for {uri}: starting at {base} ...", flush=True)
        if not answers(base, server, answer_timeout_s):
            code = server.poll()
            print(
                f"The MLflow server {'exited with ' + str(code) if code is not None else 'did not answer in time'}; run "
                f"`{' '.join(command)}` to see its messages.",
                file=sys.stderr,
            )
            stop()
            return code or 1
        print(f"MLflow UI for {uri}: {base}  (Ctrl-C stops it)", flush=True)
        print(f"  runs, with precisionflow's columns: {runs_link(uri, base)}", flush=True)
        print(f"  the trade-off chart: {runs_link(uri, base, 'trade_off')}", flush=True)
        code = server.wait()
        if code:
            print(f"The MLflow server exited with {code}; run `{' '.join(command)}` to see its messages.", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        stop()
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def answers(base: str, server, timeout_s: float) -> bool:
    """Whether the server at `base` answers its health check before `timeout_s` (False at once if
    it exits)."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as reply:  # noqa: S310 -- our own local server
                if reply.status == 200:
                    return True
        except OSError:
            time.sleep(0.5)
    return False


def runs_link(uri: str, base: str, view: str = "runs") -> str:
    """The runs page (or `view`: trade_off) of the precisionflow experiment in the store, or the plain
    UI if there is none yet."""
    from precisionflow.reporting import tracking

    client = tracking.client_for(uri)
    found = client.get_experiment_by_name("precisionflow")
    return tracking.ui_links(base, found.experiment_id)[view] if found else base
