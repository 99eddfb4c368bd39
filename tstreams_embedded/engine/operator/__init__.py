"""What an operator runs against a data directory or a :class:`~..storage.core.Core`:
the offline check (:mod:`.check`), backup and point-in-time restore (:mod:`.backup`), and the
bounded overviews of streams (:mod:`.overview`) and of stream applications
(:mod:`.appgroups`) behind metrics and status pages."""
