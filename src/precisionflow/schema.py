"""Structured configuration schema.

Registered in Hydra's ConfigStore as `precisionflow_schema`; conf/config.yaml lists it first in
its defaults, so every key the YAML files or the command line set is checked against these
dataclasses at composition time: an unknown key, a wrong type or an unknown enum value fails
before any job starts.
"""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from precisionflow.budgets import BudgetConf
from precisionflow.detection.boxes import DetectionEvalConf


def _choices(name: str, values: str) -> type:
    """A string Enum whose members are named as their values (configs and node ids hold the strings)."""
    return Enum(name, {value: value for value in values.split()}, type=str)


# The string choices of single keys (the schema refuses anything else, listing these)
DatasetCache = _choices("DatasetCache", "memory disk none")  # none: stages read the source files themselves
LrSchedule = _choices("LrSchedule", "constant cosine")
Optimizer = _choices("Optimizer", "adam sgd rmsprop")
AtChance = _choices("AtChance", "warn stop")
PruneCriterion = _choices("PruneCriterion", "l1 l2")
CudnnSearch = _choices("CudnnSearch", "EXHAUSTIVE HEURISTIC DEFAULT")
Backend = _choices("Backend", "onnxruntime tensorrt")
OptimizationLevel = _choices("OptimizationLevel", "disabled basic extended all")
Task = _choices("Task", "classification detection")


class CalibrationMethod(str, Enum):
    entropy = "entropy"
    minmax = "minmax"
    percentile = "percentile"


class SamplingRule(str, Enum):
    stratified = "stratified"  # each class (and condition) in proportion to the split, seeded
    random = "random"  # seeded, ignoring classes
    first = "first"  # the first files in listing order: class by class on a folder; kept to reproduce old caches


class PrecisionPolicy(str, Enum):
    fp32 = "fp32"
    mixed_float16 = "mixed_float16"
    mixed_bfloat16 = "mixed_bfloat16"


@dataclass
class SceneConf:
    """shadow_cars' generator: how long and dark shadows are, how large and bright the vehicles.
    The defaults are the scenes every earlier run drew (same seed, same scenes)."""

    shadow_reach: List[float] = field(default_factory=lambda: [0.6, 1.0])  # shadow length / vehicle length
    shadow_darkness: List[float] = field(default_factory=lambda: [0.35, 0.55])  # ground brightness kept in shadow
    vehicle_scale: float = 1.0  # vehicle size against the 64-pixel scene's defaults
    vehicle_colour: List[int] = field(default_factory=lambda: [60, 256])  # body colour range (low = less contrast)


@dataclass
class DatasetConf:
    name: str = "digits"  # digits | image_folder
    # image_folder: the folder of class sub-folders (or of train/ val/ test/ folders of them).
    path: Optional[str] = None
    image_size: List[int] = field(default_factory=lambda: [32, 32])  # height, width (image_folder)
    channels: int = 3  # 1 = grey, 3 = RGB (image_folder)
    # Fractions of the whole data set held out for validation and test (stratified, seeded).
    val_fraction: float = 0.1
    test_fraction: float = 0.25
    seed: int = 0
    # Keep only this many samples (stratified) -- for quick experiments and tests.
    max_samples: Optional[int] = None
    # How training reads the images: memory = whole splits as float32 arrays (fast, small data sets);
    # disk = streamed from the data node's uint8 file by tf.data (memory bounded, any size);
    # none = the data node keeps file lists only and every stage decodes the images it reads.
    cache: DatasetCache = DatasetCache.memory
    # shadow_cars: how many scenes to generate (split by val_fraction / test_fraction).
    num_images: Optional[int] = None
    # image_folder, coco_folder: a CSV of conditions per image (header 'file,conditions'; tags separated by ';').
    conditions: Optional[str] = None
    scene: SceneConf = field(default_factory=SceneConf)  # shadow_cars only


@dataclass
class ModelConf:
    name: str = "small_cnn"  # small_cnn | resnet_mini | resnet50 | mobilenet_v2 | keras_file | center_net (detection)
    width: float = 1.0  # channel multiplier (small_cnn, resnet_mini; MobileNetV2's alpha)
    filters: List[int] = field(default_factory=lambda: [16, 32])  # small_cnn
    dense_units: int = 64  # small_cnn
    dropout: float = 0.0  # small_cnn
    stages: int = 3  # resnet_mini
    blocks_per_stage: int = 1  # resnet_mini
    weights: Optional[str] = None  # resnet50 / mobilenet_v2: a local weights file; null = from scratch
    path: Optional[str] = None  # keras_file: .keras / .h5 / SavedModel folder
    trust: bool = False  # keras_file: allow code (Lambda layers) in the file
    # Momentum of every BatchNorm layer (resnet_mini, resnet50, mobilenet_v2, keras_file). Keras
    # applications ship 0.99-0.999, too slow for short trainings: the moving statistics stay near
    # their initial values and the model scores chance in inference mode.
    bn_momentum: float = 0.9


