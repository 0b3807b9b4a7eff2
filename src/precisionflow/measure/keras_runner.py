"""The TensorFlow baseline behind the engine interface, for the timing stages (benchmark_framework,
compare_speed): a loaded Keras model whose prepare(batch) gives a run-once callable."""


class KerasRunner:
    """The engine interface (prepare -> run-once callable) over a Keras model."""

    has_device_copies = False

    def __init__(self, tf, model):
        self.tf = tf
        self.forward = tf.function(lambda x: model(x, training=False))

    def prepare(self, batch, include_copies: bool = False):
        inputs = self.tf.constant(batch)
        self.forward(inputs)  # trace once, outside the timed window
        return lambda: self.forward(inputs).numpy()  # .numpy() waits for the result
