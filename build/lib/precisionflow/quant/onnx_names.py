"""Where a Keras layer's output lives in the ONNX graph tf2onnx exported.

tf2onnx names nodes by TensorFlow scope: "<model>/<layer>/<op>". A layer's output tensor is the
one produced inside its scope and read outside it (or a graph output). QAT learns ranges per
layer; this turns them into ranges per ONNX tensor, the names quantization and TensorRT use.
"""

from typing import Dict, Optional


def _layer_of(node_name: str, model_name: str) -> Optional[str]:
    prefix = f"{model_name}/"
    return node_name[len(prefix) :].split("/")[0] if node_name.startswith(prefix) else None


def layer_output_tensors(model_proto, model_name: str) -> Dict[str, str]:
    """{keras layer name: ONNX tensor holding that layer's output}."""
    layer_of_tensor = {}
    for node in model_proto.graph.node:
        for tensor in node.output:
            # A folded BatchNorm's output keeps the BatchNorm's name on a node named after the conv:
            # the tensor's own scope says which layer's output it is.
            layer_of_tensor[tensor] = _layer_of(tensor, model_name) or _layer_of(node.name, model_name)
    graph_outputs = {out.name for out in model_proto.graph.output}
    outputs: Dict[str, str] = {}
    for node in model_proto.graph.node:  # topological order: a later write wins
        consumer_layer = _layer_of(node.name, model_name)
        for tensor in node.input:
            producer_layer = layer_of_tensor.get(tensor)
            if producer_layer and producer_layer != consumer_layer:
                outputs[producer_layer] = tensor
    for tensor in graph_outputs:
        if layer_of_tensor.get(tensor):
            outputs[layer_of_tensor[tensor]] = tensor
    return outputs


def map_ranges(model_proto, model_name: str, layer_ranges: Dict[str, list], input_key: str):
    """Layer-keyed ranges -> (tensor-keyed ranges, layers with no tensor in this graph).

    The model input maps to the graph input."""
    outputs = layer_output_tensors(model_proto, model_name)
    mapped, unmapped = {}, []
    for layer, bounds in layer_ranges.items():
        if layer == input_key:
            mapped[model_proto.graph.input[0].name] = bounds
        elif layer in outputs:
            mapped[outputs[layer]] = bounds
        else:
            unmapped.append(layer)
    return mapped, sorted(unmapped)
