"""Issue 4: calibration time vs number of samples, per method, on digits / small_cnn.

.venv/bin/python benchmarks/calibration_time.py    -> benchmarks/results/calibration_time.json
"""

from _common import OUT, nodes, run_sweep, save


def main() -> None:
    results = OUT / "calibration-results"
    run_sweep(
        results,
        [
            "calibration=entropy,minmax,percentile",
            "calibration.num_samples=64,256,1024",
            "precisions=[fp32,int8]",
            "evaluate.duration_s=0.2",
            "evaluate.repeats=1",
            "evaluate.streams=[]",
        ],
    )
    rows = sorted(
        (
            {
                "method": r["params"]["method"],
                "samples": r["params"]["num_samples"],
                "calibration_seconds": r["summary"]["seconds"],
                "tensors": r["summary"]["tensors"],
            }
            for r in nodes(results, "calibrate")
        ),
        key=lambda row: (row["method"], row["samples"]),
    )
    save("calibration_time.json", rows)


if __name__ == "__main__":
    main()
