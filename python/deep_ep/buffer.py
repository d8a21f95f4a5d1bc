"""deep_ep.buffer: the module deep_ep's Buffer lives in (anyep's Buffer, Config, EventHandle)."""
from anyep.buffer import Buffer, Config, EventHandle, EventOverlap, check_nvlink_connections  # noqa: F401

__all__ = ["Buffer", "Config", "EventHandle", "EventOverlap", "check_nvlink_connections"]
