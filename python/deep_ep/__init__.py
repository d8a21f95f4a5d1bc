"""deep_ep compatibility package: `import deep_ep` gets anyep's DeepEP-compatible API."""
from anyep import Buffer, Config, EventOverlap

__all__ = ["Buffer", "Config", "EventOverlap"]
