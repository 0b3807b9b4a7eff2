"""The serve stage's settings for experiment=h200, and the Server ratio from two served sides.

python benchmarks/h200_side_settings.py settings OUT.json
    what a workflow run of experiment=h200 hands the serve stage on the H200 (composed by the
    product: config.compose.expand + stages.serve_engine.reads), for engine_vs_plain.py side
python benchmarks/h200_side_settings.py ratio ENGINE.jsonl FP32.jsonl
    serve_engine.server_ratio of the two sides' answers, as the serve node computes it
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def settings(out: Path) -> None:
    from precisionflow.config.compose import expand
    from precisionflow.stages import NodeContext, serve_engine

    cfg = expand(["experiment=h200"])[0]
    composed = serve_engine.node_params(NodeContext(cfg, "h200", {"device_name": "NVIDIA H200"}))["serving"]
    out.write_text(json.dumps(composed, indent=1) + "\n")
    print(json.dumps(composed))


def side(path: Path) -> dict:
    answers = [json.loads(line) for line in path.read_text().splitlines() if '"what": "side"' in line]
    if not answers:
        raise SystemExit(f"{path}: no side's answer in it (the call was cut short?); its runs are there, no ratio")
    return answers[-1]["found"]


def ratio(engine_jsonl: Path, fp32_jsonl: Path) -> None:
    from precisionflow.stages import serve_engine

    results = {"engine": side(engine_jsonl), "fp32": side(fp32_jsonl)}
    for name, found in results.items():
        server = found["Server"]
        offline = found["Offline"].get("samples_per_second")
        print(
            f"{name}: Offline {offline:,.0f}/s; Server {server.get('rate')} ({found.get('server_over_offline')}x Offline), "
            f"repeats {server.get('repeats')}, why {server.get('why')}"
        )
    print("server_ratio:", json.dumps(serve_engine.server_ratio(results)))


if __name__ == "__main__":
    if sys.argv[1] == "settings":
        settings(Path(sys.argv[2]))
    else:
        ratio(Path(sys.argv[2]), Path(sys.argv[3]))
