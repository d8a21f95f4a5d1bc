"""anyep: portable expert-parallel communication with a DeepEP-compatible Buffer."""
from .buffer import Buffer, Config, EventOverlap

__all__ = ["Buffer", "Config", "EventOverlap"]
