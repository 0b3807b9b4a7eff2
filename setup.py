"""The wheel carries the configuration and the workflow inside the package: conf/ and workflow/ stand
at the repository's top level (the layout Hydra and Snakemake users expect) and are mapped in here, at
build time, as precisionflow/conf and precisionflow/workflow. Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

MAPPED = {"precisionflow.conf": "conf", "precisionflow.workflow": "workflow"}

setup(packages=find_namespace_packages("src") + list(MAPPED), package_dir={"": "src", **MAPPED})
