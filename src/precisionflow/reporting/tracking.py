"""MLflow helpers: store initialisation and idempotent run lookup.

A fresh SQLite store races when several processes create it at once, so the store and the
experiment are created once (init_store) before jobs fan out. Runs are found again by tags, so
logging the same node twice updates one run instead of adding another.
"""

import subprocess
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

SWEEP_TAG = "precisionflow.sweep"
NODE_TAG = "precisionflow.node"
COMPLETE_TAG = "precisionflow.complete"
PROJECT_ROOT = Path(__file__).resolve().parents[3]  # the checkout, when running from one


def resolve_uri(uri: Optional[str], results_dir: Path) -> str:
    return uri or f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"


def client_for(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def init_store(uri: str, experiment: str, results_dir: Path) -> str:
    """Create the store's schema and the experiment if missing; return the experiment id."""
    client = client_for(uri)
    found = client.get_experiment_by_name(experiment)
    if found is not None:
        return found.experiment_id
    artifacts = (Path(results_dir).resolve() / "mlartifacts").as_uri() if uri.startswith("sqlite") else None
    # Without this tag MLflow 3's UI opens the experiment as a GenAI project (an empty traces page).
    return client.create_experiment(
        experiment, artifact_location=artifacts, tags={"mlflow.experimentKind": "custom_model_development"}
    )


def find_run(client, experiment_id: str, tags: Dict[str, str]):
    query = " and ".join(f"tags.`{key}` = '{value}'" for key, value in tags.items())
    runs = client.search_runs([experiment_id], filter_string=query, max_results=1)
    return runs[0] if runs else None


def get_or_create_run(client, experiment_id: str, tags: Dict[str, str], name: str, parent_id: str = None) -> Tuple[Any, bool]:
    """(run, created): the run carrying `tags`, created (with those tags, under `parent_id`) if none does.

    The lookup ignores the parent: a node logged by one sweep is the same run for every later
    sweep that shares it (which tags it instead of logging a copy)."""
    run = find_run(client, experiment_id, tags)
    if run is not None:
        return run, False
    created = dict(tags, **{"mlflow.runName": name}, **({"mlflow.parentRunId": parent_id} if parent_id else {}))
    return client.create_run(experiment_id, tags=created), True


def resumable_run(client, experiment_id: str, tags: Dict[str, str], name: str, parent_id: str = None):
    """The run carrying `tags`: complete as logged before, or new. A logging that died half-way
    (no COMPLETE_TAG) is deleted and started over, so no metric point is ever logged twice."""
    run, created = get_or_create_run(client, experiment_id, tags, name, parent_id)
    if not created and run.data.tags.get(COMPLETE_TAG) != "1":
        children = client.search_runs(
            [experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run.info.run_id}'", max_results=1
        )
        if children:  # a parent logged before runs were marked complete: deleting it would orphan them
            client.set_tag(run.info.run_id, COMPLETE_TAG, "1")
            return client.get_run(run.info.run_id)
        client.delete_run(run.info.run_id)  # deleted runs are not found again: a fresh one replaces it
        run, _ = get_or_create_run(client, experiment_id, tags, name, parent_id)
    return run


def git_commit() -> str:
    """The code that ran: the checkout's commit (with -dirty) when precisionflow runs from one, else
    the installed package's version (a wheel has no git history)."""
    if not (PROJECT_ROOT / ".git").exists():
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"precisionflow {version('precisionflow')} (installed)"
        except PackageNotFoundError:
            return "unknown"
    try:
        commit = subprocess.check_output(
            ["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"], text=True, stderr=subprocess.DEVNULL
        ).strip()
        dirty = subprocess.check_output(
            ["git", "-C", str(PROJECT_ROOT), "status", "--porcelain", "--untracked-files=no"],
            text=True,
            stderr=subprocess.DEVNULL,
        ).strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def flatten(tree: Any, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from flatten(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, tree


# The runs page as precisionflow opens it (MLflow 3.15-3.18: an experiment tag
# mlflow.sharedViewState.<key> holds the runs page's state as JSON, applied by
# .../runs?viewStateShareKey=<key>; the format is MLflow's internal ExperimentPageUIState, so
# requirements.lock pins MLflow and tests/test_mlflow_ui.py checks the page in Chromium).
VIEW_KEY = "precisionflow"
# The trade-off first: at 1400 px, beside MLflow's own Run Name / Created / Dataset columns and its
# assistant panel, the grid renders about six columns (Chromium, MLflow 3.17.2); the long
# "executed" label comes after them.
VIEW_COLUMNS = (
    "tags.`precision`",
    "tags.`verdict`",
    "metrics.`accuracy_change_points`",
    "metrics.`x_fp32_bmax`",
    "metrics.`x_server`",
    "metrics.`accuracy_change_low`",
    "metrics.`accuracy_change_high`",
    "metrics.`top1_percent`",
    "tags.`executed`",
    "metrics.`map`",
    "metrics.`spurious_per_100`",
    "tags.`target`",
    "tags.`worst_condition`",
)


ENGINE_RUNS_FILTER = "tags.precision LIKE '%'"


TRADE_OFF_KEY = "precisionflow-tradeoff"
# The trade-off chart: each engine run's accuracy change against its speed ratio to fp32, both
# measured side by side in the same job (the x axis is never a standalone throughput: two engines
# timed apart would be drawn apart for the machine's load, not their kernels).
# Up is better on both axes: the y axis is the signed change (accuracy_change_points, rounded to 0.01
# point) -- the drop put there once read "up = worse" while the report's Pareto reads "up = better".
# Every engine run is drawn: x is x_fp32_charted (track_mlflow.chart_x) -- the measured x_fp32_bmax,
# 1.0 for the fp32 reference, 0.0 for a run with no measured ratio (its `on_chart` tag says why).
TRADE_OFF_AXES = {"x": "x_fp32_charted", "y": "accuracy_change_points"}
# MLflow's runs view shows its first 10 runs in a chart unless told otherwise: a sweep's 16 engine
# runs were cut to 10 (the int8 entropy and minmax runs among the missing). MLflow 3.17's
# ExperimentPageUIState: runsHiddenMode FIRST_10_RUNS (its default) | FIRST_20_RUNS | SHOW_ALL | ...
SHOW_EVERY_RUN = "SHOW_ALL"


def share_view(client, experiment_id: str, sort_metric: str = "top1", not_drawn: int = 0) -> None:
    """The runs page's columns (precision, what ran, verdict, top-1 and its change with the interval,
    speed ratios) in that order, best first by `sort_metric`; and the same runs as a chart view that
    opens on the trade-off (TRADE_OFF_AXES).

    Sorting by a metric is what shows the engine runs without clicking: MLflow nests child runs under
    their collapsed sweep only while the page is sorted by creation time, and a shared view cannot
    expand them (MLflow 3.17 drops `runsExpanded` from shared state). `columnOrder` puts the tag
    columns first: the grid renders only the columns inside the window."""
    import json

    state = {
        "selectedColumns": list(VIEW_COLUMNS),
        "columnOrder": list(VIEW_COLUMNS),
        "orderByKey": f"metrics.`{sort_metric}`",
        "orderByAsc": False,
        "groupBy": None,
        # Only the engine runs: evaluate_engine children carry a `precision` tag, training, fine-tune
        # and sweep runs do not. (Set in the URL instead, the filter resets the view's columns and
        # order: checked in Chromium with MLflow 3.17.)
        "searchFilter": ENGINE_RUNS_FILTER,
        "runsHiddenMode": SHOW_EVERY_RUN,
    }
    client.set_experiment_tag(experiment_id, f"mlflow.sharedViewState.{VIEW_KEY}", json.dumps(state))
    chart = trade_off_state(state, not_drawn)
    client.set_experiment_tag(experiment_id, f"mlflow.sharedViewState.{TRADE_OFF_KEY}", json.dumps(chart))


def trade_off_state(runs_view: dict, not_drawn: int = 0) -> dict:
    """The runs view's state with one chart section first, holding one scatter card: accuracy change
    against speed ratio, a card as wide as the chart area. MLflow appends its own per-metric charts
    below it (MLflow 3.17's chart cards: type, xaxis/yaxis {key, type}, their section's uuid)."""
    section = "precisionflow-tradeoff-section"
    card = {
        "uuid": "precisionflow-tradeoff-scatter",
        "type": "SCATTER",
        "xaxis": {"key": TRADE_OFF_AXES["x"], "type": "METRIC"},
        "yaxis": {"key": TRADE_OFF_AXES["y"], "type": "METRIC"},
        "runsCountToCompare": 100,
        "metricSectionId": section,
        "deleted": False,
        "isGenerated": False,
    }
    name = (
        "precisionflow: accuracy change vs fp32 (points, up = better) against speed vs fp32 at bmax "
        "(x = 1: the fp32 reference; x = 0: not timed, see the run's on_chart tag)"
    )
    if not_drawn:  # runs with no accuracy change against fp32 have no y: said, never silently dropped
        name += f"; not drawn: {not_drawn} engine run(s) with no accuracy change against fp32 (int8_qat's twin)"
    return {
        **runs_view,
        "compareRunSections": [
            {"uuid": section, "name": name, "display": True, "isReordered": False, "columns": 1, "cardHeight": 440}
        ],
        "compareRunCharts": [card],
        "isAccordionReordered": True,  # keep this section first
    }


def ui_links(base: str, experiment_id: str) -> dict:
    """The runs page in model-training mode with precisionflow's view (engine runs only, best first),
    and the same runs opened on the trade-off chart."""
    page = f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey="
    return {"runs": page + VIEW_KEY, "trade_off": page + TRADE_OFF_KEY + "&compareRunsMode=CHART"}
