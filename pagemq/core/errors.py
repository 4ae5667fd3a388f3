"""Broker errors as data: one code, one HTTP status and one kind per failure.

The protocol layers translate these into their own replies (a STOMP ERROR frame's `message`
header, an HTTP status with `{"error": ...}`), so the core never needs to know who asked.
"""

from __future__ import annotations


class BrokerError(Exception):
    """A request the broker refuses; `message` is what the client is told."""

    code = "broker-error"
    http_status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(BrokerError):
    code = "not-found"
    http_status = 404


class Conflict(BrokerError):
    """A management action that the broker's state changed under (HTTP 409)."""

    code = "conflict"
    http_status = 409


class InvalidDestination(BrokerError):
    code = "invalid-destination"
    http_status = 400


class InvalidSelector(BrokerError):
    code = "invalid-selector"
    http_status = 400


class AddressFull(BrokerError):
    """FAIL policy (or page-full-policy FAIL): the message was not stored."""

    code = "address-full"
    http_status = 507


class DiskFull(BrokerError):
    code = "disk-full"
    http_status = 507


class UnknownDelivery(BrokerError):
    """ACK/NACK of an id this subscription never delivered or already settled."""

    code = "unknown-delivery"
    http_status = 400


class TransactionError(BrokerError):
    code = "transaction-error"
    http_status = 400


class SubscriptionError(BrokerError):
    code = "subscription-error"
    http_status = 400


class StorageFailure(BrokerError):
    """The journal or a page file could not be written: nothing was acknowledged."""

    code = "storage-failure"
    http_status = 503
