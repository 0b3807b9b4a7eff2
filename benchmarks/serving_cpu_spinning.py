"""Issue 40 on this CPU: do ONNX Runtime's spinning intra-op threads take the cores the serving
harness needs? By default an ORT CPU session's thread pool spins for a while after each call
waiting for more work; in Offline nothing else wants the cores, in Server LoadGen's threads and the
Python worker do. The default experiment's engines served by the serve stage's own code
(stages.serve_engine.serve_side, the default's CPU settings) with `session.intra_op.allow_spinning`
left on (ORT's default) and off, alternating, `ROUNDS` times per engine.

    .venv/bin/python benchmarks/serving_cpu_spinning.py RESULTS_DIR ENGINE ... -> $OUT (default benchmarks/results/serving_cpu_spinning.json)
"""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from serving_cpu_ratio import BASE, load_average, written  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "2"))


def spinning(allowed: bool) -> None:
    """Every ORT session made from here on spins (ORT's default) or not."""
    from precisionflow.backends import onnxruntime_backend as backend

    plain = getattr(backend, "_plain_session_options", backend._session_options)
    backend._plain_session_options = plain

    def options(*args, **kwargs):
        made = plain(*args, **kwargs)
        made.add_session_config_entry("session.intra_op.allow_spinning", "1" if allowed else "0")
        return made

    backend._session_options = options


def main(results: Path, engines) -> None:
    from precisionflow.datasets.store import Split
    from precisionflow.stages import serve_engine

    data = next((results / "prepare_dataset").iterdir())
    images = Split(data, "test").head(64)
    rows = []
    for round_index in range(ROUNDS):
        for engine in engines:
            for allowed in (True, False) if round_index % 2 == 0 else (False, True):
                spinning(allowed)
                started, load = time.time(), load_average()
                _engine, found = serve_engine.serve_side(
                    results / "build_engine" / engine, images, BASE, Path(tempfile.mkdtemp())
                )
                row = {
                    "round": round_index,
                    "engine": engine,
                    "spinning": allowed,
                    "offline": found["Offline"].get("samples_per_second"),
                    "offline_valid": found["Offline"].get("valid"),
                    "server": found["Server"].get("rate"),
                    "server_over_offline": found.get("server_over_offline"),
                    "single_stream_p50_ms": round(found["SingleStream"].get("p50_ns", 0) / 1e6, 4),
                    "engine_call_ms": found.get("engine_call_ms"),
                    "why": found["Server"].get("why"),
                    "seconds": round(time.time() - started, 1),
                    "load_before": load,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    written({"results": str(results), "settings": BASE, "rows": rows}, "serving_cpu_spinning.json")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
