"""Kubernetes access: the guarded transport, the client, discovery and the error rules."""
