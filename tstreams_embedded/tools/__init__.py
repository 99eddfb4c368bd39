"""What the ``tstreams`` command line and the web console show, and how: the rows of the
reports (:mod:`.report`: describe, lag, reset and delete on the Backend; the rows of queues
and schedules), positions (:mod:`.positions`), item formats (:mod:`.formats`), tables and
JSON lines (:mod:`.output`), hand-written items (:mod:`.produce`), ``--follow``'s waiter
(:mod:`.waiting`) and the number options (:mod:`.params`).

Everything here works through the
:class:`~tstreams_embedded.engine.protocol.backend.Backend` protocol only and opens no
engine: the click commands that open one (``--data`` or ``--connect``) are in
:mod:`tstreams_embedded.commands`, above the network layer and the cluster; the console
(:mod:`tstreams_embedded.console`) sits below them and uses these rows too.
"""
