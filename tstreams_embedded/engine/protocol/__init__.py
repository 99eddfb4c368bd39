"""The contract between the client API and every backend, with no storage code: the operation
records (:mod:`.ops`), the :class:`~.backend.Backend` protocol and its reply types, argument
validation and limits (:mod:`.validate`), the one read loop over any backend
(:mod:`.iteration`), and the record-level vocabulary of schedules and work queues that both
sides share (:mod:`.schedules`, :mod:`.queuestate`)."""
