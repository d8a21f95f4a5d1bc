"""EventOverlap: a CUDA event plus the tensors that must live until it completes (as deep_ep)."""
from typing import Any, Optional, Tuple

import torch


class EventOverlap:
    def __init__(self, event: Optional[torch.cuda.Event] = None, extra_tensors: Optional[Tuple[Any, ...]] = None):
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self) -> None:
        """Make the current stream wait for the event."""
        assert self.event is not None, "EventOverlap has no event"
        torch.cuda.current_stream().wait_event(self.event)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        if self.event is not None:
            self.current_stream_wait()
