"""ascend-scaffold: render Ascend NPU graph-mode-ready LLM model packages."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ascend-scaffold")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"