@dataclass
class TrainConf:
    epochs: int = 12
    batch_size: int = 64
    learning_rate: float = 0.003
    lr_schedule: LrSchedule = LrSchedule.constant
    optimizer: Optimizer = Optimizer.adam
    seed: int = 0
    # Stop when validation accuracy has not improved for this many epochs (0 = never).
    early_stopping_patience: int = 0
    # Keep the weights of the epoch with the best validation top-1 (else the last epoch's): every
    # verdict is relative to this model, and validation top-1 can swing from epoch to epoch.
    keep_best_epoch: bool = True
    precision_policy: PrecisionPolicy = PrecisionPolicy.fp32
    # A training whose validation top-1 stays below 1.5x chance learned nothing: `warn` says so
    # loudly (console, table, report) and goes on; `stop` fails it before any engine is built.
    # A threshold, not a parameter: changing it re-checks the finished training, never retrains.
    at_chance: AtChance = AtChance.warn


class FinetuneMode(str, Enum):
    none = "none"
    fp32 = "fp32"
    mixed_float16 = "mixed_float16"
    mixed_bfloat16 = "mixed_bfloat16"
    qat = "qat"


@dataclass
class FinetuneConf:
    # Fine-tuning after training. int8_qat engines always come from a qat fine-tune with these
    # settings; mode here chooses what the fp32/fp16/int8 engines are built from.
    mode: FinetuneMode = FinetuneMode.none
    epochs: int = 3
    batch_size: int = 64
    learning_rate: float = 0.0005
    seed: int = 0
    # qat: layer names left unquantized (the final "logits" layer always is, as deployment keeps it float).
    exclude_layers: List[str] = field(default_factory=list)


@dataclass
class ExportConf:
    opset: int = 17
    # The exported graph is accepted when max |onnx - keras| logit difference on the test split is at
    # most max_abs_diff + rtol * max |keras logit| (numpy's allclose, relative to the logits' scale):
    # float rounding through 50 layers grows with the logits, a wrong conversion does not hide in it.
    max_abs_diff: float = 1e-3
    rtol: float = 1e-3


