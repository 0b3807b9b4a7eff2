"""Two sweeps logged to a real `mlflow server` on localhost from two results folders (standing in
for two machines), read back as one comparison table by `precisionflow compare` (slow)."""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_for_mlflow
from tests.test_end_to_end import TINY, executed

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    subprocess.run(
        [sys.executable, "-m", "mlflow", "db", "upgrade", f"sqlite:///{root / 'mlflow.db'}"], check=True, capture_output=True
    )
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_for_mlflow(uri)
        yield uri
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


SWEEP = [
    *TINY,
    "evaluate.serving.enabled=false",  # serving is the end-to-end test's; MLflow's logging is what is tested here
    "target_defs.local.framework=false",  # so is the TensorFlow baseline
]


def run_sweep(results: Path, uri: str, *overrides: str) -> str:
    command = [
        sys.executable,
        "-m",
        "precisionflow.cli",
        "run",
        "--cores",
        "2",
        f"results_dir={results}",
        f"tracking.uri={uri}",
        *SWEEP,
        *overrides,
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=results.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def sweep_id(results: Path) -> str:
    [track] = results.glob("track_mlflow/*/node.json")
    return json.loads(track.read_text())["summary"]["sweep_id"]


def compare(uri: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "precisionflow.cli", "compare", "--uri", uri, *args], capture_output=True, text=True
    )


def test_compare_lines_up_sweeps_logged_from_two_machines(server, tmp_path, node_store):
    machine_a, machine_b = tmp_path / "a" / "results", tmp_path / "b" / "results"
    machine_a.parent.mkdir()
    machine_b.parent.mkdir()
    # the trained model and its graphs come from the session's node store (the same ids): each machine
    # runs its 3 engines' builds, evaluations and ratio jobs, its report and its MLflow logging
    assert len(node_store.seed(machine_a, SWEEP)) == 7 and executed(run_sweep(machine_a, server)) == 11
    assert len(node_store.seed(machine_b, SWEEP)) == 7
    assert executed(run_sweep(machine_b, server, "evaluate.min_iterations=12")) == 11
    both = compare(server, "--format", "csv")
    assert both.returncode == 0, both.stderr
    lines = both.stdout.strip().splitlines()
    assert (
        lines[0].startswith("precision,variant,ran,verdict,change,x_fp32") and len(lines) == 1 + 6
    )  # 3 engines from each machine
    only_a = compare(server, "--sweep", sweep_id(machine_a), "--format", "markdown")
    assert only_a.returncode == 0 and only_a.stdout.count("\n") == 2 + 3
    assert max(len(line) for line in only_a.stdout.splitlines()) <= 120 and "| verdict" in only_a.stdout
    int8 = compare(server, "--where", "tags.precision = 'int8'", "--format", "csv")
    assert int8.stdout.strip().count("\n") == 2 and all(row.startswith("int8,") for row in int8.stdout.splitlines()[1:])
    missing = compare(server, "--experiment", "nothing")
    assert missing.returncode == 2 and "no experiment 'nothing'" in missing.stderr


def log_one_sweep(uri: str, sweep: int, children: int, steps: int) -> None:
    """What one track_mlflow job does to the store: a parent run, its children, metric histories."""
    from precisionflow.reporting import tracking

    client = tracking.client_for(uri)
    experiment_id = tracking.init_store(uri, "concurrent", Path("."))
    parent, _ = tracking.get_or_create_run(client, experiment_id, {"precisionflow.sweep": f"s{sweep}"}, f"sweep {sweep}")
    for child in range(children):
        run, _ = tracking.get_or_create_run(
            client, experiment_id, {"node.id": f"s{sweep}-c{child}"}, f"c{child}", parent.info.run_id
        )
        for step in range(steps):
            client.log_metric(run.info.run_id, "loss", 1.0 / (step + 1), step=step)
        client.set_terminated(run.info.run_id)
    client.set_terminated(parent.info.run_id)


