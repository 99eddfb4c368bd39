"""Kept so the documented ``tstreams_embedded.engine.iteration`` keeps working: the read loop
lives in :mod:`tstreams_embedded.engine.protocol.iteration`."""
from .protocol.iteration import *  # noqa: F403
