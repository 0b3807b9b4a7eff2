"""Planning and execution: configurations to content-addressed nodes (plan, flow), running one node
(runner, runlock, why, console), GPU nodes without TensorFlow (remote, gpuslots). What the
library shares with it stands on the ground: nodeio, identity, assets, schema."""
