"""Checks of a target cluster against the requirements of a stack (Provided mode)."""

from modelplane.checks.checker import check_results, run_checks, summarize

__all__ = ["check_results", "run_checks", "summarize"]
