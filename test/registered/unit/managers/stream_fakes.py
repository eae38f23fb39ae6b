"""Recording stand-ins for a device module's streams and events (torch.cuda).

FutureMap takes `device_module` from its device; the tests put a
`FakeDeviceModule` there (and set `_has_events`) to check, without a GPU,
which stream waits on which event and when. Every event remembers the stream
and the moment (a "publish" label the test sets) of its last record, so a
wait can be traced back to the write it really orders after. Imported as a
sibling module, like schedule_batch_fakes.
"""

import contextlib


class FakeEvent:
    def __init__(self, device_module):
        self.dm = device_module
        self.recorded_at = None  # (stream name, label) of the last record

    def record(self):
        self.recorded_at = (self.dm.active.name, self.dm.label)
        self.dm.log.append("record")


class FakeStream:
    def __init__(self, name, device_module):
        self.name, self.dm = name, device_module

    def wait_event(self, event):
        self.dm.log.append(f"{self.name}.wait_event")
        self.dm.waits.append((self.name, event.recorded_at))

    def synchronize(self):
        self.dm.log.append(f"{self.name}.synchronize")


class FakeDeviceModule:
    """Streams, events and a stream context; the schedule stream is current."""

    def __init__(self):
        self.log = []  # call order: "record", "<stream>.wait_event", ...
        self.waits = []  # (waiting stream, event.recorded_at) per wait
        self.label = None  # what the test is doing now, stamped on records
        self.schedule_stream = FakeStream("schedule", self)
        self.forward_stream = FakeStream("forward", self)
        self.active = self.schedule_stream

    def Event(self):
        return FakeEvent(self)

    def Stream(self, name="copy"):
        return FakeStream(name, self)

    def current_stream(self):
        return self.active

    @contextlib.contextmanager
    def stream(self, s):
        prev, self.active = self.active, s
        self.log.append(f"enter {s.name}")
        try:
            yield
        finally:
            self.active = prev
            self.log.append(f"exit {s.name}")


def use_fake_streams(future_map):
    """Wire a CPU FutureMap like a CUDA one's event handling; returns the fake."""
    dm = FakeDeviceModule()
    future_map.device_module = dm
    future_map._has_events = True
    return dm
