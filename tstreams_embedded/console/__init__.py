"""The web console: a read-only JSON API under ``/api/`` and one static page application.

Served by ``tstreams serve --http HOST:PORT`` next to ``/metrics`` and by ``tstreams console
--data DIR`` for an embedded directory (see ``docs/CONSOLE.md``). :mod:`.params` checks the
query parameters, :mod:`.views` computes the answers from the engine's reads (the same rows
as the CLI's ``--json``, :mod:`tstreams_embedded.tools.report`), :mod:`.sampler` keeps the
lag history in a bounded ring, :mod:`.web` holds the Tornado handlers.
"""
