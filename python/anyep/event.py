"""EventOverlap: a CUDA event plus the tensors that must live until it completes (as deep_ep)."""
from typing import Any, Optional, Tuple

import torch


class EventOverlap:
    """
    A CUDA event plus the tensors that must stay alive until it completes (as deep_ep's). Usable as
    a context manager: leaving the `with` block makes the current stream wait for the event.

    Attributes:
        event: the CUDA event, or None for calls that did not run asynchronously.
        extra_tensors: tensors kept alive with the event.
    """

    def __init__(self, event: Optional[torch.cuda.Event] = None, extra_tensors: Optional[Tuple[Any, ...]] = None):
        """
        Wrap an event.

        Arguments:
            event: the CUDA event, or None.
            extra_tensors: tensors to keep alive until the event completes.
        """
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self) -> None:
        """
        Make the current stream (`torch.cuda.current_stream()`) wait for the event. The event must
        be set (the call ran with `async_finish=True`).
        """
        assert self.event is not None, "EventOverlap has no event"
        torch.cuda.current_stream().wait_event(self.event)

    def __enter__(self):
        """
        Enter a `with` block (the communication overlaps the block's work).

        Returns:
            self: this EventOverlap.
        """
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        """
        Leave a `with` block: the current stream waits for the event, if there is one.

        Arguments:
            exc_type: the type of the exception leaving the block, or None.
            exc_val: the exception, or None.
            exc_tb: its traceback, or None.
        """
        if self.event is not None:
            self.current_stream_wait()
