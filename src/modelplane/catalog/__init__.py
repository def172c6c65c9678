"""The component catalog: every fact about the substrate, as data."""
