"""The main demo (``make demo``): a Spark Structured Streaming pipeline on T-streams that is
SIGKILLed halfway, restarted from its checkpoint, and proven exactly-once.

1. 200,000 page-view JSON events (users, pages, event times over one hour) are produced in
   transactions of 500 events across 4 partitions of the stream ``pageviews``.
2. A Spark job (a child process in its own process group) reads them with the ``tstreams``
   source, counts views per page in 5-minute event-time windows with a 2-minute watermark,
   and writes each closed window exactly-once to ``pageview_counts``.
3. When about half of the windows are out, the demo SIGKILLs every process group of the
   job (driver, JVM, PySpark daemon and workers) and starts it again on the same checkpoint.
4. It prints the windows and compares every (window, page) count with counts computed
   directly from the input stream: 0 missing, 0 duplicated, 0 wrong.

Run ``python -m tstreams_embedded.demo --help`` for options (``--endpoint`` runs it against a
remote ``tstreams serve``).
"""
