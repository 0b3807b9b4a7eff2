"""Hydra finds plugins in the `hydra_plugins` namespace package: this one puts the user's
configuration folder (precisionflow --config-dir, or PRECISIONFLOW_CONFIG_DIR) at the front of the
config search path, so its choices add to precisionflow's built-in ones and replace those of the
same name (Hydra takes the first match along the path)."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class PrecisionflowUserConfig(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        try:
            from precisionflow.assets import user_conf_dir
        except ImportError:  # another program's Hydra, or a precisionflow without --config-dir: leave its path alone
            return
        folder = user_conf_dir()
        if folder is not None:
            search_path.prepend(provider="precisionflow-user", path=f"file://{folder}")
