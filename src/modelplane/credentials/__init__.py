"""Credentials of a target: the kubeconfig and cloud identities read from the hub."""
