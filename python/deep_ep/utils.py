"""deep_ep.utils: EventOverlap, EventHandle and check_nvlink_connections (anyep's)."""
from anyep.event import EventHandle, EventOverlap  # noqa: F401
from anyep.utils import check_nvlink_connections  # noqa: F401

__all__ = ["EventHandle", "EventOverlap", "check_nvlink_connections"]
