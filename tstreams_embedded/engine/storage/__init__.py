"""The embedded backend: :class:`~.core.Core` implements the Backend protocol on one LMDB
directory. The environment and its files (:mod:`.store`, :mod:`.directory`,
:mod:`.unusable`), the stored formats (:mod:`.keys`, :mod:`.seals`, :mod:`.chunks`,
:mod:`.catalog`, :mod:`.commitlog`, :mod:`.state_stores`), writes (:mod:`.committer`,
:mod:`.apply_base`, :mod:`.apply`, :mod:`.queue_apply`, :mod:`.expiry`) and reads
(:mod:`.reads`, :mod:`.paging`, :mod:`.bulk`, :mod:`.queue_reads`, :mod:`.inspection`,
:mod:`.backup_copies`, :mod:`.state_time_reads`)."""
