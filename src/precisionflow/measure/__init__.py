"""Engines' speed: trtexec-style windows (timing), what a timing job measures (speed), what a target
asks of its engines (targets), and the TensorFlow baseline behind the engine interface (keras_runner)."""
