"""Kept so the documented ``tstreams_embedded.engine.backup`` keeps working: backup and
restore live in :mod:`tstreams_embedded.engine.operator.backup`."""
from .operator.backup import *  # noqa: F403
