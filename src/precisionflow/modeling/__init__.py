"""Training and the models: builders (models), the fit loop (training), quantization-aware training (qat),
channel pruning (pruning), and TensorFlow's import (tfenv)."""
