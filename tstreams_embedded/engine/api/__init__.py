"""What users hold: :class:`~.engine.Engine` and the agents it makes (producers, consumers,
subscribers, batches, checkpoint groups, work queues). Written against
:class:`~tstreams_embedded.engine.protocol.backend.Backend` only, so the same code runs
embedded, remote or on a cluster; it imports nothing of :mod:`..storage`."""
