"""Which GPU a job ran on is matched by UUID and recorded, never hashed (devices.py)."""

from precisionflow import devices


def test_cuda_uuid_bytes_read_as_nvidia_smi_writes_them():
    raw = bytes.fromhex("8f1b2c3d4e5f60718293a4b5c6d7e8f9")
    assert devices.uuid_text(raw) == "GPU-8f1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"


def test_the_gpus_index_uuid_and_bus_stay_out_of_node_ids(monkeypatch):
    facts = {
        "device_name": "NVIDIA H200",
        "compute_capability": "9.0",
        "driver": "580.1",
        "uuid": "GPU-1",
        "pci_bus": "00000000:19:00.0",
        "gpu": "3",
    }
    monkeypatch.setattr(devices, "gpu_facts", lambda selector=None: dict(facts))
    assert devices.gpu_identity() == {"device_name": "NVIDIA H200", "compute_capability": "9.0", "driver": "580.1"}
    assert devices.gpu_record() == {"index": "3", "uuid": "GPU-1", "pci_bus": "00000000:19:00.0"}
