"""Concurrency leases: Lambda's account limit and per-function reservations.

An invocation holds a lease while it runs. A function with reserved
concurrency N runs at most N at once and throttles the N+1st with
ReservedFunctionConcurrentInvocationLimitExceeded; all other functions share
what is left of the account limit and throttle with
ConcurrentInvocationLimitExceeded. Reserving also removes capacity from the
shared pool, and AWS keeps a minimum unreserved share for everyone else.
"""

from __future__ import annotations

from dataclasses import dataclass

from serverless import errors

RESERVED_REASON = "ReservedFunctionConcurrentInvocationLimitExceeded"
ACCOUNT_REASON = "ConcurrentInvocationLimitExceeded"


@dataclass(frozen=True)
class Lease:
    function: str
    reserved: bool  # which bucket it came from, so a later change of reservation releases it right


class ConcurrencyLimiter:
    def __init__(self, account_limit: int = 1000, min_unreserved: int | None = None) -> None:
        self.account_limit = account_limit
        # AWS keeps 100 unreserved; a small emulated account keeps a tenth of itself.
        self.min_unreserved = min(100, account_limit // 10) if min_unreserved is None else min_unreserved
        self.reserved: dict[str, int] = {}
        self.running: dict[str, int] = {}
        self.unreserved_running = 0

    @property
    def unreserved_capacity(self) -> int:
        return self.account_limit - sum(self.reserved.values())

    def check_reservation(self, function: str, value: int) -> None:
        """Raises unless `value` is a count >= 0 that leaves the account its minimum unreserved share."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            # Lambda's model constraint, in its words; a negative was answered with the
            # unreserved-minimum message below, which blamed the account, not the value.
            raise errors.invalid_parameter(
                f"1 validation error detected: Value '{value}' at 'reservedConcurrentExecutions' failed to "
                "satisfy constraint: Member must have value greater than or equal to 0"
            )
        others = sum(v for k, v in self.reserved.items() if k != function)
        left = self.account_limit - others - value
        if left < self.min_unreserved:
            raise errors.invalid_parameter(
                f"Specified ReservedConcurrentExecutions for function decreases account's "
                f"UnreservedConcurrentExecution below its minimum value of [{self.min_unreserved}]."
            )

    def set_reserved(self, function: str, value: int | None) -> None:
        if value is None:
            self.reserved.pop(function, None)
        else:
            self.reserved[function] = value

    def acquire(self, function: str) -> Lease:
        """A lease for one invocation, or a 429 TooManyRequestsException with AWS's Reason."""
        limit = self.reserved.get(function)
        running = self.running.get(function, 0)
        if limit is not None:
            if running >= limit:
                raise errors.throttled(RESERVED_REASON)
            lease = Lease(function, reserved=True)
        else:
            if self.unreserved_running >= self.unreserved_capacity:
                raise errors.throttled(ACCOUNT_REASON)
            self.unreserved_running += 1
            lease = Lease(function, reserved=False)
        self.running[function] = running + 1
        return lease

    def release(self, lease: Lease) -> None:
        self.running[lease.function] = max(0, self.running.get(lease.function, 0) - 1)
        if not lease.reserved:
            self.unreserved_running = max(0, self.unreserved_running - 1)

    def forget(self, function: str) -> None:
        self.reserved.pop(function, None)
