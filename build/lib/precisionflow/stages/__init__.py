"""One module per workflow stage; each exposes run(params, inputs, out) -> summary dict."""
