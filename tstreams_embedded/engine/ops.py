"""Kept so the documented ``tstreams_embedded.engine.ops`` keeps working: the operation
records live in :mod:`tstreams_embedded.engine.protocol.ops`."""
from .protocol.ops import *  # noqa: F403
