"""Fixtures shared by every test directory: the public plugin of tstreams_embedded.testing
(``tstreams_engine``, ``tstreams_make_server``, ``tstreams_clock``, ``zookeeper``, …)."""

pytest_plugins = ["tstreams_embedded.testing.pytest_plugin"]