@dataclass
class Fp16Conf:
    # Ops kept in fp32 inside fp16 graphs (ops known to overflow or lose range in fp16).
    op_block_list: List[str] = field(default_factory=lambda: ["Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "Exp", "Pow"])


@dataclass
class CalibrationConf:
    method: CalibrationMethod = CalibrationMethod.entropy
    percentile: float = 99.999  # used by method=percentile
    num_samples: int = 256
    batch_size: int = 32
    # train or val: calibration is a decision, and decisions never look at the test split.
    split: str = "train"
    # How the sample is drawn from the split (also int8_mixed's ranking sample, int8.report_samples).
    sampling: SamplingRule = SamplingRule.stratified
    seed: int = 0
    # Planning warns, naming them, about classes (and conditions) the sample would hold fewer images of than this.
    min_per_class: int = 8
    # Images carrying any of these condition tags are never drawn: calibrate on, e.g., scenes without
    # long shadows to see what an engine calibrated on daytime frames does at dusk.
    exclude_conditions: List[str] = field(default_factory=list)
    # Header version of the TensorRT-native cache (TRT-<MMmmpp>-<calibrator>, the calibrator named after the
    # method that made the ranges: EntropyCalibration2, MinMaxCalibration, LegacyCalibration): TensorRT
    # ignores a cache whose version differs from its own, so set the version your users deploy.
    tensorrt_version: str = "10.14.1"


@dataclass
class Int8Conf:
    # Node names (as in the exported ONNX) never quantized.
    exclude_nodes: List[str] = field(default_factory=list)
    # Keep the final (classifier) layer in floating point, as TensorRT/TLT recipes do.
    keep_output_layer: bool = True
    # int8_mixed, accuracy-driven: keep ops in float, most sensitive first (each op's effect on the
    # outputs measured alone), as few as bisection finds that keep top-1 on `report_split` within
    # this many points of fp32 (a detector's search holds its spurious-box budgets instead, any value
    # here turns it on). null: keep exactly `mixed_keep_fp` ops (ranked by per-tensor error).
    mixed_max_val_drop: Optional[float] = 2.0
    # int8_mixed with mixed_max_val_drop=null: how many of the most damaged quantized ops to leave in float.
    mixed_keep_fp: int = 1
    # Samples of `report_split` used for the per-tensor error report (which int8_mixed ranks by):
    # train or val, never test -- the test split only scores.
    report_samples: int = 128
    report_split: str = "val"
    # On a CPU target, int8 engines run ONNX Runtime's own placement (integer kernels); the
    # TensorRT-placed graph is also evaluated there, as a labelled simulation of what TensorRT
    # computes (accuracy only: its speed on a CPU says nothing of TensorRT's).
    simulate_tensorrt: bool = True


class PruneMethod(str, Enum):
    none = "none"  # pass-through: no node
    channel = "channel"  # structured filter pruning: fewer channels (precisionflow/pruning.py)
    sparse24 = "sparse24"  # 2:4 structured sparsity (tfmot), for TensorRT's sparse tensor cores


@dataclass
class PruneConf:
    method: PruneMethod = PruneMethod.none
    # channel: rank each layer's output channels by the L1/L2 norm of their filters (x |BatchNorm
    # gamma| with bn_scale), remove `ratio` of them -- or keep those scoring >= `threshold` of the
    # best -- in multiples of `granularity` (tensor cores like 8), never below `min_channels`.
    criterion: PruneCriterion = PruneCriterion.l1
    ratio: float = 0.5
    threshold: Optional[float] = None
    granularity: int = 8
    min_channels: int = 8
    bn_scale: bool = False
    exclude_layers: List[str] = field(default_factory=list)  # left alone (the head always is)
    # sparse24: epochs of training with the 2:4 masks before they are stripped.
    epochs: int = 2
    batch_size: int = 64
    learning_rate: float = 0.0005
    seed: int = 0


@dataclass
class OrtCudaConf:
    """ONNX Runtime's CUDA provider settings that decide speed on a GPU (read only where a target
    runs on one: devices.runs_on_gpu). The defaults are a GPU's best: TF32, NHWC kernels, CUDA
    graphs and fused Conv+bias where the build measures it faster (docs/hardware.md)."""

    prefer_nhwc: bool = True  # channels-last kernels (tensor cores want NHWC)
    cuda_graph: bool = True  # capture one CUDA graph per batch size and replay it (static shapes)
    cudnn_conv_algo_search: CudnnSearch = CudnnSearch.EXHAUSTIVE
    use_tf32: bool = True  # fp32 convolutions/matmuls on TF32 tensor cores: an "fp32" engine is TF32 unless off
    # cuDNN's fused Conv+bias(+activation) kernels. Without it every Conv bias (a BatchNorm's shift,
    # folded at export) is one more pass over the activations; on some graphs the fused kernels are
    # slower (docs/hardware.md): true = the build times it both ways at the engine's largest batch and
    # keeps it where faster. Batch-1 calls from threads sharing one session can lose what batches
    # gain (docs/hardware.md, "Batch-1 streams"): false for such a service.
    fuse_conv_bias: bool = True


@dataclass
class EngineConf:
    backend: Backend = Backend.onnxruntime
    # onnxruntime graph optimisation level used when the engine is built: basic | extended | all
    optimization_level: OptimizationLevel = OptimizationLevel.all
    intra_op_threads: int = 1
    # TensorRT: builder optimisation level 0-5, workspace, one profile per input (batch range,
    # and the spatial sizes of dynamic non-batch dims), 2:4 sparse weights.
    trt_builder_optimization_level: int = 3
    trt_workspace_mb: int = 4096
    min_batch: int = 1
    opt_batch: int = 32
    max_batch: int = 64
    min_spatial: List[int] = field(default_factory=list)
    opt_spatial: List[int] = field(default_factory=list)
    max_spatial: List[int] = field(default_factory=list)
    sparse_weights: bool = False
    # TensorRT 10 only, off by default: build int8 / int8_qat engines weakly typed, letting their
    # unquantized layers run in fp16 (trtexec --int8 --fp16). Never for int8_mixed (its float ops were
    # chosen in fp32); TensorRT 11 is always strongly typed. The label says which typing was used.
    trt_int8_fp16: bool = False
    onnxruntime: OrtCudaConf = field(default_factory=OrtCudaConf)


@dataclass
class TargetConf:
    # cuda | cpu | auto (`local` only: this machine's GPU where it has one, else its CPU; a named
    # target declares its device, so a plan is the same wherever it is made).
    device: str = "auto"
    # Expected device name substring (e.g. "H100"); empty = accept whatever this machine has.
    expect_device: str = ""
    # Scheduler resources (Snakemake `resources:`) that land a job on such a machine.
    resources: Dict[str, Any] = field(default_factory=dict)
    # Timing settings for this target that replace `evaluate`'s (e.g. trtexec's 3 s windows on GPUs).
    timing: Dict[str, Any] = field(default_factory=dict)
    # The engine backend's version on that target's machines (a GPU node image): part of engine ids,
    # and a build with another version refuses to run. Empty: for `local`, the version installed here;
    # for a named target, whatever its building machine has, read there and recorded in engine.json
    # (the planning machine's version never enters a named target's ids).
    backend_version: str = ""
    # Serving settings for this target that replace evaluate.serving's (e.g. longer LoadGen runs on a GPU).
    serving: Dict[str, Any] = field(default_factory=dict)
    # Time TensorFlow there too (benchmark_framework, and the x_tf ratios)? false for GPU nodes
    # that carry no TensorFlow: their engines are compared with their fp32 engine only.
    framework: bool = True
    # The integer dot product of the CPU its int8 engines run on (ONNX Runtime's CPU placement):
    # avx512_vnni | avx_vnni | asimddp (products summed in 32 bits: 8-bit weights) | none (summed in
    # 16 bits, which saturate: 7-bit weights). Declared, it is in the int8 graph's id; empty, it is
    # read where the int8 graph is made and recorded there (never on the machine that plans).
    cpu_dot_product: str = ""


class Scenario(str, Enum):
    SingleStream = "SingleStream"
    MultiStream = "MultiStream"
    Server = "Server"
    Offline = "Offline"


class NextBatch(str, Enum):
    when_ready = "when_ready"
    when_gpu_frees = "when_gpu_frees"


@dataclass
class ServingConf:
    """Serving under a latency bound (the serve_engine stage, MLPerf LoadGen): per engine and the fp32
    engine of its target, in one job. Durations here are shorter than MLPerf's 600 s: a run is
    labelled "not MLPerf-valid" unless min_duration_ms >= 600000."""

    enabled: bool = True
    scenarios: List[Scenario] = field(default_factory=lambda: [Scenario.SingleStream, Scenario.Server])
    # null: 15 ms on a GPU (MLPerf's ResNet-50 datacenter Server bound), 33 ms on a CPU (one frame
    # at 30 fps: a camera's answer due before its next frame).
    latency_bound_ms: Optional[float] = None
    percentile: float = 0.99
    min_duration_ms: int = 1000
    min_query_count: int = 500  # with no query over the bound, a p99 claim needs ~459 (LoadGen's early stopping)
    max_batch: int = 8  # the SUT's batching: up to this many queries per engine call ...
    max_wait_ms: float = 1.0  # ... waiting at most this long for a batch to fill
    workers: int = 1  # threads calling the engine; on a GPU each is an instance: sessions, stream, CUDA graphs of its own
    # On a GPU, when Server queues the next batch behind the one running: when_ready (once full, or
    # once its first query waited max_wait; batches sized so 3 calls + the wait fit the bound) or
    # when_gpu_frees (it fills until the GPU is about to be free; 2 calls + the wait: larger batches).
    server_next_batch: NextBatch = NextBatch.when_ready
    search_precision: float = 0.1  # the Server rate is bisected until its bracket is within 10%
    # Independent Server searches per side (each its own arrival schedule), run in pairs with the
    # fp32 side's in alternating order: the ratio's interval is the t interval of the pairs' log
    # ratios (2 at least); any search with no valid rate withholds it.
    search_repeats: int = 2
    # The search's probing runs (null: min_duration_ms). Set shorter, 0.8x Offline runs at full length
    # first and the short probes search only where full-length runs find no rate: on the H200 one
    # engine call in a few thousand stalls ~20 ms, which fails a 4-s run at any rate while 60-s runs
    # at 0.8x Offline pass. Every rate reported is from a run of min_duration_ms.
    search_duration_ms: Optional[int] = None
    # With short probes, a 0.8x Offline that holds climbs by 0.05x Offline in at most this many more
    # full-length runs (the first INVALID stops it, the runs left halve that last step): the GPU
    # targets use 5 (0.85, 0.90 failing, 0.875, 0.8875 failing, 0.88125). One that fails steps down
    # the same way (0.75, 0.70, ...) before the short probes search.
    full_length_climb: int = 0
    coalesce_queries: bool = True  # LoadGen hands the SUT the queries due while it was busy in one call
    seed: int = 1


@dataclass
class EvaluateConf:
    batch_size: int = 64
    timing_batch_sizes: List[int] = field(default_factory=lambda: [1, 32])
    warmup_s: float = 0.2
    duration_s: float = 0.5
    min_iterations: int = 10
    # Timed windows per batch size; their spread (CV) says how far figures can be trusted.
    repeats: int = 3
    # Concurrent streams (each its own engine instance and thread), at stream_batch_size each.
    streams: List[int] = field(default_factory=lambda: [4])
    stream_batch_size: int = 1
    detection: DetectionEvalConf = field(default_factory=DetectionEvalConf)
    # Ratios (engine vs fp32 engine vs TensorFlow) come from one job timing the sides in
    # alternating rounds (A B C, C B A, ...): this many rounds of one window per side and setting.
    ratio_rounds: int = 12
    ratio_window_s: float = 0.1
    # Release budgets per engine (precisionflow check, and the end of precisionflow run): `budget`
    # for every precision; `budgets.<precision>` replaces the keys it sets (null switches a check off).
    budget: BudgetConf = field(default_factory=BudgetConf)
    budgets: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    # Verdicts read each accuracy delta's interval at this confidence (paired samples: the same test
    # images through both engines). PASS = the interval clears the budget, FAIL = it lies beyond
    # it, UNDECIDED = it straddles it; `check` fails on UNDECIDED unless accept_undecided.
    confidence: float = 0.95
    accept_undecided: bool = False
    serving: ServingConf = field(default_factory=ServingConf)


@dataclass
class TrackingConf:
    enabled: bool = True
    # null = SQLite store at results/mlflow.db; a team points this at `mlflow server`.
    uri: Optional[str] = None
    experiment: str = "precisionflow"


@dataclass
class OnGpuConf:
    """Timing and serving settings for every target that runs on a GPU (devices.runs_on_gpu: device
    `cuda`, or `auto` -- the default `local` -- on a machine with an NVIDIA GPU). They replace
    `evaluate`'s; a target's own `timing`/`serving` replace these. Keys are checked like a target's."""

    timing: Dict[str, Any] = field(default_factory=dict)
    serving: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Config:
    # classification (top-1, flipped samples) or detection (mAP, spurious/lost boxes): one DAG, the
    # stages that differ (data, training loss, evaluation, report) dispatch on it.
    task: Task = Task.classification
    dataset: DatasetConf = field(default_factory=DatasetConf)
    model: ModelConf = field(default_factory=ModelConf)
    train: TrainConf = field(default_factory=TrainConf)
    prune: PruneConf = field(default_factory=PruneConf)
    finetune: FinetuneConf = field(default_factory=FinetuneConf)
    export: ExportConf = field(default_factory=ExportConf)
    # Names from the precision registry (precisions/: one file per precision), checked in compose.validate.
    precisions: List[str] = field(
        default_factory=lambda: ["fp32", "fp16", "int8", "int8_qat"]
    )  # as conf/config.yaml (a test holds them equal)
    fp16: Fp16Conf = field(default_factory=Fp16Conf)
    calibration: CalibrationConf = field(default_factory=CalibrationConf)
    int8: Int8Conf = field(default_factory=Int8Conf)
    engine: EngineConf = field(default_factory=EngineConf)
    targets: List[str] = field(default_factory=lambda: ["local"])
    target_defs: Dict[str, TargetConf] = field(default_factory=lambda: {"local": TargetConf()})
    # Scheduler resources per stage (Snakemake `resources:`, e.g. on SLURM slurm_partition, gpu,
    # gpu_model, mem_mb, runtime): where a job runs, never what it computes, so not in node ids.
    # An engine stage's target resources override these.
    stage_resources: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    evaluate: EvaluateConf = field(default_factory=EvaluateConf)
    on_gpu: OnGpuConf = field(default_factory=OnGpuConf)
    tracking: TrackingConf = field(default_factory=TrackingConf)
    # Where results/ lives; null = ./results of the working directory.
    results_dir: Optional[str] = None


def register(node: type = Config) -> None:
    """Register the schema with Hydra's ConfigStore (idempotent). `node`: Config, or Config with the
    plug-in precisions' own sections (config/compose.py, with_precision_sections)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="precisionflow_schema", node=node)
