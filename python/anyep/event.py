"""EventHandle and EventOverlap: a CUDA event, and the event plus the tensors that must live until it
completes (deep_ep's EventHandle and EventOverlap)."""
from typing import Any, Optional, Tuple

import torch


class EventHandle:
    """
    A CUDA event recorded on a stream when it is made (deep_ep_cpp.EventHandle).

    Attributes:
        event: the recorded `torch.cuda.Event`.
    """

    __slots__ = ("event",)

    def __init__(self, stream: Optional[torch.cuda.Stream] = None) -> None:
        """
        Record a new event.

        Arguments:
            stream: the stream to record on; None records on the current stream
                (`torch.cuda.current_stream()`), as deep_ep's `EventHandle()` does.
        """
        self.event = torch.cuda.Event()
        self.event.record(stream)

    def current_stream_wait(self) -> None:
        """
        Make the current stream (`torch.cuda.current_stream()`) wait for the event.
        """
        torch.cuda.current_stream().wait_event(self.event)


class EventOverlap:
    """
    An EventHandle plus the tensors that must stay alive until it completes (as deep_ep's). The
    asynchronous low-latency calls keep their inputs and outputs here instead of calling
    `record_stream`, which CUDA graph capture does not allow. Usable as a context manager: leaving
    the `with` block makes the current stream wait for the event.

    Attributes:
        event: the EventHandle, or None for calls that did not run asynchronously.
        extra_tensors: tensors kept alive with the event.
    """

    __slots__ = ("event", "extra_tensors")

    def __init__(self, event: Optional[EventHandle] = None, extra_tensors: Optional[Tuple[Any, ...]] = None):
        """
        Wrap an event.

        Arguments:
            event: the EventHandle, or None.
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
        self.event.current_stream_wait()

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
            self.event.current_stream_wait()
