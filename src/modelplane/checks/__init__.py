"""Checks of a target cluster against the requirements of a stack (Provided mode)."""

from modelplane.checks.checker import observe_for_check, run_checks

__all__ = ["observe_for_check", "run_checks"]
