"""A ``tstreams`` sink that crashes once in ``commit``, before or after the engine write.

It is the real sink (a subclass, registered as format ``tstreams_crashing``) with a fault
injected at the two moments that matter for exactly-once: the driver dying *before* the
atomic marker+checkpoint write, and dying *after* it but before Spark records the batch in
its own commit log. Options ``crashAt`` (``before:<batchId>`` / ``after:<batchId>``) and
``crashOnce`` (a file created on the first crash, so the restarted query does not crash).
"""

from __future__ import annotations

import os

from tstreams_embedded.spark import TStreamsDataSource
from tstreams_embedded.spark.writer import TStreamsStreamWriter


class InjectedCrash(RuntimeError):
    pass


class CrashingStreamWriter(TStreamsStreamWriter):
    crash_at: str = ""
    once_file: str = ""

    def _crash(self, when: str, batch_id: int) -> None:
        if self.crash_at == f"{when}:{batch_id}" and not os.path.exists(self.once_file):
            with open(self.once_file, "w") as f:
                f.write(f"{when} {batch_id}\n")
            raise InjectedCrash(f"injected crash {when} commit of batch {batch_id}")

    def commit(self, messages, batchId):  # noqa: N803 - Spark's name
        self._crash("before", batchId)
        super().commit(messages, batchId)
        self._crash("after", batchId)


class CrashingDataSource(TStreamsDataSource):
    @classmethod
    def name(cls) -> str:
        return "tstreams_crashing"

    def streamWriter(self, schema, overwrite):
        crash_at = self.options.pop("crashAt", "")
        once = self.options.pop("crashOnce", "")
        base = super().streamWriter(schema, overwrite)
        writer = CrashingStreamWriter(base.options, base.schema)
        writer.crash_at = crash_at
        writer.once_file = once
        return writer
