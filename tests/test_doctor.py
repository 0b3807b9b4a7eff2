import json

from precisionflow import cli, doctor
from precisionflow.config.compose import expand


def _engine(results, name, **changes):
    import onnxruntime

    from precisionflow.devices import cpu_name

    folder = results / "build_engine" / name
    folder.mkdir(parents=True)
    description = {
        "backend": "onnxruntime",
        "backend_version": onnxruntime.__version__,
        "device": "cpu",
        "device_name": cpu_name(),
        **changes,
    }
    (folder / "engine.json").write_text(json.dumps(description))


def test_status_flags_engines_of_another_runtime_or_device(tmp_path, capsys):
    _engine(tmp_path, "fp32-local-current")
    _engine(tmp_path, "fp32-local-old", backend_version="1.20.0")
    _engine(tmp_path, "fp16-h100", device_name="NVIDIA H100 80GB HBM3")
    states = {row["engine"]: row["state"] for row in doctor.engine_status(tmp_path)}
    assert states["fp32-local-current"] == "ok"
    assert states["fp32-local-old"].startswith("STALE: built with backend_version 1.20.0")
    assert "device_name NVIDIA H100" in states["fp16-h100"]
    assert cli.main(["status", "--results", str(tmp_path)]) == 1


def test_doctor_names_devices_backends_and_targets():
    report = doctor.doctor(expand([])[0])
    assert "CPU:" in report and "onnxruntime" in report
    assert "local    onnxruntime on" in report
    assert "h100" in report
