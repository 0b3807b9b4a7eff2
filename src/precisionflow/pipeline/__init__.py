"""Planning and execution: configurations to content-addressed nodes (plan, flow, identity), running one node
(runner, nodeio, runlock, joblog, why), GPU nodes without TensorFlow (remote), the packaged files (assets)."""
