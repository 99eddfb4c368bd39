"""The operator commands of ``tstreams`` (click): streams, consumers, queues, schedules and
backups.

Every command works on a data directory (``--data``, embedded) or on a server or cluster
(``--connect``): :mod:`.target` opens the ``Engine`` (``ts.open`` or ``ts.connect``, so this
package sits above :mod:`tstreams_embedded.net` and :mod:`tstreams_embedded.cluster`). The
rows, formats and output they print are in :mod:`tstreams_embedded.tools`.
"""
