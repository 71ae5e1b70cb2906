"""labkit: a teaching lab on memory and storage in large-model training."""

from labkit.errors import LabkitError

__all__ = ["LabkitError"]
__version__ = "0.1.0"
