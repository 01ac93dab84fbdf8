"""What an operator watches from outside: Prometheus metrics and (optionally) OpenTelemetry traces.

This package sits on the bottom floor: any layer may record into it, and it imports nothing of relay's
above the floor, so the store, the runtime and the fronts all report to the same registry.
"""
