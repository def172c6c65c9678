"""Talking to a target cluster: credentials, discovery, observation, apply and helm."""
