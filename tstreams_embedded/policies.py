"""What ``Producer.new_transaction`` does when the producer already has open transactions
on the chosen partition (T-streams' ``NewProducerTransactionPolicy``)."""

from __future__ import annotations

import enum


class Policy(enum.Enum):
    """Policy for opening a transaction while others of the same producer are open."""

    #: Keep the open ones and open another (the default).
    EnqueueIfOpened = "enqueue"
    #: Raise :class:`~tstreams_embedded.errors.TransactionAlreadyOpened`.
    ErrorIfOpened = "error"
    #: Checkpoint the open ones first, in the same atomic write as the opening.
    CheckpointIfOpened = "checkpoint"
    #: Cancel the open ones first, in the same atomic write as the opening.
    CancelIfOpened = "cancel"


EnqueueIfOpened = Policy.EnqueueIfOpened
ErrorIfOpened = Policy.ErrorIfOpened
CheckpointIfOpened = Policy.CheckpointIfOpened
CancelIfOpened = Policy.CancelIfOpened
