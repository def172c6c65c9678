"""Modelplane: installs and verifies the serving substrate for AI inference."""