@pytest.mark.parametrize("store", ["server", "sqlite file"])
def test_concurrent_writers_to_one_store_lose_and_duplicate_nothing(server, tmp_path, store):
    import multiprocessing

    from precisionflow.reporting import tracking

    uri = server if store == "server" else f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.init_store(uri, "concurrent", tmp_path)  # the store is initialised once, before jobs fan out
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=log_one_sweep, args=(uri, sweep, 3, 25)) for sweep in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert [worker.exitcode for worker in workers] == [0] * 8
    client = tracking.client_for(uri)
    experiment = client.get_experiment_by_name("concurrent")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 8 and len(children) == 24
    assert len({r.data.tags["node.id"] for r in children}) == 24  # no duplicates
    for child in children:
        assert [m.step for m in client.get_metric_history(child.info.run_id, "loss")] == list(range(25))


def test_ui_prints_its_link_once_the_server_answers_and_stops_it_on_sigterm(tmp_path):
    """The link was printed at start (it answered 20-110 s later), and a SIGTERM to `precisionflow
    ui` left `mlflow server` serving on the port."""
    import time
    import urllib.request

    port = free_port()
    ui = subprocess.Popen(
        [sys.executable, "-m", "precisionflow.cli", "ui", "--results", str(tmp_path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.time() + 300
        line = ""
        while time.time() < deadline and "(Ctrl-C stops it)" not in line:
            line = ui.stdout.readline()
            assert line or ui.poll() is None, "ui exited before printing its link"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as reply:  # it answers now
            assert reply.status == 200
        ui.send_signal(signal.SIGTERM)
        ui.wait(30)
    finally:
        if ui.poll() is None:
            ui.kill()
    time.sleep(1)
    with socket.socket() as probe:  # nothing serves on the port any more
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_the_trade_off_chart_draws_every_engine_run_of_a_16_engine_sweep(server, tmp_path):
    """MLflow's chart shows its first 10 runs unless the view says otherwise: 16 engine runs (two
    calibrations, two models, four precisions) on a real server, the printed chart link in headless
    Chromium at 1400x900 -- all 16 points drawn, the y axis the signed change (up = better)."""
    import re

    from mlflow import MlflowClient

    from precisionflow.reporting import tracking
    from tests.test_end_to_end import chromium_flags

    flags = chromium_flags(tmp_path, 25000, width=1400)
    client = MlflowClient(server)
    experiment = client.create_experiment("sixteen-engines")
    for index in range(16):
        precision = ("fp32", "fp16", "int8", "int8_qat")[index % 4]
        run = client.create_run(
            experiment, tags={"precision": precision, "target": "local", "mlflow.runName": f"{precision} #{index}"}
        )
        client.log_metric(run.info.run_id, "accuracy_change_points", round(-0.25 * (index % 5), 2))
        client.log_metric(run.info.run_id, tracking.TRADE_OFF_AXES["x"], round(1.0 + 0.1 * index, 3))
        client.set_terminated(run.info.run_id)
    tracking.share_view(client, experiment)
    chart_link = tracking.ui_links(server, experiment)["trade_off"]
    for budget_ms in (25000, 60000, 120000):  # the chart draws after the runs load (slow on a loaded machine)
        flags = chromium_flags(tmp_path, budget_ms, width=1400)
        chart = subprocess.run(flags + ["--dump-dom", chart_link], capture_output=True, text=True, timeout=240).stdout
        if 'class="g-ytitle"' in chart:
            break
    ytitle = re.search(r'class="g-ytitle".*?data-unformatted="([^"]+)"', chart).group(1)
    assert ytitle == tracking.TRADE_OFF_AXES["y"] == "accuracy_change_points"
    scatter = chart[chart.index("precisionflow: accuracy change") :]
    scatter = scatter[: scatter.index('class="g-ytitle"')]
    points = len(re.findall(r'class="point[ "]', scatter))  # plotly's markers: class="point plotly-customdata"
    assert points == 16, points
